"""Cluster controllers: DaemonSet, node lifecycle, and namespace bootstrap (default ServiceAccount, root CA).

Each controller is one thread fed by store watches on a single queue, so a burst of events is drained and then
reconciled once per object (the dirty set), rather than once per event.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import threading
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .events import Recorder
from .scheduler import tolerates
from .selectors import match_label_selector_object, match_node_selector_terms
from .store import Event, Store, now_rfc3339

if TYPE_CHECKING:
    from .server import ApiServer

Obj = dict[str, Any]
log = logging.getLogger(__name__)


class _Loop:
    """A controller thread: watches `keys`, collects events, calls `reconcile()` when the queue is drained."""

    keys: tuple[str, ...] = ()
    period = 1.0

    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.store: Store = server.store
        self._queue: queue.SimpleQueue[Event | None] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sim-{type(self).__name__}", daemon=True)

    def start(self) -> None:
        initial: list[Event] = []
        with self.store.lock:
            for key in self.keys:
                items, _ = self.store.list(key)
                initial.extend(Event("ADDED", key, o, None, 0) for o in items)
                self.store.watch(key, into=self._queue)
        for ev in initial:
            self._queue.put(ev)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                ev = self._queue.get(timeout=self.period)
                if ev is None:
                    return
                self.observe(ev)
                while True:
                    ev = self._queue.get_nowait()
                    if ev is None:
                        return
                    self.observe(ev)
            except queue.Empty:
                pass
            try:
                self.reconcile()
            except Exception:
                log.exception("%s reconcile error", type(self).__name__)

    def observe(self, ev: Event) -> None:  # pragma: no cover - overridden
        pass

    def reconcile(self) -> None:  # pragma: no cover - overridden
        pass


# DaemonSets --------------------------------------------------------------------------------------------------

DS_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]


def daemon_pod_should_run(template_spec: Obj, node: Obj) -> tuple[bool, bool]:
    """(should schedule a new pod, should keep an existing one), like the real DaemonSet controller: an
    untolerated NoSchedule taint stops new pods only; an untolerated NoExecute taint removes them too."""
    tolerations = list(template_spec.get("tolerations") or []) + DS_TOLERATIONS
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (template_spec.get("nodeSelector") or {}).items()):
        return False, False
    required = ((template_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required and not match_node_selector_terms(required.get("nodeSelectorTerms") or [], node):
        return False, False
    schedule = keep = True
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            schedule = False
            keep = keep and taint.get("effect") != "NoExecute"
    return schedule, keep


def _template_hash(template: Obj) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def _pod_node(pod: Obj) -> str | None:
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        return node
    affinity = (((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in affinity.get("nodeSelectorTerms") or []:
        for f in term.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("values"):
                return f["values"][0]
    return None


class DaemonSetController(_Loop):
    keys = ("daemonsets.apps", "pods", "nodes")

    def __init__(self, server: ApiServer) -> None:
        super().__init__(server)
        self._dirty: set[tuple[str, str]] = set()
        self._all = False

    def observe(self, ev: Event) -> None:
        meta = ev.obj["metadata"]
        if ev.key == "daemonsets.apps":
            if ev.type != "DELETED":
                self._dirty.add((meta.get("namespace", ""), meta["name"]))
        elif ev.key == "nodes":
            self._all = True
        else:
            for ref in meta.get("ownerReferences") or []:
                if ref.get("kind") == "DaemonSet" and ref.get("controller"):
                    self._dirty.add((meta.get("namespace", ""), ref.get("name", "")))

    def reconcile(self) -> None:
        if self._all:
            self._all = False
            for ds in self.store.list("daemonsets.apps")[0]:
                self._dirty.add((ds["metadata"].get("namespace", ""), ds["metadata"]["name"]))
        dirty, self._dirty = self._dirty, set()
        nodes = self.store.list("nodes")[0] if dirty else []
        for ns, name in sorted(dirty):
            ds = self.store.get("daemonsets.apps", ns, name)
            if ds is not None and not ds["metadata"].get("deletionTimestamp"):
                self._sync(ds, nodes)

    def _sync(self, ds: Obj, nodes: list[Obj]) -> None:
        meta = ds["metadata"]
        template = ds["spec"]["template"]
        generation = str(meta.get("generation", 1))
        pods = [
            self.store.get(k, pns, pname)
            for k, pns, pname in self.store.dependents(meta["uid"])
            if k == "pods"
        ]
        by_node: dict[str, list[Obj]] = {}
        for p in pods:
            if p is not None and not p["metadata"].get("deletionTimestamp"):
                by_node.setdefault(_pod_node(p) or "", []).append(p)
        verdicts = {
            n["metadata"]["name"]: daemon_pod_should_run(template.get("spec") or {}, n) for n in nodes
        }
        eligible = {name: v for name, v in verdicts.items() if v[0]}
        for node_name, node_pods in by_node.items():
            keep = verdicts.get(node_name, (False, False))[1]
            for i, p in enumerate(node_pods):
                phase = (p.get("status") or {}).get("phase")
                stale = (p["metadata"].get("labels") or {}).get("pod-template-generation") != generation
                if not keep or i > 0 or phase == "Failed" or stale:
                    self.server.delete_internal(
                        "pods", p["metadata"].get("namespace", ""), p["metadata"]["name"]
                    )
                    node_pods[i] = {}
        for node_name in eligible:
            if not any(by_node.get(node_name, [])):
                self.server.create_internal("pods", self._pod_for(ds, node_name, generation))
        # desired counts nodes that should run the pod, including ones that keep an existing pod
        self._update_status(
            ds, {n: v for n, v in verdicts.items() if v[0] or (v[1] and any(by_node.get(n, [])))}
        )

    def _pod_for(self, ds: Obj, node: str, generation: str) -> Obj:
        meta = ds["metadata"]
        template = json.loads(json.dumps(ds["spec"]["template"]))
        pmeta = template.get("metadata") or {}
        labels = dict(pmeta.get("labels") or {})
        labels["controller-revision-hash"] = _template_hash(ds["spec"]["template"])
        labels["pod-template-generation"] = generation
        spec = template.get("spec") or {}
        affinity = spec.setdefault("affinity", {})
        node_aff = affinity.setdefault("nodeAffinity", {})
        node_aff["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}  # fmt: skip
        tolerations = list(spec.get("tolerations") or [])
        for t in DS_TOLERATIONS:
            if not any(x.get("key") == t["key"] and x.get("effect") == t["effect"] for x in tolerations):
                tolerations.append(dict(t))
        spec["tolerations"] = tolerations
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{meta['name']}-",
                "namespace": meta.get("namespace", ""),
                "labels": labels,
                "annotations": dict(pmeta.get("annotations") or {}),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": meta["name"],
                                     "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": spec,
        }  # fmt: skip

    def _update_status(self, ds: Obj, eligible: dict[str, Any]) -> None:
        meta = ds["metadata"]
        generation = str(meta.get("generation", 1))
        pods = [self.store.get(k, ns, n) for k, ns, n in self.store.dependents(meta["uid"]) if k == "pods"]
        pods = [p for p in pods if p is not None]
        scheduled = {_pod_node(p) for p in pods if (p.get("spec") or {}).get("nodeName")}
        ready = [p for p in pods if any(c.get("type") == "Ready" and c.get("status") == "True"
                                        for c in (p.get("status") or {}).get("conditions") or [])]  # fmt: skip
        desired = len(eligible)
        status = {
            "currentNumberScheduled": len([n for n in scheduled if n in eligible]),
            "numberMisscheduled": len([n for n in scheduled if n not in eligible]),
            "desiredNumberScheduled": desired,
            "numberReady": len(ready),
            "observedGeneration": meta.get("generation", 1),
            "updatedNumberScheduled": len([p for p in pods if (p.get("spec") or {}).get("nodeName") and
                                           (p["metadata"].get("labels") or {}).get("pod-template-generation") == generation]),
            "numberAvailable": len(ready),
        }  # fmt: skip
        if desired - len(ready) > 0:
            status["numberUnavailable"] = desired - len(ready)
        if ds.get("status") != status:

            def change(obj: Obj) -> None:
                obj["status"] = status

            self.store.modify("daemonsets.apps", meta.get("namespace", ""), meta["name"], change)


# node lifecycle ------------------------------------------------------------------------------------------------

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"


def _parse_time(ts: str | None) -> float | None:
    if not ts:
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).astimezone(UTC).timestamp()
    except ValueError:
        return None


class NodeLifecycleController(_Loop):
    """Marks nodes Unknown when heartbeats stop and keeps the not-ready/unreachable taints in step with Ready."""

    keys = ("nodes", "leases.coordination.k8s.io")

    def __init__(self, server: ApiServer, grace_period: float, monitor_period: float) -> None:
        super().__init__(server)
        self.grace = grace_period
        self.period = monitor_period
        self._dirty: set[str] = set()
        self._deleted: set[str] = set()
        self._last_check = 0.0

    def observe(self, ev: Event) -> None:
        if ev.key == "nodes" and ev.type == "DELETED":
            self._deleted.add(ev.obj["metadata"]["name"])
        elif ev.key == "nodes":
            self._dirty.add(ev.obj["metadata"]["name"])

    def reconcile(self) -> None:
        deleted, self._deleted = self._deleted, set()
        for name in deleted:  # pod garbage collection: pods bound to a node that no longer exists
            for pod in self.store.pods_on_node(name):
                self.server.delete_internal(
                    "pods", pod["metadata"].get("namespace", ""), pod["metadata"]["name"]
                )
        dirty, self._dirty = self._dirty, set()
        for name in dirty:
            node = self.store.get("nodes", "", name)
            if node is not None:
                self._sync_taints(node)
        if time.monotonic() - self._last_check >= self.period:
            self._last_check = time.monotonic()
            now = time.time()
            for node in self.store.list("nodes")[0]:
                self._check_heartbeat(node, now)

    def _check_heartbeat(self, node: Obj, now: float) -> None:
        name = node["metadata"]["name"]
        conds = (node.get("status") or {}).get("conditions") or []
        ready = next((c for c in conds if c.get("type") == "Ready"), None)
        if ready is not None and ready.get("status") == "Unknown":
            return
        lease = self.store.get("leases.coordination.k8s.io", "kube-node-lease", name)
        beats = [_parse_time(((lease or {}).get("spec") or {}).get("renewTime")),
                 _parse_time((ready or {}).get("lastHeartbeatTime"))]  # fmt: skip
        last = max((b for b in beats if b is not None), default=None)
        never = last is None
        if never:
            last = _parse_time(node["metadata"].get("creationTimestamp")) or now
        if now - last <= self.grace:
            return
        reason, message = (("NodeStatusNeverUpdated", "Kubelet never posted node status.") if never
                           else ("NodeStatusUnknown", "Kubelet stopped posting node status."))  # fmt: skip
        stamp = now_rfc3339()

        def change(obj: Obj) -> None:
            status = obj.setdefault("status", {})
            current = status.get("conditions") or []
            types = [c.get("type") for c in current] or []
            for t in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure"):
                if t not in types:
                    current.append({"type": t})
            for c in current:
                if c.get("type") in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure"):
                    c.update({"status": "Unknown", "reason": reason, "message": message,
                              "lastTransitionTime": stamp})  # fmt: skip
                    c.setdefault("lastHeartbeatTime", (ready or {}).get("lastHeartbeatTime") or stamp)
            status["conditions"] = current
            _set_taints(obj, "Unknown")

        self.store.modify("nodes", "", name, change)
        self._mark_pods_not_ready(name, stamp)

    def _mark_pods_not_ready(self, node: str, stamp: str) -> None:
        """What the real controller does for pods on an unreachable node: Ready=False, so endpoints drop them."""

        def change(pod: Obj) -> bool:
            conds = (pod.get("status") or {}).get("conditions") or []
            ready = next((c for c in conds if c.get("type") == "Ready"), None)
            if ready is None or ready.get("status") == "False":
                return False
            ready.update({"status": "False", "lastTransitionTime": stamp})
            return True

        for pod in self.store.pods_on_node(node):
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                self.store.modify(
                    "pods", pod["metadata"].get("namespace", ""), pod["metadata"]["name"], change
                )

    def _sync_taints(self, node: Obj) -> None:
        conds = (node.get("status") or {}).get("conditions") or []
        ready = next((c.get("status") for c in conds if c.get("type") == "Ready"), None)
        if ready is None:
            return
        probe = json.loads(json.dumps(node))
        if not _set_taints(probe, ready):
            return
        self.store.modify("nodes", "", node["metadata"]["name"], lambda obj: _set_taints(obj, ready))


def _set_taints(node: Obj, ready: str) -> bool:
    """Make the lifecycle taints match the Ready status; True if anything changed."""
    spec = node.setdefault("spec", {})
    taints = list(spec.get("taints") or [])
    wanted_key = {"True": None, "False": NOT_READY, "Unknown": UNREACHABLE}.get(ready)
    kept = [t for t in taints if t.get("key") not in (NOT_READY, UNREACHABLE) or t.get("key") == wanted_key]
    have = {(t.get("key"), t.get("effect")) for t in kept}
    if wanted_key:
        for effect in ("NoSchedule", "NoExecute"):
            if (wanted_key, effect) not in have:
                taint = {"key": wanted_key, "effect": effect}
                if effect == "NoExecute":
                    taint["timeAdded"] = now_rfc3339()
                kept.append(taint)
    if kept == taints:
        return False
    if kept:
        spec["taints"] = kept
    else:
        spec.pop("taints", None)
    return True


# NoExecute taints ---------------------------------------------------------------------------------------------


def _eviction_delay(pod: Obj, taints: list[Obj]) -> float | None:
    """Seconds after the taint was added when the pod must go: 0 if a taint is not tolerated, None if never."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    delay: float | None = None
    for taint in taints:
        matching = [t for t in tolerations if tolerates([t], taint)]
        if not matching:
            return 0.0
        seconds = [t["tolerationSeconds"] for t in matching if t.get("tolerationSeconds") is not None]
        if len(seconds) == len(matching):
            limit = max(0.0, float(min(seconds)))
            delay = limit if delay is None else min(delay, limit)
    return delay


class TaintEvictionController(_Loop):
    """The taint manager: evicts pods from nodes with NoExecute taints they do not tolerate (or after their
    tolerationSeconds, 300 s by default for not-ready/unreachable)."""

    keys = ("nodes",)

    def __init__(self, server: ApiServer, period: float) -> None:
        super().__init__(server)
        self.period = period
        self._tainted: set[str] = set()
        self._events = Recorder(self.store)

    def observe(self, ev: Event) -> None:
        name = ev.obj["metadata"]["name"]
        taints = ((ev.obj.get("spec") or {}).get("taints") or []) if ev.type != "DELETED" else []
        if any(t.get("effect") == "NoExecute" for t in taints):
            self._tainted.add(name)
        else:
            self._tainted.discard(name)

    def reconcile(self) -> None:
        now = time.time()
        for name in list(self._tainted):
            node = self.store.get("nodes", "", name)
            if node is None:
                continue
            taints = [
                t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") == "NoExecute"
            ]
            for pod in self.store.pods_on_node(name):
                if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                delay = _eviction_delay(pod, taints)
                if delay is None:
                    continue
                added = max((_parse_time(t.get("timeAdded")) or now for t in taints), default=now)
                if now >= added + delay:
                    self._evict(pod)

    def _evict(self, pod: Obj) -> None:
        meta = pod["metadata"]
        self._events.event(pod, "Normal", "TaintManagerEviction",
                                   f"Marking for deletion Pod {meta.get('namespace', '')}/{meta['name']}",
                                   "taint-eviction-controller")  # fmt: skip
        self.server.delete_internal("pods", meta.get("namespace", ""), meta["name"])


# namespaces ----------------------------------------------------------------------------------------------------


class NamespaceController(_Loop):
    """What kube-controller-manager does for a new namespace: a `default` ServiceAccount and `kube-root-ca.crt`."""

    keys = ("namespaces",)

    def __init__(self, server: ApiServer) -> None:
        super().__init__(server)
        self._new: list[str] = []

    def observe(self, ev: Event) -> None:
        if ev.type == "ADDED":
            self._new.append(ev.obj["metadata"]["name"])

    def reconcile(self) -> None:
        new, self._new = self._new, []
        for ns in new:
            if self.store.get("namespaces", "", ns) is None:
                continue
            if self.store.get("serviceaccounts", ns, "default") is None:
                self.server.create_internal("serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount",
                                                                "metadata": {"name": "default", "namespace": ns}},
                                            missing_ok=True)  # fmt: skip
            if self.store.get("configmaps", ns, "kube-root-ca.crt") is None:
                self.server.create_internal("configmaps", {
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "kube-root-ca.crt", "namespace": ns,
                                 "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used "
                                                 "to verify the kube-apiserver when using internal endpoints such "
                                                 "as the internal service IP or kubernetes.default.svc. No other "
                                                 "usage is guaranteed across distributions of Kubernetes "
                                                 "clusters."}},
                    "data": {"ca.crt": self.server.ca_pem()},
                }, missing_ok=True)  # fmt: skip


__all__ = [
    "DaemonSetController",
    "NamespaceController",
    "NodeLifecycleController",
    "match_label_selector_object",
]
