"""The suite's two guards against the kubelet's slow retries of a ResourceClaim's preparation: a pod with claims
that stays bound and Pending is nudged (an annotation change makes its kubelet sync it now), and a release deletes
pods gracefully, so that "gone" means the kubelet has unprepared their claims (workloads.ClaimNudges, .release)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from gpuready.conformance import workloads
from gpuready.conformance.workloads import NUDGE_AFTER_S, NUDGE_ANNOTATION, ClaimNudges


def pod(
    name: str, claims: bool = True, node: str | None = "gpu-node-4", phase: str = "Pending"
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main"}]}
    if claims:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"claim-{name}"}]
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "annotations": {"gpuready.io/node": "gpu-node-4"}, "labels": {}},
        "spec": spec,
        "status": {"phase": phase},
    }


def test_a_bound_pending_pod_with_claims_is_due_after_the_wait_and_again_after_each_wait():
    nudges = ClaimNudges([pod("holder"), pod("plain", claims=False)])
    nudges.seen(pod("holder"), now=100.0)
    nudges.seen(pod("plain", claims=False), now=100.0)
    assert nudges.due(100.0 + NUDGE_AFTER_S - 0.1) == {}
    assert nudges.due(100.0 + NUDGE_AFTER_S) == {"holder": 1}  # the pod without claims never is
    assert nudges.due(100.0 + NUDGE_AFTER_S + 1) == {}
    assert nudges.due(100.0 + 2 * NUDGE_AFTER_S) == {"holder": 2}


@pytest.mark.parametrize(
    "later",
    [
        pod("holder", phase="Running"),
        pod("holder", phase="Failed"),
        {**pod("holder"), "metadata": {"name": "holder", "deletionTimestamp": "2026-12-02T07:00:00Z"}},
    ],
    ids=["running", "failed", "being-deleted"],
)
def test_a_pod_that_started_ended_or_is_going_is_not_nudged(later):
    nudges = ClaimNudges([pod("holder")])
    nudges.seen(pod("holder"), now=0.0)
    nudges.seen(later, now=1.0)
    assert nudges.due(NUDGE_AFTER_S * 10) == {}


def test_a_pod_not_bound_yet_waits_for_the_scheduler_not_the_kubelet():
    nudges = ClaimNudges([pod("holder", node=None)])
    nudges.seen(pod("holder", node=None), now=0.0)
    assert nudges.due(NUDGE_AFTER_S * 10) == {}


class Kubelet:
    """A namespace whose claim pods start only when their kubelet syncs them after a failed first preparation:
    on a change of the nudge annotation (as a real kubelet syncs on any annotation change)."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.deletes: list[dict[str, Any]] = []

    def create_namespace(self, body: Any) -> None:
        pass

    def create_namespaced_pod(self, namespace: str, body: dict[str, Any]) -> None:
        created = json.loads(json.dumps(body))
        created["spec"]["nodeName"] = "gpu-node-4"  # bound at once
        created["status"] = {"phase": "Pending"}
        self.pods[created["metadata"]["name"]] = created

    def patch_namespaced_pod(self, name: str, namespace: str, body: dict[str, Any], **kwargs: Any) -> None:
        self.patches.append((name, body))
        started = self.pods[name]
        started["metadata"]["annotations"].update(body["metadata"]["annotations"])
        started["status"] = {"phase": "Running"}
        self.events.append({"type": "MODIFIED", "raw_object": json.loads(json.dumps(started))})

    def list_namespaced_pod(self, namespace: str, _preload_content: bool = True, **kwargs: Any) -> Any:
        if "label_selector" in kwargs:  # release: the pods it finds, then (after its delete) none left
            meta = type("Meta", (), {"name": "holder"})()
            found = [] if self.deletes else [type("Pod", (), {"metadata": meta})()]
            return type("Pods", (), {"items": found})()
        body = {"items": list(self.pods.values()), "metadata": {"resourceVersion": "1"}}
        return type("Raw", (), {"data": json.dumps(body).encode()})()

    def delete_collection_namespaced_pod(self, namespace: str, **kwargs: Any) -> None:
        self.deletes.append(kwargs)

    def read_namespaced_pod_log(self, name: str, namespace: str, **kwargs: Any) -> str:
        return "ok\n"

    def list_namespaced_event(self, namespace: str, **kwargs: Any) -> Any:
        return type("Events", (), {"items": []})()


def test_a_run_nudges_its_stalled_claim_pod_which_then_runs(monkeypatch):
    from kubernetes import watch

    kubelet = Kubelet()

    class Watch:
        def __init__(self) -> None:
            self.get_return_type = None

        def stream(self, func: Any, *args: Any, timeout_seconds: int, **kwargs: Any) -> Any:
            time.sleep(0.05)
            sent, kubelet.events[:] = list(kubelet.events), []
            return iter(sent)

        def stop(self) -> None:
            pass

    monkeypatch.setattr(workloads, "NUDGE_AFTER_S", 0.1)
    monkeypatch.setattr(workloads, "PROGRESS_EVERY", 0.1)
    monkeypatch.setattr(watch, "Watch", Watch)
    run = workloads.Workloads(
        type("Cluster", (), {"core": kubelet, "request_timeout": 1.0})(), namespace="ns-1"
    )
    holder = pod("holder")
    del holder["spec"]["nodeName"], holder["status"]
    results = run.run([(holder, "running")], timeout=5.0)
    assert results["holder"].phase == "Running" and not results["holder"].timed_out
    assert kubelet.patches == [("holder", {"metadata": {"annotations": {NUDGE_ANNOTATION: "1"}}})]

    run.release(["metrics"], timeout=1.0)  # the pods of a check go gracefully: their kubelet unprepares first
    assert kubelet.deletes and all(d["grace_period_seconds"] >= 1 for d in kubelet.deletes)


class DeadKubelet(Kubelet):
    """A node whose kubelet never confirms a graceful delete: its pods stay until they are deleted by force."""

    def list_namespaced_pod(self, namespace: str, _preload_content: bool = True, **kwargs: Any) -> Any:
        meta = type("Meta", (), {"name": "holder"})()
        gone = any(d["grace_period_seconds"] == 0 for d in self.deletes)
        return type("Pods", (), {"items": [] if gone else [type("Pod", (), {"metadata": meta})()]})()


def test_a_release_deletes_by_force_what_a_down_kubelet_does_not_confirm(monkeypatch):
    monkeypatch.setattr(workloads, "RELEASE_FORCE_AFTER_S", 0.1)
    kubelet = DeadKubelet()
    run = workloads.Workloads(
        type("Cluster", (), {"core": kubelet, "request_timeout": 1.0})(), namespace="ns-1"
    )
    run.created = True
    run.release(["metrics"], timeout=30.0)
    assert [d["grace_period_seconds"] for d in kubelet.deletes] == [workloads.RELEASE_GRACE_S, 0]
