"""NVIDIA's real GPU feature discovery and the real node-feature-discovery on a real-kubelet lab host (issue #29
item 1): the Node's ``nvidia.com/gpu.*`` labels are written by the real nfd-master, from the NodeFeature object the
real GFD published, all started by gpuready's own add-on manifests.

On the shared real-kubelet lab (conftest.real_l4_lab: trixie, the L4 profile: one L4, time-sliced 4 ways by
inventory/lab.py), whose Node no nfd-master has labelled yet (test_lab_real_device_plugin.py, which runs before,
deploys the add-ons without NFD), on the real kubelet (where the ``kubernetes`` Service reaches the API server from
pods, as on a real node: GFD, nfd-master and nfd-worker all need it). The add-ons are deployed twice, in this
order:

1. with ``addons_nfd = False``: GFD runs (NVIDIA's binary over the mock NVML) and makes its labels, but nothing
   makes Node labels of them: the Node has none of GFD's labels and the conformance suite's
   ``node/test_gfd_labels`` fails saying no nfd-worker runs there;
2. as the product renders them (NFD on): nfd-master and nfd-worker run NFD v0.17.3's real binaries from the lab's
   ``registry.k8s.io/nfd/node-feature-discovery:v0.17.3`` (gpuready.lab.nfd_image); GFD publishes its labels as
   the NodeFeature ``nvidia-features-for-<node>`` (k8s-device-plugin v0.19.3's default ``--use-node-feature-api``),
   nfd-master labels the Node with the spec's values, and ``node/test_gfd_labels`` passes.
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest
from conftest import REAL_NODE, Lab, RealLab
from polling import wait_for
from pyinfra_runs import REPO, run_pyinfra
from suite_runs import failed, run_suite
from test_lab_real_kubelet import _kubectl

from gpuready.lab import nfd_image, nvidia_addons
from gpuready.spec import load_fleet

pytestmark = pytest.mark.lab

NODE = REAL_NODE
NAMESPACE = "gpu-system"
GFD_NODE_FEATURE = f"nvidia-features-for-{NODE}"  # GFD's NodeFeature (internal/lm/output.go)


@pytest.fixture(scope="module")
def nfd_lab(real_l4_lab: RealLab) -> Lab:
    return real_l4_lab.lab


@pytest.fixture(scope="module")
def expected(nfd_lab: Lab) -> dict[str, str]:
    """GFD's labels the spec expects on the node (product, count, replicas, sharing strategy, memory...)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPUREADY_LAB_DIR", str(nfd_lab.paths.root))
        labels = load_fleet(REPO / "inventory" / "lab.py").nodes[NODE].expected_labels
    assert labels.get("nvidia.com/gpu.product", "").startswith("NVIDIA-L4"), labels
    assert labels.get("nvidia.com/gpu.count") == "1", labels
    return labels


@pytest.fixture(scope="module")
def without_nfd(nfd_lab: Lab) -> Lab:
    addons = run_pyinfra(nfd_lab, "--data", "addons_nfd=False", deploy="deploys/cluster_addons.py")
    assert addons.returncode == 0, addons.output[-6000:]
    assert "addons_nfd = False" in addons.output
    return nfd_lab


@pytest.fixture(scope="module")
def with_nfd(without_nfd: Lab) -> Lab:
    addons = run_pyinfra(without_nfd, deploy="deploys/cluster_addons.py")
    assert addons.returncode == 0, addons.output[-6000:]
    return without_nfd


def _pods(lab: Lab, name: str) -> list[dict[str, Any]]:
    r = _kubectl(
        lab.state, "get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/name={name}", "-o", "json"
    )
    return json.loads(r.stdout)["items"] if r.returncode == 0 else []


def _ready(pod: dict[str, Any]) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return bool(statuses) and all(s.get("ready") for s in statuses)


def _node_labels(lab: Lab) -> dict[str, str]:
    r = _kubectl(lab.state, "get", "node", NODE, "-o", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["metadata"].get("labels") or {}


def _diagnose(lab: Lab, *names: str) -> str:
    out = []
    for name in names:
        for pod in _pods(lab, name):
            pod_name = pod["metadata"]["name"]
            logs = _kubectl(
                lab.state, "logs", "-n", NAMESPACE, pod_name, "--all-containers", "--prefix", "--tail=30"
            )
            status = pod.get("status", {})
            shown = json.dumps(status.get("containerStatuses") or status)[-1500:]
            out.append(f"--- {pod_name}: {shown}\n{logs.stdout}{logs.stderr}")
    journal = lab.ssh(NODE, "journalctl -u kubelet --no-pager -o cat | grep -i error | tail -15", check=False)
    return "\n".join([*out, f"--- kubelet errors\n{journal.stdout}"])


def _wait_ready(lab: Lab, name: str, timeout: float = 240) -> dict[str, Any]:
    try:
        return wait_for(
            lambda: next((p for p in _pods(lab, name) if _ready(p)), None), timeout, f"a Ready {name} pod"
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnose(lab, name)}") from None


def _suite(lab: Lab, report_dir: Path) -> dict[str, str]:
    """The conformance suite's node layer on the node, as a user runs it: the failed checks by name."""
    verdict = run_suite(types.SimpleNamespace(lab=lab), report_dir, "-m", "node", "--nodes", NODE)
    return failed(verdict).get(NODE, {})


def _gfd_logs(lab: Lab) -> str:
    """GFD's log, its last run's too (without NFD's API it exits after making its labels and restarts)."""
    out = ""
    for pod in _pods(lab, "gpu-feature-discovery"):
        for previous in ("-p", ""):
            name = pod["metadata"]["name"]
            r = _kubectl(lab.state, "logs", "-n", NAMESPACE, name, "-c", "gpu-feature-discovery", previous)
            out += r.stdout
    return out


def test_without_nfd_no_gfd_label_reaches_the_node(
    without_nfd: Lab, expected: dict[str, str], tmp_path: Path
) -> None:
    lab = without_nfd
    assert not _pods(lab, "nfd-worker") and not _pods(lab, "nfd-master")
    # GFD (the real binary, over the mock NVML) has made its labels at least once ...
    wait_for(lambda: "Creating Labels" in _gfd_logs(lab), 240, "GFD to make its labels")
    # ... and nothing made Node labels of them: no nfd-master runs
    labels = _node_labels(lab)
    assert not [k for k in expected if k in labels], labels
    problems = _suite(lab, tmp_path / "no-nfd")
    assert "no nfd-worker pod on this node" in problems.get("node/test_gfd_labels", ""), problems


def test_nfd_runs_the_real_binaries_of_the_lab_image(with_nfd: Lab) -> None:
    for name in ("nfd-master", "nfd-worker"):
        pod = _wait_ready(with_nfd, name)
        images = {c["image"] for c in pod["spec"]["containers"]}
        assert images == {nfd_image.image_name()}, images
        listed = json.loads(with_nfd.ssh(NODE, f"crictl ps --name '^{name}$' -o json").stdout)["containers"]
        assert [c["state"] for c in listed] == ["CONTAINER_RUNNING"], listed
        version = with_nfd.ssh(NODE, f"crictl exec {listed[0]['id']} {name} -version", check=False)
        assert f"v{nfd_image.DEFAULT_VERSION}" in version.stdout + version.stderr, version
    gfd = _wait_ready(with_nfd, "gpu-feature-discovery")
    assert {c["image"] for c in gfd["spec"]["containers"]} == {nvidia_addons.image_name()}


def test_the_real_nfd_master_labels_the_node_with_gfds_labels(
    with_nfd: Lab, expected: dict[str, str], tmp_path: Path
) -> None:
    def missing() -> dict[str, Any]:
        labels = _node_labels(with_nfd)
        return {k: (v, labels.get(k)) for k, v in expected.items() if labels.get(k) != v}

    try:
        wait_for(lambda: not missing(), 180, "GFD's labels on the Node")
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\n{missing()}\n{_diagnose(with_nfd, 'gpu-feature-discovery', 'nfd-master')}"
        ) from None
    # written by nfd-master (its annotation lists the labels it manages) from GFD's NodeFeature
    r = _kubectl(with_nfd.state, "get", "node", NODE, "-o", "json")
    annotations = json.loads(r.stdout)["metadata"].get("annotations") or {}
    managed = annotations.get("nfd.node.kubernetes.io/feature-labels", "").split(",")
    assert {"nvidia.com/gpu.product", "nvidia.com/gpu.count"} <= set(managed), annotations
    r = _kubectl(
        with_nfd.state, "get", "nodefeatures.nfd.k8s-sigs.io", "-n", NAMESPACE, GFD_NODE_FEATURE, "-o", "json"
    )
    assert r.returncode == 0, r.stderr
    feature = json.loads(r.stdout)
    assert feature["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"] == NODE, feature["metadata"]
    published = feature["spec"]["labels"]
    assert published["nvidia.com/gpu.product"] == expected["nvidia.com/gpu.product"], published
    problems = _suite(with_nfd, tmp_path / "nfd")
    assert "node/test_gfd_labels" not in problems, problems
