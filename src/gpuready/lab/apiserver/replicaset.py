"""apps/v1 ReplicaSet: the controller that keeps `spec.replicas` pods, and the autoscaling/v1 Scale view of it.

Drains depend on it: an evicted pod of a ReplicaSet comes back on another node only because this controller
notices the missing replica. It behaves like kube-controller-manager's: it adopts matching orphans and releases
owned pods that stop matching, counts only active pods (not terminal, not being deleted), deletes surplus pods in
the real ranking (unscheduled, then pending, then not ready, then most recently ready, most restarted, newest
first), and reports status counted from the pods it saw before acting, so the status catches up on the next
sync as the real one does.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from . import errors, tables
from .controllers import _Loop, _parse_time
from .events import Recorder
from .selectors import match_label_selector_object
from .store import Event

if TYPE_CHECKING:
    from .server import ApiServer

Obj = dict[str, Any]
KEY = "replicasets.apps"
COMPONENT = "replicaset-controller"
_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}


def pod_ready_since(pod: Obj) -> float | None:
    """When the pod last became Ready (epoch seconds), None if it is not Ready."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            if c.get("status") != "True":
                return None
            return _parse_time(c.get("lastTransitionTime")) or 0.0
    return None


def is_active(pod: Obj) -> bool:
    """Counts toward replicas: not terminal and not being deleted (controller.FilterActivePods)."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def controller_ref(obj: Obj) -> Obj | None:
    return next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)


def selector_string(selector: Obj | None) -> str:
    """metav1.FormatLabelSelector: requirements sorted by key, in the query-string syntax."""
    if selector is None:
        return "<none>"
    reqs: list[tuple[str, str]] = []
    for k, v in (selector.get("matchLabels") or {}).items():
        reqs.append((k, f"{k}={v}"))
    for e in selector.get("matchExpressions") or []:
        k, op, values = e.get("key", ""), e.get("operator", ""), ",".join(sorted(e.get("values") or []))
        text = {"In": f"{k} in ({values})", "NotIn": f"{k} notin ({values})", "Exists": k,
                "DoesNotExist": f"!{k}"}.get(op, f"{k} {op} ({values})")  # fmt: skip
        reqs.append((k, text))
    return ",".join(t for _, t in sorted(reqs)) or ""


def scale_of(rs: Obj) -> Obj:
    """The autoscaling/v1 Scale object `kubectl scale` reads and writes."""
    meta = rs["metadata"]
    spec: Obj = {}
    if rs.get("spec", {}).get("replicas"):
        spec["replicas"] = rs["spec"]["replicas"]
    return {
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                     if k in meta},
        "spec": spec,
        "status": {"replicas": int((rs.get("status") or {}).get("replicas", 0)),
                   "selector": selector_string((rs.get("spec") or {}).get("selector"))},
    }  # fmt: skip


def _deletion_rank(pod: Obj) -> tuple[Any, ...]:
    """Sort key, lowest deleted first (controller.ActivePodsWithRanks without the co-location rank)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    since = pod_ready_since(pod)
    restarts = sum(int(c.get("restartCount", 0)) for c in status.get("containerStatuses") or [])
    created = _parse_time(pod["metadata"].get("creationTimestamp")) or 0.0
    return (
        bool(spec.get("nodeName")),
        _PHASE_RANK.get(status.get("phase", "Pending"), 0),
        since is not None,
        -(since or 0.0),
        -restarts,
        -created,
    )


class ReplicaSetController(_Loop):
    keys = (KEY, "pods")

    def __init__(self, server: ApiServer) -> None:
        super().__init__(server)
        self._dirty: set[tuple[str, str]] = set()
        self._orphans: set[str] = set()  # namespaces with orphan pods to offer for adoption
        self._recheck: dict[
            tuple[str, str], float
        ] = {}  # minReadySeconds: when a ready pod becomes available
        self._events = Recorder(self.store)

    def observe(self, ev: Event) -> None:
        meta = ev.obj["metadata"]
        ns = meta.get("namespace", "")
        if ev.key == KEY:
            if ev.type != "DELETED":
                self._dirty.add((ns, meta["name"]))
            return
        refs = [controller_ref(o) for o in (ev.obj, ev.old) if o is not None]
        owners = {r.get("name", "") for r in refs if r is not None and r.get("kind") == "ReplicaSet"}
        for name in owners:
            self._dirty.add((ns, name))
        if ev.type != "DELETED" and controller_ref(ev.obj) is None:
            self._orphans.add(ns)

    def reconcile(self) -> None:
        for ns in self._orphans:
            for rs in self.store.list(KEY, ns)[0]:
                self._dirty.add((ns, rs["metadata"]["name"]))
        self._orphans = set()
        now = time.time()
        for key, when in list(self._recheck.items()):
            if when <= now:
                del self._recheck[key]
                self._dirty.add(key)
        dirty, self._dirty = self._dirty, set()
        for ns, name in sorted(dirty):
            # One lock per sync: a ReplicaSet deleted (with its pods) mid-sync must not get a pod created for it.
            with self.store.lock:
                rs = self.store.get(KEY, ns, name)
                if rs is not None and not rs["metadata"].get("deletionTimestamp"):
                    self._sync(rs)

    # sync --------------------------------------------------------------------------------------------------

    def _sync(self, rs: Obj) -> None:
        meta = rs["metadata"]
        ns, uid = meta.get("namespace", ""), meta["uid"]
        selector = (rs.get("spec") or {}).get("selector") or {}
        owned: list[Obj] = []
        for pod in self.store.list("pods", ns)[0]:
            ref = controller_ref(pod)
            labels = pod["metadata"].get("labels") or {}
            matches = match_label_selector_object(selector, labels)
            if ref is not None and ref.get("uid") == uid:
                if matches:
                    owned.append(pod)
                else:
                    self._set_owner(pod, rs, adopt=False)
            elif ref is None and matches and not pod["metadata"].get("deletionTimestamp"):
                adopted = self._set_owner(pod, rs, adopt=True)
                if adopted is not None:
                    owned.append(adopted)
        active = [p for p in owned if is_active(p)]
        failure = self._manage(rs, active)
        self._update_status(rs, active, failure)

    def _set_owner(self, pod: Obj, rs: Obj, adopt: bool) -> Obj | None:
        uid = rs["metadata"]["uid"]

        def change(p: Obj) -> bool:
            refs = [r for r in p["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            if adopt:
                if controller_ref(p) is not None:
                    return False
                refs.append(self._owner_ref(rs))
            if refs:
                p["metadata"]["ownerReferences"] = refs
            else:
                p["metadata"].pop("ownerReferences", None)
            return True

        return self.store.modify(
            "pods", pod["metadata"].get("namespace", ""), pod["metadata"]["name"], change
        )

    @staticmethod
    def _owner_ref(rs: Obj) -> Obj:
        meta = rs["metadata"]
        return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": meta["name"], "uid": meta["uid"],
                "controller": True, "blockOwnerDeletion": True}  # fmt: skip

    def _manage(self, rs: Obj, active: list[Obj]) -> str | None:
        """Create or delete pods toward spec.replicas; the first create error's message, if any."""
        want = int((rs.get("spec") or {}).get("replicas", 1))
        diff = len(active) - want
        if diff < 0:
            for _ in range(-diff):
                try:
                    pod = self.server.create_internal("pods", self._pod_for(rs))
                except errors.ApiError as exc:
                    message = f"Error creating: {exc.message}"
                    self._events.event(rs, "Warning", "FailedCreate", message, COMPONENT)
                    return message
                self._events.event(rs, "Normal", "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}",
                                   COMPONENT)  # fmt: skip
        elif diff > 0:
            for pod in sorted(active, key=_deletion_rank)[:diff]:
                pmeta = pod["metadata"]
                self.server.delete_internal("pods", pmeta.get("namespace", ""), pmeta["name"])
                self._events.event(
                    rs, "Normal", "SuccessfulDelete", f"Deleted pod: {pmeta['name']}", COMPONENT
                )
        return None

    def _pod_for(self, rs: Obj) -> Obj:
        meta = rs["metadata"]
        template = json.loads(json.dumps((rs.get("spec") or {}).get("template") or {}))
        tmeta = template.get("metadata") or {}
        pmeta: Obj = {"generateName": f"{meta['name']}-", "namespace": meta.get("namespace", ""),
                      "labels": dict(tmeta.get("labels") or {}), "ownerReferences": [self._owner_ref(rs)]}  # fmt: skip
        if tmeta.get("annotations"):
            pmeta["annotations"] = dict(tmeta["annotations"])
        if tmeta.get("finalizers"):
            pmeta["finalizers"] = list(tmeta["finalizers"])
        return {"apiVersion": "v1", "kind": "Pod", "metadata": pmeta, "spec": template.get("spec") or {}}

    def _update_status(self, rs: Obj, active: list[Obj], failure: str | None) -> None:
        meta = rs["metadata"]
        spec = rs.get("spec") or {}
        template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        min_ready = int(spec.get("minReadySeconds") or 0)
        now = time.time()
        labeled = ready = available = 0
        for pod in active:
            labels = pod["metadata"].get("labels") or {}
            if all(labels.get(k) == v for k, v in template_labels.items()):
                labeled += 1
            since = pod_ready_since(pod)
            if since is None:
                continue
            ready += 1
            if min_ready <= 0 or since + min_ready <= now:
                available += 1
            else:
                key = (meta.get("namespace", ""), meta["name"])
                self._recheck[key] = min(self._recheck.get(key, float("inf")), since + min_ready)
        status: Obj = {"replicas": len(active)}
        for name, value in (("fullyLabeledReplicas", labeled), ("readyReplicas", ready),
                            ("availableReplicas", available), ("observedGeneration", meta.get("generation", 1))):  # fmt: skip
            if value:
                status[name] = value
        conditions = [c for c in (rs.get("status") or {}).get("conditions") or []
                      if c.get("type") != "ReplicaFailure"]  # fmt: skip
        if failure is not None:
            old = next((c for c in (rs.get("status") or {}).get("conditions") or []
                        if c.get("type") == "ReplicaFailure"), None)  # fmt: skip
            stamp = (old or {}).get("lastTransitionTime") or time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime()
            )
            conditions.append({"type": "ReplicaFailure", "status": "True", "lastTransitionTime": stamp,
                               "reason": "FailedCreate", "message": failure})  # fmt: skip
        if conditions:
            status["conditions"] = conditions
        if rs.get("status") == status:
            return

        def change(obj: Obj) -> None:
            obj["status"] = status

        self.store.modify(KEY, meta.get("namespace", ""), meta["name"], change)


def _row(rs: Obj) -> list[Any]:
    spec, status = rs.get("spec") or {}, rs.get("status") or {}
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    return [rs["metadata"]["name"], int(spec.get("replicas", 1)), int(status.get("replicas", 0)),
            int(status.get("readyReplicas", 0)), tables.age(rs), ",".join(c.get("name", "") for c in containers),
            ",".join(c.get("image", "") for c in containers), selector_string(spec.get("selector"))]  # fmt: skip


# `kubectl get rs` columns (the real ReplicaSet printer); tables.py has no entry of its own for this resource.
tables.PRINTERS[KEY] = (
    [("Name", "string", 0, "name"), ("Desired", "integer", 0, ""), ("Current", "integer", 0, ""),
     ("Ready", "integer", 0, ""), ("Age", "string", 0, ""), ("Containers", "string", 1, ""),
     ("Images", "string", 1, ""), ("Selector", "string", 1, "")],
    _row,
)  # fmt: skip

__all__ = ["ReplicaSetController", "scale_of", "selector_string"]
