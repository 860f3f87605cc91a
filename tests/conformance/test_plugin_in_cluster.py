"""The plugin in a pod (the pod's service account is a cluster given) and --non-disruptive (only the layers that
leave running workloads alone), without a cluster: collection only."""

from __future__ import annotations

import pytest
from inventories import write_inventory

SUITE = {
    "test_a_host.py": "import pytest\npytestmark = pytest.mark.host\ndef test_driver(node):\n    pass\n",
    "test_b_gpu.py": "import pytest\npytestmark = pytest.mark.gpu\ndef test_count(node):\n    pass\n",
    "test_c_node.py": "import pytest\npytestmark = pytest.mark.node\ndef test_ready(node, cluster):\n    pass\n",
    "test_d_workloads.py": "import pytest\npytestmark = pytest.mark.workloads\ndef test_pod(node, cluster):\n    pass\n",
    "test_e_metrics.py": "import pytest\npytestmark = pytest.mark.metrics\ndef test_series(node, cluster):\n    pass\n",
    "test_f_policy.py": "import pytest\npytestmark = pytest.mark.policy\ndef test_taints(node, cluster):\n    pass\n",
    "test_g_diag.py": "import pytest\npytestmark = pytest.mark.diag\ndef test_bandwidth(node):\n    pass\n",
    "test_h_plain.py": "def test_not_conformance():\n    pass\n",
}


@pytest.fixture
def two_node_inventory(make_node):
    node = make_node("l4-1")
    data = node.inventory_data()
    return write_inventory(node.inventory(), [("gpu-node-1", data), ("gpu-node-2", data)])


@pytest.fixture
def no_cluster(monkeypatch, tmp_path):
    """Not in a pod, no $KUBECONFIG (whatever the machine running these tests is)."""
    from gpuready import arguments

    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(arguments, "SERVICE_ACCOUNT_DIR", str(tmp_path / "no-service-account"))


@pytest.fixture
def in_a_pod(no_cluster, monkeypatch, tmp_path):
    from gpuready import arguments

    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("t")
    (account / "ca.crt").write_text("ca")
    monkeypatch.setattr(arguments, "SERVICE_ACCOUNT_DIR", str(account))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")


def collected(pytester: pytest.Pytester, inventory, *args: str) -> list[str]:
    pytester.makepyfile(**{name.removesuffix(".py"): body for name, body in SUITE.items()})
    result = pytester.runpytest_inprocess(
        "--inventory", str(inventory), "--collect-only", "-q", "-p", "no:cacheprovider", *args
    )
    assert result.ret == 0, result.stdout.str()
    return [line.rsplit("/", 1)[-1] for line in result.stdout.lines if "::" in line]


def test_without_a_cluster_the_cluster_checks_are_deselected(pytester, two_node_inventory, no_cluster):
    ids = collected(pytester, two_node_inventory)
    assert not [
        i for i in ids if "cluster" in i or i.split("::")[0] in ("test_c_node.py", "test_e_metrics.py")
    ]
    assert "test_a_host.py::test_driver[gpu-node-1]" in ids
    assert "test_g_diag.py::test_bandwidth[gpu-node-2]" in ids


def test_in_a_pod_the_service_account_is_the_cluster_given(pytester, two_node_inventory, in_a_pod):
    ids = collected(pytester, two_node_inventory)
    assert "test_c_node.py::test_ready[gpu-node-1]" in ids
    assert "test_f_policy.py::test_taints[gpu-node-2]" in ids
    assert len(ids) == 1 + 7 * 2


def test_in_a_pod_connection_pod_is_no_usage_error(pytester, two_node_inventory, in_a_pod):
    ids = collected(pytester, two_node_inventory, "--connection", "pod")
    assert "test_a_host.py::test_driver[gpu-node-1]" in ids


def test_without_a_cluster_connection_pod_is_a_usage_error(pytester, two_node_inventory, no_cluster):
    pytester.makepyfile(test_a_host=SUITE["test_a_host.py"])
    result = pytester.runpytest_inprocess("--inventory", str(two_node_inventory), "--connection", "pod")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--connection pod runs the host and gpu layers in probe pods*service account*"]
    )


def test_non_disruptive_runs_only_host_gpu_and_node(pytester, two_node_inventory, in_a_pod):
    ids = collected(pytester, two_node_inventory, "--non-disruptive")
    assert ids == [
        "test_h_plain.py::test_not_conformance",
        "test_a_host.py::test_driver[gpu-node-1]",
        "test_a_host.py::test_driver[gpu-node-2]",
        "test_b_gpu.py::test_count[gpu-node-1]",
        "test_b_gpu.py::test_count[gpu-node-2]",
        "test_c_node.py::test_ready[gpu-node-1]",
        "test_c_node.py::test_ready[gpu-node-2]",
    ]
    # the same as the documented marker expression
    assert ids == collected(pytester, two_node_inventory, "-m", "host or gpu or node or not (workloads or metrics "
                            "or policy or diag)")  # fmt: skip


def test_non_disruptive_says_so_and_runs(pytester, two_node_inventory, no_cluster):
    pytester.makepyfile(**{name.removesuffix(".py"): body for name, body in SUITE.items()})
    result = pytester.runpytest_inprocess(
        "--inventory", str(two_node_inventory), "--non-disruptive", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=5)  # plain, host x 2, gpu x 2 (node: no cluster)
    result.stdout.fnmatch_lines(["*--non-disruptive: only the host, gpu and node layers ran*"])


def test_non_disruptive_is_in_the_help(pytester):
    result = pytester.runpytest_inprocess("--help")
    result.stdout.fnmatch_lines(["*--non-disruptive*"])
