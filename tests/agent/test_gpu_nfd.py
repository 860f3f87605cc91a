"""The agent's node-feature-discovery without a cluster: its image runs, and GFD's labels reach a Node only while an
nfd-worker runs on it and an nfd-master runs in the cluster (issue #29 item 2)."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

from gpuready.deploy import addons
from gpuready.lab.agent.gpu import LabGpuBackend, virtual_hardware
from gpuready.lab.agent.gpu_host import VirtualGpuView
from gpuready.lab.agent.gpu_nfd import NFD_REPO, NfdPods, nfd_role

IMAGE = f"{NFD_REPO}:v0.17.3"
NODE = "gpu-1"


def _pod(name: str, command: str | None, node: str = NODE, running: bool = True, image: str = IMAGE) -> dict:
    container: dict[str, Any] = {"name": "c", "image": image}
    if command:
        container["command"] = [command]
    state = {"running": {}} if running else {"waiting": {"reason": "ContainerCreating"}}
    return {
        "metadata": {"name": name, "namespace": "gpu-system", "uid": f"uid-{name}"},
        "spec": {"nodeName": node, "containers": [container]},
        "status": {"containerStatuses": [{"name": "c", "state": state}]},
    }


def test_nfd_pods_publish_only_with_a_running_master_and_a_worker_on_the_node():
    nfd = NfdPods()
    assert nfd.observe(_pod("w", "nfd-worker")) == (False, NODE)
    assert not nfd.publishes(NODE)  # a worker alone publishes a NodeFeature nobody turns into labels
    assert nfd.observe(_pod("m", "nfd-master", node="gpu-2")) == (True, None)
    assert nfd.publishes(NODE) and not nfd.publishes("gpu-2")  # no worker on gpu-2
    assert nfd.observe(_pod("m", "nfd-master", node="gpu-2")) == (False, None)  # no change
    deleting = _pod("w", "nfd-worker")
    deleting["metadata"]["deletionTimestamp"] = "2026-11-27T00:00:00Z"
    assert nfd.observe(deleting) == (False, NODE) and not nfd.publishes(NODE)
    nfd.observe(_pod("w2", "nfd-worker", running=False))
    assert not nfd.publishes(NODE)  # not running yet
    nfd.observe(_pod("w2", "nfd-worker"))
    assert nfd.publishes(NODE)
    assert nfd.observe(_pod("m", "nfd-master"), deleted=True) == (True, None) and not nfd.publishes(NODE)


def test_only_the_nfd_images_programs_count():
    assert nfd_role(_pod("a", "nfd-worker")) == ("nfd-worker", "c")
    assert nfd_role(_pod("b", None)) == ("nfd-worker", "c")  # the image's default command
    assert nfd_role(_pod("c", "nfd-gc")) is None
    assert nfd_role(_pod("d", "nfd-worker", image="docker.io/library/busybox")) is None


def _backend() -> LabGpuBackend:
    return LabGpuBackend(VirtualGpuView(NODE, virtual_hardware("dgx-h100", 0)))


def test_the_nfd_image_runs_master_and_worker_without_a_driver():
    backend = _backend()
    settings = addons.AddonSettings()
    manifests = addons.nfd(settings)
    for kind, prog in (
        ("Deployment", "Node Feature Discovery Master"),
        ("DaemonSet", "Node Feature Discovery Worker"),
    ):
        (workload,) = [m for m in manifests if m["kind"] == kind]
        spec = workload["spec"]["template"]["spec"]
        pod = {
            "metadata": {"name": "p", "namespace": "gpu-system", "uid": "u"},
            "spec": {**spec, "nodeName": NODE},
        }
        plan = backend.runtime.plan(pod, spec["containers"][0], None)
        assert plan.exit_code is None and plan.waiting in (None, []), plan
        assert f'{prog}" version="v0.17.3" nodeName="{NODE}" namespace="gpu-system"' in plan.logs
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {}}
    plan = backend.runtime.plan(pod, {"name": "x", "image": IMAGE, "command": ["nfd-nope"]}, None)
    assert plan.exit_code == 128 and "nfd-nope" in (plan.message or "")


class _Store:
    """The agent mirror's reads and modify, over a node and some pods."""

    def __init__(self, pods: list[dict]) -> None:
        self.node = {"metadata": {"name": NODE, "labels": {}}, "status": {}}
        self.pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}

    def get(self, key: str, namespace: str, name: str) -> dict | None:
        obj = self.node if key == "nodes" else self.pods.get((namespace, name))
        return copy.deepcopy(obj)

    def list(self, key: str, namespace: str | None = None) -> tuple[list[dict], int]:
        return [copy.deepcopy(p) for p in self.pods.values()], 0

    def modify(self, key: str, namespace: str, name: str, change: Any) -> dict:
        change(self.node)
        return self.node


def _gfd_synced(pods: list[dict], labels: dict[str, str] | None = None) -> dict[str, str]:
    backend = _backend()
    gfd = _pod("gfd", "gpu-feature-discovery", image="nvcr.io/nvidia/k8s-device-plugin:v0.18.0")
    store = _Store([gfd, *pods])
    store.node["metadata"]["labels"] = dict(labels or {})
    backend.start_gfd(gfd, gfd["spec"]["containers"][0], store.node, backend.host())
    backend.sync_node(SimpleNamespace(store=store), NODE)
    return store.node["metadata"]["labels"]


def test_gfd_labels_reach_the_node_only_through_nfd():
    master, worker = _pod("m", "nfd-master", node="gpu-2"), _pod("w", "nfd-worker")
    assert _gfd_synced([master, worker])["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert "nvidia.com/gpu.product" not in _gfd_synced([])
    assert "nvidia.com/gpu.product" not in _gfd_synced([master])  # no worker on this node
    assert "nvidia.com/gpu.product" not in _gfd_synced([worker])  # no master in the cluster
    assert "nvidia.com/gpu.product" not in _gfd_synced([master, _pod("w", "nfd-worker", running=False)])
    # NFD gone: the labels it set stay as they are (nfd-master's garbage collection is not emulated)
    stale = {"nvidia.com/gpu.product": "NVIDIA-OLD", "nvidia.com/gpu.count": "1"}
    assert _gfd_synced([], stale) == stale


def test_nfd_master_runs_on_a_node_without_gpus():
    # nfd-master prefers control-plane nodes and may land on any node: the plain catalogue runtime runs it too
    from gpuready.lab.agent.runtime import CatalogueRuntime

    pod = {"metadata": {"name": "m", "namespace": "gpu-system", "uid": "u"}, "spec": {"nodeName": "cpu-1"}}
    plan = CatalogueRuntime().plan(
        pod, {"name": "nfd-master", "image": IMAGE, "command": ["nfd-master"]}, None
    )
    assert plan.exit_code is None and '"Node Feature Discovery Master" version="v0.17.3"' in plan.logs
    assert plan.image_id.startswith(f"{NFD_REPO}@sha256:")
