"""The node, workloads and metrics layers (conformance/) in-process against the lab's real control plane: a
healthy fleet of virtual nodes with lab host roots passes every check; each fault fails the matching check on
that node only, with a message naming the cause; the run's namespace is gone after success, failure, timeout
and Ctrl-C. Each test gets fresh nodes (tests/conftest.py's `virtual_nodes`) and its own add-ons namespace."""

from __future__ import annotations

import json
import shutil

import pytest
from kube_fleet import HEALTHY, copy_suite, make_fleet
from polling import wait_for
from shims import read_verdict

from gpuready.conformance import workloads as wl

KUBE_LAYERS = ("node", "workloads", "metrics")


@pytest.fixture
def kube_suite(pytester):
    return copy_suite(pytester, "test_node.py", "test_workloads.py", "test_metrics.py")


@pytest.fixture
def fleets(lab_cluster, api, virtual_nodes, tmp_path):
    """`fleets(converge=True, **make_fleet options)`: a fleet on fresh virtual nodes; ``converge=False`` for a
    fault that keeps the fleet from converging to its spec."""
    started = []

    def make(converge=True, **kw):
        fleet = make_fleet(lab_cluster, api, virtual_nodes, tmp_path / f"fleet{len(started)}", **kw)
        started.append(fleet)
        if converge:
            fleet.converged()
        return fleet

    yield make
    for fleet in started:
        fleet.delete()


def run(pytester, fleet, *args, **kw):
    report = pytester.path / "report"
    result = pytester.runpytest_inprocess(
        "conformance", "--inventory", str(fleet.inventory), "--kubeconfig", str(fleet.kubeconfig),
        "--command-timeout", "60", "--pod-timeout", "60", "--report-dir", str(report), "-p", "no:cacheprovider", "-rs", *args, **kw,
    )  # fmt: skip
    return result, read_verdict(report)


def checks(verdict, node):
    return {
        f"{layer}/{check}": (r["status"], r["message"])
        for layer, data in verdict["nodes"][node]["layers"].items()
        for check, r in data["checks"].items()
    }


def failures(verdict):
    return {
        f"{node}:{key}": message
        for node in verdict["nodes"]
        for key, (status, message) in checks(verdict, node).items()
        if status == "fail"
    }


def assert_cleaned_up(fleet):
    """The namespaces the suite made for this fleet's runs are gone (the namespace controller deleted them after
    the kubelets confirmed their pods' deletion), and no pod of a run is left on the fleet's nodes."""
    wait_for(lambda: not fleet.run_namespaces() - fleet.runs_before, what="the run's namespace deleted")
    for node in fleet.nodes:
        assert not [
            p for p in fleet.pods(node=node) if p["metadata"]["namespace"].startswith(wl.NAMESPACE_PREFIX)
        ]


def test_healthy_fleet_passes_every_check(pytester, kube_suite, fleets):
    fleet = fleets()
    result, verdict = run(pytester, fleet)
    assert failures(verdict) == {}
    assert result.ret == 0
    h100, a100, l4 = fleet.nodes
    assert checks(verdict, l4)["workloads/test_time_slicing"][0] == "pass"
    assert checks(verdict, a100)["workloads/test_mig_devices"][0] == "pass"
    assert checks(verdict, h100)["workloads/test_time_slicing"][0] == "skip"
    for node in fleet.nodes:
        statuses = {k: s for k, (s, _m) in checks(verdict, node).items()}
        assert statuses["workloads/test_vector_add"] == "pass"
        assert statuses["metrics/test_running_pod_in_labels"] == "pass"
        assert statuses["node/test_allocatable"] == "pass"
    assert_cleaned_up(fleet)


def only_failing_node(verdict, node):
    """Every failure is on ``node``; the other nodes pass all their node/workloads/metrics checks."""
    bad = failures(verdict)
    assert bad and all(key.startswith(f"{node}:") for key in bad), bad
    for other in verdict["nodes"]:
        if other != node:
            assert {s for s, _m in checks(verdict, other).values()} <= {"pass", "skip"}, other
    return {key.removeprefix(f"{node}:"): message for key, message in bad.items()}


def test_wrong_time_slicing_replicas_fail_allocatable(pytester, kube_suite, fleets):
    config = (
        "version: v1\nflags:\n  migStrategy: none\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - name: nvidia.com/gpu\n      replicas: 2\n"
    )
    fleet = fleets(converge=False, configs={"time-slicing-4": config})
    l4 = list(fleet.nodes)[2]
    wait_for(lambda: fleet.node(l4)["status"]["allocatable"].get("nvidia.com/gpu") == "2", what="2 replicas")
    fleet.converged(skip=(l4,))
    _result, verdict = run(pytester, fleet)
    bad = only_failing_node(verdict, l4)
    assert bad["node/test_allocatable"] == (
        f"{l4}: allocatable nvidia.com/gpu = 2, expected 4 (time-slicing replicas 4 x 1 GPU)"
    )
    assert bad["node/test_capacity"].endswith(
        "capacity nvidia.com/gpu = 2, expected 4 (time-slicing replicas 4 x 1 GPU)"
    )
    assert "GFD label nvidia.com/gpu.replicas = '2', expected '4'" in bad["node/test_gfd_labels"]
    assert checks(verdict, l4)["workloads/test_vector_add"][1].startswith(
        f"skipped: node layer failed on {l4}"
    )


def test_missing_mig_instance_fails_allocatable(pytester, kube_suite, fleets):
    fleet = fleets(converge=False, mig_override={1: {0: ["3g.40gb", "2g.20gb", "1g.10gb"]}})
    a100 = list(fleet.nodes)[1]
    wait_for(
        lambda: fleet.node(a100)["status"]["allocatable"].get("nvidia.com/mig-1g.10gb") == "1", what="1 x 1g"
    )
    wait_for(lambda: fleet.node(a100)["metadata"]["labels"].get("nvidia.com/mig-1g.10gb.count") == "1")
    fleet.converged(skip=(a100,))
    _result, verdict = run(pytester, fleet)
    bad = only_failing_node(verdict, a100)
    assert bad["node/test_allocatable"] == (
        f"{a100}: allocatable nvidia.com/mig-1g.10gb = 1, expected 2 (MIG mixed: 2 x 1g.10gb in mig_layout)"
    )
    assert "GFD label nvidia.com/mig-1g.10gb.count = '1', expected '2'" in bad["node/test_gfd_labels"]


RUNTIME_CLASS_MODE = [(profile, {**data, "nvidia_cdi": False}) for profile, data in HEALTHY]


def test_stale_cdi_spec_fails_vector_add_with_the_unresolvable_device(pytester, kube_suite, fleets):
    """CDI mode: the plugin hands the pod a CDI device the host's spec lacks; containerd refuses the container."""
    fleet = fleets()
    h100 = next(iter(fleet.nodes))
    gpu0 = json.loads((fleet.hosts[h100].parent / "machine" / "hardware.json").read_text())["gpus"][0]["uuid"]
    fleet.stale_cdi_spec(h100, leave_out=(gpu0,))
    _result, verdict = run(pytester, fleet)
    bad = only_failing_node(verdict, h100)
    message = bad["workloads/test_vector_add"]
    assert message.startswith(f"{h100}: vectorAdd did not pass: pod vectoradd-{h100}: phase Pending")
    assert (
        "reason CreateContainerError: failed to create containerd container: CDI device injection failed: "
        f"unresolvable CDI devices nvidia.com/gpu={gpu0}"
    ) in message
    assert_cleaned_up(fleet)


def test_missing_nvidia_handler_fails_vector_add(pytester, kube_suite, fleets):
    """Runtime-class mode: GPU pods name the nvidia RuntimeClass, whose handler containerd no longer has."""
    fleet = fleets(hosts=RUNTIME_CLASS_MODE)
    h100 = next(iter(fleet.nodes))
    fleet.remove_nvidia_dropin(h100)  # the plugin keeps running; new pods on the nvidia runtime cannot start
    _result, verdict = run(pytester, fleet)
    bad = only_failing_node(verdict, h100)
    message = bad["workloads/test_vector_add"]
    assert message.startswith(f"{h100}: vectorAdd did not pass: pod vectoradd-{h100}: phase ")
    assert (
        'reason RunContainerError: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "nvidia" is configured'
        in message
    )
    assert "events: Warning FailedCreatePodSandBox" in message
    assert checks(verdict, h100)["metrics/test_series_per_gpu"][1].startswith(
        f"skipped: workloads layer failed on {h100}"
    )
    assert_cleaned_up(fleet)


def test_kubelet_stopped_fails_ready(pytester, kube_suite, fleets):
    fleet = fleets()
    l4 = list(fleet.nodes)[2]
    fleet.stop_kubelet(l4)
    ready = lambda: next(c for c in fleet.node(l4)["status"]["conditions"] if c["type"] == "Ready")  # noqa: E731
    wait_for(lambda: ready()["status"] == "Unknown", what="NotReady")
    _result, verdict = run(pytester, fleet)
    bad = only_failing_node(verdict, l4)
    assert bad["node/test_ready"] == (
        f"{l4}: NotReady (Ready = Unknown, NodeStatusUnknown: Kubelet stopped posting node status.)"
    )


def test_dcgm_exporter_absent_fails_its_check(pytester, kube_suite, fleets):
    fleet = fleets()
    fleet.delete_daemonset("nvidia-dcgm-exporter")
    _result, verdict = run(pytester, fleet)
    for node in fleet.nodes:
        assert checks(verdict, node)["node/test_dcgm_exporter_ready"] == (
            "fail",
            f"{node}: no dcgm-exporter pod on the node (is its DaemonSet deployed and does it select this node?)",
        )
        assert checks(verdict, node)["node/test_device_plugin_ready"][0] == "pass"


def test_device_plugin_absent_fails_resources_and_its_check(pytester, kube_suite, fleets):
    fleet = fleets()
    fleet.delete_daemonset("nvidia-device-plugin")
    l4 = list(fleet.nodes)[2]
    wait_for(
        lambda: fleet.node(l4)["status"]["allocatable"].get("nvidia.com/gpu") == "0", what="allocatable 0"
    )
    _result, verdict = run(pytester, fleet, "--nodes", l4)
    bad = failures(verdict)
    # the kubelet keeps the resource at 0 (and its capacity a while): the message says so, and why it may be
    assert bad[f"{l4}:node/test_allocatable"].startswith(
        f"{l4}: allocatable nvidia.com/gpu = 0, expected 4 (time-slicing replicas 4 x 1 GPU)"
    )
    assert bad[f"{l4}:node/test_device_plugin_ready"].startswith(f"{l4}: no device plugin pod on the node")


def test_namespace_deleted_after_a_timeout(pytester, kube_suite, fleets):
    fleet = fleets()
    l4 = list(fleet.nodes)[2]
    fleet.remove_nvidia_dropin(l4)
    # a taint no GPU pod tolerates keeps vectorAdd Pending: it cannot fail on its own before the 0.01 s are up
    taint = {"key": "gpuready.io/test-hold", "value": "x", "effect": "NoSchedule"}
    taints = (fleet.node(l4)["spec"].get("taints") or []) + [taint]
    fleet.core.patch_node(l4, {"spec": {"taints": taints}})
    result, verdict = run(pytester, fleet, "--nodes", l4, "--pod-timeout", "0.01")
    message = checks(verdict, l4)["workloads/test_vector_add"][1]
    assert "(timed out waiting)" in message or "RunContainerError" in message
    assert result.ret == 1
    assert_cleaned_up(fleet)


def test_namespace_deleted_after_ctrl_c(pytester, kube_suite, fleets):
    fleet = fleets()
    (pytester.path / "conftest.py").write_text(
        "import pytest\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_runtest_call(item):\n"
        "    if item.name.startswith('test_time_slicing'):\n"
        "        suite = item.session.config.stash[__import__('importlib').import_module('gpuready.conformance.plugin').SUITE]\n"
        "        open('namespace', 'w').write(suite.workloads.namespace if suite.workloads.created else '')\n"
        "        raise KeyboardInterrupt\n"
    )
    result, _verdict = run(pytester, fleet, "--nodes", list(fleet.nodes)[2], no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert (
        (pytester.path / "namespace").read_text().startswith(wl.NAMESPACE_PREFIX)
    )  # it existed at the interrupt
    assert_cleaned_up(fleet)


def test_pods_are_hardened_and_labelled(pytester, kube_suite, fleets):
    fleet = fleets()
    (pytester.path / "conftest.py").write_text(
        "import json, pytest\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_runtest_call(item):\n"
        "    if item.name.startswith('test_vector_add'):\n"
        "        w = item.session.config.stash[__import__('importlib').import_module('gpuready.conformance.plugin').SUITE].workloads\n"
        "        core = w.cluster.core\n"
        "        ns = core.read_namespace(w.namespace)\n"
        "        pods = [w.cluster.api.sanitize_for_serialization(p) for p in core.list_namespaced_pod(w.namespace).items]\n"
        "        open('seen.json', 'w').write(json.dumps({'labels': ns.metadata.labels, 'pods': pods}))\n"
    )
    run(pytester, fleet, "--nodes", list(fleet.nodes)[1])
    seen = json.loads((pytester.path / "seen.json").read_text())
    assert seen["labels"]["app.kubernetes.io/managed-by"] == "gpuready"
    assert seen["pods"]
    for pod in seen["pods"]:
        spec = pod["spec"]
        assert pod["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuready"
        assert "runtimeClassName" not in spec  # CDI mode: the device plugin's CDI devices need no handler
        assert not any("hostPath" in v for v in spec.get("volumes") or [])
        for c in spec["containers"]:
            assert (
                c["securityContext"]["runAsNonRoot"] is True and c["securityContext"]["privileged"] is False
            )
            assert c["securityContext"]["allowPrivilegeEscalation"] is False


def test_without_a_cluster_the_kubernetes_layers_are_deselected_and_said_so(
    pytester, kube_suite, tmp_path, monkeypatch
):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    from kube_fleet import HEALTHY
    from shims import GROUP_DATA, JOIN, PROFILE_INVENTORY

    (tmp_path / "group_data").mkdir()
    shutil.copy(GROUP_DATA, tmp_path / "group_data" / "all.py")
    inventory = tmp_path / "inventory.py"
    profile, data = HEALTHY[2]
    inventory.write_text(
        f"gpu_nodes = ([('gpu-node-1', { ({**PROFILE_INVENTORY[profile], **JOIN, **data})!r})], {{}})\n"
    )
    result = pytester.runpytest_inprocess(
        "conformance", "--inventory", str(inventory), "-p", "no:cacheprovider"
    )
    result.assert_outcomes(deselected=22)
    result.stdout.fnmatch_lines(
        ["node, workloads, metrics and policy layers not run: no cluster given (--kubeconfig,*"]
    )
