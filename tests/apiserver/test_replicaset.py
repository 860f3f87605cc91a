"""ReplicaSet controller: replicas kept, adoption and surplus ranking, status, scale subresource, validation."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from .conftest import wait_for

PAUSE = "registry.k8s.io/pause:3.10"


def rs_body(name: str, replicas: int, labels: dict[str, str] | None = None, **pod_spec) -> dict:
    labels = labels or {"app": name}
    return {"metadata": {"name": name}, "spec": {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": name},
                     "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu", "cpu"]}]},
        "template": {"metadata": {"labels": {**labels, "tier": "gpu"}, "annotations": {"note": "x"}},
                     "spec": {"containers": [{"name": "c", "image": PAUSE}], **pod_spec}}}}  # fmt: skip


def owned_pods(sim, uid: str, namespace: str = "default") -> list[dict]:
    return [
        p
        for p in sim.store.list("pods", namespace)[0]
        if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])
    ]


def ready_status(apps: client.AppsV1Api, name: str, ready: int, namespace: str = "default"):
    def check():
        rs = apps.read_namespaced_replica_set(name, namespace)
        s = rs.status
        return rs if (s.ready_replicas or 0) == ready and s.replicas == ready else None

    return wait_for(check, what=f"{name}: {ready} ready replicas")


def test_replicaset_creates_owned_pods_and_reports_status(api, sim) -> None:
    apps = client.AppsV1Api(api)
    created = apps.create_namespaced_replica_set("default", rs_body("web", 3))
    assert (created.spec.replicas, created.metadata.generation) == (3, 1)
    rs = ready_status(apps, "web", 3)
    s = rs.status
    assert (
        s.replicas,
        s.fully_labeled_replicas,
        s.ready_replicas,
        s.available_replicas,
        s.observed_generation,
    ) == (
        3,
        3,
        3,
        3,
        1,
    )
    pods = owned_pods(sim, rs.metadata.uid)
    assert len(pods) == 3
    for pod in pods:
        meta = pod["metadata"]
        assert meta["name"].startswith("web-") and len(meta["name"]) == len("web-") + 5
        assert meta["labels"] == {"app": "web", "tier": "gpu"}
        assert meta["annotations"] == {"note": "x"}
        assert meta["ownerReferences"] == [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                            "uid": rs.metadata.uid, "controller": True,
                                            "blockOwnerDeletion": True}]  # fmt: skip
        assert pod["status"]["phase"] == "Running"
    # a deleted pod is replaced; a terminal one stops counting and is replaced too
    v1 = client.CoreV1Api(api)
    gone = pods[0]["metadata"]["name"]
    v1.delete_namespaced_pod(gone, "default")
    failed = pods[1]["metadata"]["name"]
    sim.store.modify("pods", "default", failed, lambda p: p["status"].update(phase="Failed"))

    def replaced():
        names = {p["metadata"]["name"] for p in owned_pods(sim, rs.metadata.uid)}
        active = [p for p in owned_pods(sim, rs.metadata.uid) if p["status"].get("phase") == "Running"]
        return gone not in names and failed in names and len(active) == 3

    wait_for(replaced, what="deleted and failed pods replaced")
    assert ready_status(apps, "web", 3).status.replicas == 3  # the Failed pod is not counted
    # deleting the ReplicaSet deletes its pods
    apps.delete_namespaced_replica_set("web", "default")
    wait_for(lambda: not owned_pods(sim, rs.metadata.uid), what="pods garbage-collected")


def test_surplus_pods_go_unscheduled_first_and_orphans_are_adopted(api, sim) -> None:
    apps, v1 = client.AppsV1Api(api), client.CoreV1Api(api)
    rs = apps.create_namespaced_replica_set("default", rs_body("pool", 2))
    ready_status(apps, "pool", 2)
    running = {p["metadata"]["name"] for p in owned_pods(sim, rs.metadata.uid)}
    # an orphan that matches the selector but can never be scheduled: adopted, then the first to go
    v1.create_namespaced_pod("default", {"metadata": {"name": "stray", "labels": {"app": "pool", "tier": "cpu"}},
                                         "spec": {"nodeSelector": {"nowhere": "true"},
                                                  "containers": [{"name": "c", "image": PAUSE}]}})  # fmt: skip
    wait_for(lambda: sim.store.get("pods", "default", "stray") is None, what="stray adopted and deleted")
    assert {p["metadata"]["name"] for p in owned_pods(sim, rs.metadata.uid)} == running
    events = [e for e in sim.store.list("events", "default")[0] if e["involvedObject"]["name"] == "pool"]
    assert {(e["reason"], e["message"]) for e in events} >= {
        ("SuccessfulDelete", "Deleted pod: stray"),
        *(("SuccessfulCreate", f"Created pod: {n}") for n in running),
    }
    # scaling down through the scale subresource; status follows, fullyLabeled counts template-labelled pods
    scale = apps.patch_namespaced_replica_set_scale("pool", "default", {"spec": {"replicas": 1}})
    assert (scale.spec.replicas, scale.status.selector) == (1, "app=pool,tier in (cpu,gpu)")
    wait_for(lambda: len(owned_pods(sim, rs.metadata.uid)) == 1, what="scaled to 1")
    after = ready_status(apps, "pool", 1)
    assert (after.metadata.generation, after.status.observed_generation) == (2, 2)
    # a pod relabelled out of the selector is released (ownerReference removed) and replaced
    kept = owned_pods(sim, rs.metadata.uid)[0]["metadata"]["name"]
    v1.patch_namespaced_pod(kept, "default", {"metadata": {"labels": {"app": "elsewhere"}}})
    wait_for(
        lambda: not sim.store.get("pods", "default", kept)["metadata"].get("ownerReferences"), what="released"
    )
    wait_for(lambda: len(owned_pods(sim, rs.metadata.uid)) == 1, what="replacement")
    assert owned_pods(sim, rs.metadata.uid)[0]["metadata"]["name"] != kept


def test_selector_must_match_template_labels(api) -> None:
    apps = client.AppsV1Api(api)
    body = rs_body("bad", 1, labels={"app": "other"})
    with pytest.raises(client.ApiException) as info:
        apps.create_namespaced_replica_set("default", body)
    status = json.loads(info.value.body)
    assert (info.value.status, status["reason"]) == (422, "Invalid")
    assert status["message"] == (
        'ReplicaSet.apps "bad" is invalid: spec.template.metadata.labels: Invalid value: '
        'map[string]string{"app":"other", "tier":"gpu"}: `selector` does not match template `labels`'
    )
    body = rs_body("neg", -1)
    with pytest.raises(client.ApiException) as info:
        apps.create_namespaced_replica_set("default", body)
    assert json.loads(info.value.body)["message"] == (
        'ReplicaSet.apps "neg" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0'
    )


def test_kubectl_scale_and_get(kubectl, sim, tmp_path) -> None:
    manifest = tmp_path / "rs.json"
    manifest.write_text(json.dumps({"apiVersion": "apps/v1", "kind": "ReplicaSet", **rs_body("cli", 1)}))
    assert kubectl("apply", "-f", str(manifest)).stdout.strip() == "replicaset.apps/cli created"
    assert kubectl("scale", "rs", "cli", "--replicas=3").stdout.strip() == "replicaset.apps/cli scaled"
    rs = sim.store.get("replicasets.apps", "default", "cli")
    wait_for(lambda: len(owned_pods(sim, rs["metadata"]["uid"])) == 3, what="3 pods")
    wait_for(lambda: sim.store.get("replicasets.apps", "default", "cli")["status"].get("readyReplicas") == 3,
             what="3 ready")  # fmt: skip
    assert kubectl("get", "rs", "--no-headers").stdout.split()[:4] == ["cli", "3", "3", "3"]
    assert kubectl("get", "rs", "cli", "-o", "jsonpath={.spec.replicas}").stdout == "3"
    assert (
        kubectl("delete", "rs", "cli").stdout.strip()
        == 'replicaset.apps "cli" deleted from default namespace'
    )
    wait_for(lambda: not owned_pods(sim, rs["metadata"]["uid"]), what="pods deleted with the ReplicaSet")
