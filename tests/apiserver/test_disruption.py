"""PodDisruptionBudget status (disruption controller) and the eviction subresource that honours it."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from gpuready.lab.apiserver.disruption import DisruptionController

from .conftest import wait_for
from .test_replicaset import PAUSE, owned_pods, ready_status, rs_body

PDB = "poddisruptionbudgets.policy"
TOO_MANY = "Cannot evict pod as it would violate the pod's disruption budget."


def pdb_body(name: str, app: str, **budget) -> dict:
    return {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"app": app}}, **budget}}


def settled(sim, name: str, namespace: str = "default") -> dict:
    """The budget's status once the controller has observed its generation."""

    def check():
        pdb = sim.store.get(PDB, namespace, name)
        status = (pdb or {}).get("status") or {}
        return status if status.get("observedGeneration") == pdb["metadata"]["generation"] else None

    return wait_for(check, what=f"{name} status observed")


def numbers(status: dict) -> tuple[int, int, int, int]:
    return (
        status["expectedPods"],
        status["currentHealthy"],
        status["desiredHealthy"],
        status["disruptionsAllowed"],
    )


def stop_disruption_controller(sim) -> None:
    """Freeze the budget statuses, so what an eviction itself writes can be seen."""
    next(c for c in sim.controllers if isinstance(c, DisruptionController)).stop()


def evict(v1: client.CoreV1Api, name: str, namespace: str = "default", **body) -> None:
    v1.create_namespaced_pod_eviction(
        name, namespace, {"metadata": {"name": name, "namespace": namespace}, **body}
    )


def refusal(v1: client.CoreV1Api, name: str) -> tuple[int, dict]:
    with pytest.raises(client.ApiException) as info:
        evict(v1, name)
    return info.value.status, json.loads(info.value.body)


def test_status_for_each_budget_form(api, sim) -> None:
    apps, policy = client.AppsV1Api(api), client.PolicyV1Api(api)
    apps.create_namespaced_replica_set("default", rs_body("gpu", 4))
    ready_status(apps, "gpu", 4)
    for name, budget in (("min-int", {"minAvailable": 3}), ("min-pct", {"minAvailable": "50%"}),
                         ("max-int", {"maxUnavailable": 1}), ("max-pct", {"maxUnavailable": "30%"}),
                         ("all", {"minAvailable": 4})):  # fmt: skip
        policy.create_namespaced_pod_disruption_budget("default", pdb_body(name, "gpu", **budget))
    # (expectedPods, currentHealthy, desiredHealthy, disruptionsAllowed); percentages round up
    assert numbers(settled(sim, "min-int")) == (4, 4, 3, 1)
    assert numbers(settled(sim, "min-pct")) == (4, 4, 2, 2)
    assert numbers(settled(sim, "max-int")) == (4, 4, 3, 1)
    assert numbers(settled(sim, "max-pct")) == (4, 4, 2, 2)  # ceil(30% of 4) = 2 may be unavailable
    status = settled(sim, "all")
    assert numbers(status) == (4, 4, 4, 0)
    assert [(c["type"], c["status"], c["reason"], c["message"], c["observedGeneration"])
            for c in status["conditions"]] == [("DisruptionAllowed", "False", "InsufficientPods", "", 1)]  # fmt: skip
    typed = policy.read_namespaced_pod_disruption_budget("min-int", "default").status
    assert (typed.disruptions_allowed, typed.conditions[0].reason) == (1, "SufficientPods")
    # scale-dependent forms follow the ReplicaSet's spec.replicas at once, before its pods exist
    apps.patch_namespaced_replica_set_scale("gpu", "default", {"spec": {"replicas": 6}})
    wait_for(lambda: settled(sim, "max-int")["expectedPods"] == 6, what="max-int sees 6")
    ready_status(apps, "gpu", 6)
    wait_for(lambda: numbers(settled(sim, "max-int")) == (6, 6, 5, 1), what="max-int 6 healthy")
    assert numbers(settled(sim, "min-pct")) == (6, 6, 3, 3)
    assert numbers(settled(sim, "min-int")) == (6, 6, 3, 3)
    # a spec change bumps generation; the controller observes it
    policy.patch_namespaced_pod_disruption_budget("min-int", "default", {"spec": {"minAvailable": 5}})
    assert numbers(wait_for(lambda: settled(sim, "min-int") if settled(sim, "min-int")["observedGeneration"] == 2
                            else None, what="generation 2")) == (6, 6, 5, 1)  # fmt: skip


def test_bare_pods_count_for_int_min_available_only(api, sim) -> None:
    v1, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
    for i in range(2):
        v1.create_namespaced_pod("default", {"metadata": {"name": f"bare-{i}", "labels": {"app": "bare"}},
                                             "spec": {"containers": [{"name": "c", "image": PAUSE}]}})  # fmt: skip
    policy.create_namespaced_pod_disruption_budget("default", pdb_body("bare-min", "bare", minAvailable=1))
    wait_for(lambda: numbers(settled(sim, "bare-min")) == (2, 2, 1, 1), what="bare-min")
    # like the real controller: unmanaged pods have no scale, so a maxUnavailable budget expects 0 and allows 0
    policy.create_namespaced_pod_disruption_budget("default", pdb_body("bare-max", "bare", maxUnavailable=1))
    assert numbers(settled(sim, "bare-max")) == (0, 2, 0, 0)
    reasons = {
        e["reason"]
        for e in sim.store.list("events", "default")[0]
        if e["involvedObject"]["name"] == "bare-max"
    }
    assert reasons == {"UnmanagedPods"}
    # a budget over no pods: an event says so
    policy.create_namespaced_pod_disruption_budget("default", pdb_body("empty", "nothing", minAvailable=1))
    assert numbers(settled(sim, "empty")) == (0, 0, 1, 0)
    events = [e for e in sim.store.list("events", "default")[0] if e["involvedObject"]["name"] == "empty"]
    assert [(e["type"], e["reason"], e["message"]) for e in events] == [
        ("Normal", "NoPods", "No matching pods found")
    ]


def test_eviction_spends_the_budget_before_the_controller_catches_up(api, sim) -> None:
    apps, v1, policy = client.AppsV1Api(api), client.CoreV1Api(api), client.PolicyV1Api(api)
    rs = apps.create_namespaced_replica_set("default", rs_body("train", 3))
    ready_status(apps, "train", 3)
    policy.create_namespaced_pod_disruption_budget("default", pdb_body("train", "train", minAvailable=2))
    assert numbers(settled(sim, "train")) == (3, 3, 2, 1)
    stop_disruption_controller(sim)
    first, second, third = sorted(p["metadata"]["name"] for p in owned_pods(sim, rs.metadata.uid))
    evict(v1, first, deleteOptions={"dryRun": ["All"]})  # a dry run spends nothing
    assert sim.store.get("pods", "default", first) is not None
    assert settled(sim, "train")["disruptionsAllowed"] == 1
    evict(v1, first)
    assert sim.store.get("pods", "default", first) is None
    status = sim.store.get(PDB, "default", "train")["status"]
    assert (status["disruptionsAllowed"], list(status["disruptedPods"])) == (0, [first])
    assert [(c["status"], c["reason"]) for c in status["conditions"]] == [("False", "InsufficientPods")]
    code, body = refusal(v1, second)
    assert (code, body["reason"], body["message"]) == (429, "TooManyRequests", TOO_MANY)
    assert body["details"] == {"causes": [{"reason": "DisruptionBudget",
                                           "message": "The disruption budget train needs 2 healthy pods and has 3 "
                                                      "currently"}]}  # fmt: skip
    assert sim.store.get("pods", "default", second) is not None
    # a pod already being deleted caused its disruption already: always evictable
    sim.store.modify(
        "pods", "default", second, lambda p: p["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z")
    )
    evict(v1, second)
    assert sim.store.get("pods", "default", second) is None
    # an unready pod while the budget is met costs nothing; a Pending one never checks the budget
    sim.store.modify("pods", "default", third, lambda p: [c.update(status="False") for c in p["status"]["conditions"]
                                                          if c["type"] == "Ready"])  # fmt: skip
    assert sim.store.get(PDB, "default", "train")["status"]["currentHealthy"] == 3
    evict(v1, third)
    assert sim.store.get("pods", "default", third) is None
    # a budget whose spec changed since the controller last looked: 429 with Retry-After
    replacement = next(p for p in owned_pods(sim, rs.metadata.uid) if p["status"].get("phase") == "Running")
    policy.patch_namespaced_pod_disruption_budget("train", "default", {"spec": {"minAvailable": 1}})
    with pytest.raises(client.ApiException) as info:
        evict(v1, replacement["metadata"]["name"])
    assert (info.value.status, info.value.headers["Retry-After"]) == (429, "10")
    assert json.loads(info.value.body)["details"] == {"causes": [{"reason": "DisruptionBudget", "message":
        "The disruption budget train is still being processed by the server."}], "retryAfterSeconds": 10}  # fmt: skip


def test_unready_pod_is_evictable_only_while_the_budget_holds_or_always_allow(api, sim) -> None:
    apps, v1, policy = client.AppsV1Api(api), client.CoreV1Api(api), client.PolicyV1Api(api)
    rs = apps.create_namespaced_replica_set("default", rs_body("flaky", 3))
    ready_status(apps, "flaky", 3)
    policy.create_namespaced_pod_disruption_budget("default", pdb_body("flaky", "flaky", minAvailable=3))
    assert numbers(settled(sim, "flaky")) == (3, 3, 3, 0)
    sick = owned_pods(sim, rs.metadata.uid)[0]["metadata"]["name"]
    sim.store.modify("pods", "default", sick, lambda p: [c.update(status="False") for c in p["status"]["conditions"]
                                                         if c["type"] == "Ready"])  # fmt: skip
    wait_for(lambda: numbers(settled(sim, "flaky")) == (3, 2, 3, 0), what="2 healthy")
    # the budget is already broken (2 < 3): the default IfHealthyBudget policy keeps even the unready pod
    code, body = refusal(v1, sick)
    assert (code, body["details"]["causes"][0]["message"]) == (
        429,
        "The disruption budget flaky needs 3 healthy pods and has 2 currently",
    )
    policy.patch_namespaced_pod_disruption_budget("flaky", "default", {"spec": {"unhealthyPodEvictionPolicy":
                                                                                "AlwaysAllow"}})  # fmt: skip
    wait_for(lambda: settled(sim, "flaky")["observedGeneration"] == 2, what="generation 2 observed")
    evict(v1, sick)
    assert sim.store.get("pods", "default", sick) is None
    healthy = next(p for p in owned_pods(sim, rs.metadata.uid) if p["metadata"]["name"] != sick)
    assert refusal(v1, healthy["metadata"]["name"])[0] == 429


def test_eviction_deletes_with_disruption_target_and_refuses_two_budgets(api, sim) -> None:
    apps, v1, policy = client.AppsV1Api(api), client.CoreV1Api(api), client.PolicyV1Api(api)
    rs = apps.create_namespaced_replica_set("default", rs_body("inf", 2))
    ready_status(apps, "inf", 2)
    watch_from = sim.store.resource_version
    policy.create_namespaced_pod_disruption_budget("default", pdb_body("a", "inf", maxUnavailable=1))
    settled(sim, "a")
    name = owned_pods(sim, rs.metadata.uid)[0]["metadata"]["name"]
    evict(v1, name)
    watcher = sim.store.watch("pods", "default", since=watch_from)
    events = []
    while not watcher.queue.empty():
        events.append(watcher.queue.get())
    watcher.close()
    deleted = next(e.obj for e in events if e.type == "DELETED" and e.obj["metadata"]["name"] == name)
    target = next(c for c in deleted["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert (target["status"], target["reason"], target["message"]) == (
        "True",
        "EvictionByEvictionAPI",
        "Eviction API: evicting",
    )
    ready_status(apps, "inf", 2)
    policy.create_namespaced_pod_disruption_budget("default", pdb_body("b", "inf", minAvailable=0))
    settled(sim, "b")
    victim = owned_pods(sim, rs.metadata.uid)[0]["metadata"]["name"]
    code, body = refusal(v1, victim)
    assert (code, body) == (500, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": "This pod has more than one PodDisruptionBudget, which the eviction "
                                             "subresource does not support.", "code": 500})  # fmt: skip
    with pytest.raises(client.ApiException) as info:
        v1.create_namespaced_pod_eviction(victim, "default", {"metadata": {"name": "other"}})
    assert (info.value.status, json.loads(info.value.body)["message"]) == (
        400,
        "name in URL does not match name in Eviction object",
    )
    with pytest.raises(client.ApiException) as info:
        evict(v1, "missing")
    assert (info.value.status, json.loads(info.value.body)["message"]) == (404, 'pods "missing" not found')


def test_budget_validation(api) -> None:
    policy = client.PolicyV1Api(api)
    with pytest.raises(client.ApiException) as info:
        policy.create_namespaced_pod_disruption_budget("default", pdb_body("bad", "x", minAvailable="150%"))
    assert json.loads(info.value.body)["message"] == (
        'PodDisruptionBudget.policy "bad" is invalid: spec.minAvailable: Invalid value: 150%: must not be greater '
        "than 100%"
    )
    with pytest.raises(client.ApiException) as info:
        policy.create_namespaced_pod_disruption_budget("default", pdb_body("bad", "x", maxUnavailable=-1))
    assert json.loads(info.value.body)["message"] == (
        'PodDisruptionBudget.policy "bad" is invalid: spec.maxUnavailable: Invalid value: -1: must be greater than '
        "or equal to 0"
    )


# kubectl drain ---------------------------------------------------------------------------------------------------

NODES = ("virt-node-0000", "virt-node-0001", "virt-node-0002")


def gpu_rs_on_first_node(kubectl, apps: client.AppsV1Api, name: str, replicas: int) -> None:
    """A GPU ReplicaSet whose pods all landed on the first node (the others cordoned while it scheduled)."""
    for node in NODES[1:]:
        kubectl("cordon", node)
    body = rs_body(name, replicas)
    body["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    apps.create_namespaced_replica_set("default", body)
    ready_status(apps, name, replicas)
    for node in NODES[1:]:
        kubectl("uncordon", node)


def apply_pdb(kubectl, tmp_path, name: str, **budget) -> None:
    """`kubectl apply` (JSON): `kubectl create pdb` sends protobuf, which the simulator does not decode for PDBs."""
    manifest = tmp_path / f"{name}-pdb.json"
    manifest.write_text(json.dumps({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                                    **pdb_body(name, name, **budget)}))  # fmt: skip
    out = kubectl("apply", "-f", str(manifest)).stdout.strip()
    assert out == f"poddisruptionbudget.policy/{name} created"


def test_kubectl_drain_evicts_and_pods_come_back_elsewhere(api, sim, kubectl, tmp_path) -> None:
    apps = client.AppsV1Api(api)
    gpu_rs_on_first_node(kubectl, apps, "cuda", 3)
    rs = sim.store.get("replicasets.apps", "default", "cuda")
    before = {p["metadata"]["name"] for p in owned_pods(sim, rs["metadata"]["uid"])}
    assert {p["spec"]["nodeName"] for p in owned_pods(sim, rs["metadata"]["uid"])} == {NODES[0]}
    apply_pdb(kubectl, tmp_path, "cuda", maxUnavailable=1)
    settled(sim, "cuda")
    out = kubectl(
        "drain", NODES[0], "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=30s", timeout=60
    )
    for name in before:
        assert f"pod/{name} evicted" in out.stdout
    assert f"node/{NODES[0]} drained" in out.stdout

    def rescheduled():
        pods = [p for p in owned_pods(sim, rs["metadata"]["uid"]) if p["status"].get("phase") == "Running"]
        return pods if len(pods) == 3 else None

    pods = wait_for(rescheduled, what="3 replacements running")
    assert not before & {p["metadata"]["name"] for p in pods}
    assert {p["spec"]["nodeName"] for p in pods} <= set(NODES[1:])
    node = sim.store.get("nodes", "", NODES[0])
    assert node["spec"]["unschedulable"] is True


def test_kubectl_drain_blocked_by_budget_times_out(api, sim, kubectl, tmp_path) -> None:
    apps = client.AppsV1Api(api)
    gpu_rs_on_first_node(kubectl, apps, "hold", 2)
    apply_pdb(kubectl, tmp_path, "hold", minAvailable=2)
    assert numbers(settled(sim, "hold")) == (2, 2, 2, 0)
    out = kubectl("drain", NODES[0], "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=1s", check=False,
                  timeout=60)  # fmt: skip
    assert out.returncode == 1
    pods = sorted(p["metadata"]["name"] for p in owned_pods(sim, sim.store.get("replicasets.apps", "default",
                                                                                "hold")["metadata"]["uid"]))  # fmt: skip
    for name in pods:
        assert (
            f'error when evicting pods/"{name}" -n "default" (will retry after 5s): {TOO_MANY}' in out.stderr
        )
        assert f'error when evicting pods/"{name}" -n "default": global timeout reached: 1s' in out.stderr
    assert all(sim.store.get("pods", "default", n)["spec"]["nodeName"] == NODES[0] for n in pods)
