"""Scheduler: filters in the real order, extended-resource accounting and the real Unschedulable message."""

from __future__ import annotations

from kubernetes import client

from .conftest import wait_for


def _pod(name: str, gpus: int = 0, **spec) -> dict:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {"metadata": {"name": name}, "spec": {"containers": [
        {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": resources}], **spec}}  # fmt: skip


def _scheduled(sim, name: str) -> dict | None:
    pod = sim.store.get("pods", "default", name)
    cond = next(
        (c for c in (pod or {}).get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"), None
    )
    return cond


def _taint(v1, node: str, key: str, value: str, effect: str = "NoSchedule") -> None:
    v1.patch_node(node, {"spec": {"taints": [{"key": key, "value": value, "effect": effect}]}})


def test_unschedulable_message_shape_and_event(api, sim) -> None:
    v1 = client.CoreV1Api(api)
    _taint(v1, "virt-node-0001", "nvidia.com/gpu", "present")
    _taint(v1, "virt-node-0002", "nvidia.com/gpu", "present")
    v1.create_namespaced_pod("default", _pod("big", gpus=9))
    cond = wait_for(lambda: _scheduled(sim, "big"), what="PodScheduled condition")
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert cond["message"] == (
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint "
        "{nvidia.com/gpu: present}. preemption: 0/3 nodes are available: 1 No preemption victims found for "
        "incoming pod, 2 Preemption is not helpful for scheduling."
    )
    events = v1.list_namespaced_event(
        "default", field_selector="involvedObject.name=big,reason=FailedScheduling"
    )
    assert [(e.type, e.source.component, e.message) for e in events.items] == [
        ("Warning", "default-scheduler", cond["message"])
    ]
    assert sim.store.get("pods", "default", "big")["spec"].get("nodeName") is None


def test_toleration_lets_pod_onto_tainted_node(api, sim) -> None:
    v1 = client.CoreV1Api(api)
    for n in ("virt-node-0000", "virt-node-0001", "virt-node-0002"):
        _taint(v1, n, "nvidia.com/gpu", "present")
    v1.create_namespaced_pod("default", _pod("no-tol", gpus=1))
    v1.create_namespaced_pod("default", _pod("tol", gpus=1, tolerations=[
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]))  # fmt: skip
    wait_for(lambda: sim.store.get("pods", "default", "tol")["spec"].get("nodeName"), what="tol bound")
    cond = wait_for(lambda: _scheduled(sim, "no-tol"), what="no-tol condition")
    assert cond["message"].startswith(
        "0/3 nodes are available: 3 node(s) had untolerated taint {nvidia.com/gpu: present}."
    )


def test_extended_resources_are_accounted_and_freed(api, sim) -> None:
    v1 = client.CoreV1Api(api)
    pin = {"kubernetes.io/hostname": "virt-node-0000"}
    for i in range(4):
        v1.create_namespaced_pod("default", _pod(f"g{i}", gpus=2, nodeSelector=pin))
    v1.create_namespaced_pod("default", _pod("extra", gpus=1, nodeSelector=pin))
    for i in range(4):
        wait_for(
            lambda i=i: sim.store.get("pods", "default", f"g{i}")["spec"].get("nodeName"), what=f"g{i} bound"
        )
    cond = wait_for(lambda: _scheduled(sim, "extra"), what="extra unschedulable")
    assert cond["message"] == (
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node "
        "affinity/selector. preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, "
        "2 Preemption is not helpful for scheduling."
    )
    v1.delete_namespaced_pod("g0", "default")
    node = wait_for(
        lambda: sim.store.get("pods", "default", "extra")["spec"].get("nodeName"), what="extra bound"
    )
    assert node == "virt-node-0000"
    assert _scheduled(sim, "extra")["status"] == "True"


def test_required_node_affinity_operators(api, sim) -> None:
    v1 = client.CoreV1Api(api)
    v1.patch_node("virt-node-0001", {"metadata": {"labels": {"zone": "a"}}})
    v1.patch_node("virt-node-0002", {"metadata": {"labels": {"zone": "b"}}})

    def affinity(*exprs: dict) -> dict:
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": list(exprs)}]}}}  # fmt: skip

    v1.create_namespaced_pod("default", _pod("in-a", affinity=affinity({"key": "zone", "operator": "In",
                                                                         "values": ["a"]})))  # fmt: skip
    v1.create_namespaced_pod("default", _pod("not-a", affinity=affinity(
        {"key": "zone", "operator": "Exists"}, {"key": "zone", "operator": "NotIn", "values": ["a"]})))  # fmt: skip
    v1.create_namespaced_pod("default", _pod("nowhere", affinity=affinity({"key": "zone", "operator": "In",
                                                                            "values": ["c"]})))  # fmt: skip
    bound = lambda n: sim.store.get("pods", "default", n)["spec"].get("nodeName")  # noqa: E731
    assert wait_for(lambda: bound("in-a"), what="in-a") == "virt-node-0001"
    assert wait_for(lambda: bound("not-a"), what="not-a") == "virt-node-0002"
    cond = wait_for(lambda: _scheduled(sim, "nowhere"), what="nowhere")
    assert cond["message"].startswith(
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    )


def test_cordoned_and_unreachable_nodes_are_skipped(api, sim) -> None:
    v1 = client.CoreV1Api(api)
    v1.patch_node("virt-node-0000", {"spec": {"unschedulable": True}})
    sim.virtual.stop("virt-node-0001")
    wait_for(lambda: any(t["key"] == "node.kubernetes.io/unreachable"
                         for t in sim.store.get("nodes", "", "virt-node-0001")["spec"].get("taints", [])),
             what="unreachable taint")  # fmt: skip
    v1.create_namespaced_pod("default", _pod("p1", gpus=8))
    v1.create_namespaced_pod("default", _pod("p2", gpus=8))
    assert (
        wait_for(lambda: sim.store.get("pods", "default", "p1")["spec"].get("nodeName"), what="p1")
        == "virt-node-0002"
    )
    cond = wait_for(lambda: _scheduled(sim, "p2"), what="p2 unschedulable")
    assert cond["message"] == (
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint "
        "{node.kubernetes.io/unreachable: }, 1 node(s) were unschedulable. preemption: 0/3 nodes are available: "
        "1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling."
    )
