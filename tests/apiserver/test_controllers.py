"""DaemonSet controller and node lifecycle controller."""

from __future__ import annotations

from kubernetes import client

from .conftest import wait_for


def _ds(name: str, **pod_spec) -> dict:
    return {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
        "metadata": {"labels": {"app": name}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}], **pod_spec}}}}  # fmt: skip


def _ds_pods(sim, name: str) -> dict[str, dict]:
    pods = [
        p for p in sim.store.list("pods", "default")[0] if p["metadata"].get("labels", {}).get("app") == name
    ]
    return {p["spec"].get("nodeName") or "?": p for p in pods}


def test_daemonset_runs_on_eligible_nodes_and_tracks_status(api, sim) -> None:
    v1, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    v1.patch_node("virt-node-0000", {"metadata": {"labels": {"gpu": "yes"}}})
    v1.patch_node("virt-node-0001", {"metadata": {"labels": {"gpu": "yes"}}})
    v1.patch_node(
        "virt-node-0001", {"spec": {"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}}
    )
    ds = apps.create_namespaced_daemon_set("default", _ds("plugin", nodeSelector={"gpu": "yes"}))

    def status():
        s = apps.read_namespaced_daemon_set("plugin", "default").status
        return s if s.number_ready == 1 else None

    s = wait_for(status, what="1 ready")
    assert (s.desired_number_scheduled, s.current_number_scheduled, s.number_available) == (1, 1, 1)
    pods = _ds_pods(sim, "plugin")
    assert list(pods) == ["virt-node-0000"]
    pod = pods["virt-node-0000"]
    ref = pod["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
        "DaemonSet",
        "plugin",
        ds.metadata.uid,
        True,
    )
    assert pod["metadata"]["name"].startswith("plugin-")
    assert {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "spec"
    ]["tolerations"]
    # tolerating the taint makes node 1 eligible; a new matching node gets a pod too
    apps.patch_namespaced_daemon_set("plugin", "default", {"spec": {"template": {"spec": {"tolerations": [
        {"key": "dedicated", "operator": "Exists"}]}}}})  # fmt: skip
    sim.virtual.add(1, "dgx-h100")
    v1.patch_node("virt-node-0003", {"metadata": {"labels": {"gpu": "yes"}}})
    wait_for(
        lambda: apps.read_namespaced_daemon_set("plugin", "default").status.number_ready == 3, what="3 ready"
    )
    assert sorted(_ds_pods(sim, "plugin")) == ["virt-node-0000", "virt-node-0001", "virt-node-0003"]
    # deleting the DaemonSet deletes its pods (background cascading)
    apps.delete_namespaced_daemon_set("plugin", "default")
    wait_for(lambda: not _ds_pods(sim, "plugin"), what="pods garbage-collected")


def test_node_goes_not_ready_when_heartbeats_stop_and_recovers(api, sim) -> None:
    v1 = client.CoreV1Api(api)
    sim.virtual.stop("virt-node-0002")

    def ready_status():
        node = v1.read_node("virt-node-0002")
        cond = next(c for c in node.status.conditions if c.type == "Ready")
        return (cond, node) if cond.status == "Unknown" else None

    cond, node = wait_for(ready_status, timeout=15, what="Ready=Unknown")
    assert (cond.reason, cond.message) == ("NodeStatusUnknown", "Kubelet stopped posting node status.")
    taints = {(t.key, t.effect) for t in node.spec.taints}
    assert taints == {
        ("node.kubernetes.io/unreachable", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
    }
    others = {c.type: c.status for c in node.status.conditions}
    assert others == {
        "MemoryPressure": "Unknown",
        "DiskPressure": "Unknown",
        "PIDPressure": "Unknown",
        "Ready": "Unknown",
    }
    # the other nodes are untouched
    assert v1.read_node("virt-node-0000").spec.taints is None
    sim.virtual.resume("virt-node-0002")
    wait_for(lambda: v1.read_node("virt-node-0002").spec.taints is None, what="taints removed")
    ready = next(c for c in v1.read_node("virt-node-0002").status.conditions if c.type == "Ready")
    assert ready.status == "True"


def test_unreachable_node_pods_not_ready_and_evicted_without_toleration(api, sim) -> None:
    v1 = client.CoreV1Api(api)
    pin = {"kubernetes.io/hostname": "virt-node-0001"}
    pod = lambda name, tols: {"metadata": {"name": name}, "spec": {  # noqa: E731
        "nodeSelector": pin, "tolerations": tols,
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}  # fmt: skip
    # an explicit toleration without tolerationSeconds keeps a pod forever; a 0-second one evicts at once
    v1.create_namespaced_pod("default", pod("stays", [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                                       "effect": "NoExecute"}]))  # fmt: skip
    v1.create_namespaced_pod("default", pod("goes", [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                                      "effect": "NoExecute", "tolerationSeconds": 0}]))  # fmt: skip
    v1.create_namespaced_pod("default", pod("default-300s", []))
    for name in ("stays", "goes", "default-300s"):
        wait_for(lambda n=name: (sim.store.get("pods", "default", n) or {}).get("status", {}).get("phase") == "Running",
                 what=f"{name} Running")  # fmt: skip
    sim.virtual.stop("virt-node-0001")
    wait_for(lambda: sim.store.get("pods", "default", "goes") is None, timeout=15, what="goes evicted")
    events = v1.list_namespaced_event("default", field_selector="reason=TaintManagerEviction").items
    assert [e.message for e in events] == ["Marking for deletion Pod default/goes"]
    stays = v1.read_namespaced_pod("stays", "default")
    assert next(c.status for c in stays.status.conditions if c.type == "Ready") == "False"
    assert v1.read_namespaced_pod("default-300s", "default").metadata.deletion_timestamp is None


def test_daemonset_pod_stays_on_unreachable_node(api, sim) -> None:
    apps = client.AppsV1Api(api)
    apps.create_namespaced_daemon_set("default", _ds("agent"))
    wait_for(
        lambda: apps.read_namespaced_daemon_set("agent", "default").status.number_ready == 3, what="3 ready"
    )
    before = {n: p["metadata"]["uid"] for n, p in _ds_pods(sim, "agent").items()}
    sim.virtual.stop("virt-node-0000")
    wait_for(
        lambda: sim.store.get("nodes", "", "virt-node-0000")["spec"].get("taints"), what="unreachable taints"
    )
    # DaemonSet pods tolerate unreachable:NoExecute; unreachable:NoSchedule only stops new pods
    wait_for(
        lambda: apps.read_namespaced_daemon_set("agent", "default").status.number_ready == 2, what="2 ready"
    )
    status = apps.read_namespaced_daemon_set("agent", "default").status
    assert (status.desired_number_scheduled, status.current_number_scheduled) == (3, 3)
    assert {n: p["metadata"]["uid"] for n, p in _ds_pods(sim, "agent").items()} == before


def test_pods_of_a_deleted_node_are_garbage_collected(api, sim) -> None:
    v1 = client.CoreV1Api(api)
    v1.create_namespaced_pod("default", {"metadata": {"name": "orphan"}, "spec": {
        "nodeName": "virt-node-0002", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})  # fmt: skip
    v1.delete_node("virt-node-0002")
    wait_for(lambda: sim.store.get("pods", "default", "orphan") is None, what="orphan pod deleted")
    # the node's Lease is owned by the Node and goes with it
    assert sim.store.get("leases.coordination.k8s.io", "kube-node-lease", "virt-node-0002") is None
