"""The default scheduler's filtering, scoring and binding, with its real failure messages.

Filters run in the real default profile's order and a node fails at its first failing filter: NodeUnschedulable,
TaintToleration, NodeAffinity (nodeSelector + required affinity), NodeResourcesFit (allocatable, extended
resources included, minus requests of pods already bound). Like the real scheduler it stops looking once it has
enough feasible nodes (percentageOfNodesToScore) and rotates where it starts, so scheduling N pods on M nodes
costs O(N * min(M, ~0.4M)), not O(N * M) per pod with re-listing.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .events import Recorder
from .quantity import milli_value
from .selectors import match_node_selector_terms
from .store import Event, Store, now_rfc3339

if TYPE_CHECKING:
    from .server import ApiServer

Obj = dict[str, Any]
log = logging.getLogger(__name__)
COMPONENT = "default-scheduler"

UNSCHEDULABLE = "node(s) were unschedulable"
AFFINITY = "node(s) didn't match Pod's node affinity/selector"
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"


@dataclass
class NodeInfo:
    name: str
    rv: str
    labels: dict[str, str]
    taints: list[Obj]
    unschedulable: bool
    allocatable: dict[str, int]
    node: Obj


def pod_requests(spec: Obj) -> dict[str, int]:
    """Effective requests: max(sum of containers, any init container) plus overhead, like the real scheduler."""
    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
            total[k] = total.get(k, 0) + milli_value(v)
    for c in spec.get("initContainers") or []:
        for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
            total[k] = max(total.get(k, 0), milli_value(v))
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, 0) + milli_value(v)
    return total


def tolerates(tolerations: list[Obj], taint: Obj) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        op = t.get("operator", "Equal")
        if not t.get("key"):
            if op == "Exists":
                return True
            continue
        if t["key"] != taint.get("key"):
            continue
        if op == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def num_feasible_to_find(n: int) -> int:
    if n < 100:
        return n
    pct = max(5, 50 - n // 125)
    return max(100, n * pct // 100)


class Scheduler:
    def __init__(self, server: ApiServer) -> None:
        self._store: Store = server.store
        self._events = Recorder(self._store)
        self._queue: queue.SimpleQueue[Event | None] = queue.SimpleQueue()
        self._pending: dict[tuple[str, str], Obj] = {}
        self._unschedulable: dict[tuple[str, str], Obj] = {}
        self._nodes: dict[str, NodeInfo] = {}
        self._used: dict[str, tuple[dict[str, int], int]] = {}
        self._start = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sim-scheduler", daemon=True)

    def start(self) -> None:
        with self._store.lock:
            pods, _ = self._store.list("pods")
            nodes, _ = self._store.list("nodes")
            self._store.watch("pods", into=self._queue)
            self._store.watch("nodes", into=self._queue)
        for n in nodes:
            self._queue.put(Event("ADDED", "nodes", n, None, 0))
        for p in pods:
            self._queue.put(Event("ADDED", "pods", p, None, 0))
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                ev = self._queue.get(timeout=1.0 if not self._pending else 0.0)
            except queue.Empty:
                ev = None
            try:
                if ev is not None:
                    self._handle(ev)
                    while True:  # drain what is already queued before deciding, so decisions see fresh state
                        try:
                            more = self._queue.get_nowait()
                        except queue.Empty:
                            break
                        if more is None:
                            return
                        self._handle(more)
                elif self._stop.is_set():
                    return
                if self._pending:
                    key = max(self._pending, key=lambda k: self._pending[k].get("spec", {}).get("priority", 0)) \
                        if len(self._pending) < 64 else next(iter(self._pending))  # fmt: skip
                    pod = self._pending.pop(key)
                    self._schedule(pod)
            except Exception:
                log.exception("scheduler loop error")

    def _handle(self, ev: Event) -> None:
        if ev.key == "nodes":
            name = ev.obj["metadata"]["name"]
            old = self._nodes.get(name)
            if ev.type == "DELETED":
                self._nodes.pop(name, None)
            else:
                info = self._nodes[name] = _node_info(ev.obj)
                if old is not None and _same_for_scheduling(old, info):
                    return
            self._retry_unschedulable()
            return
        pod = ev.obj
        meta = pod["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        old_node = ((ev.old or {}).get("spec") or {}).get("nodeName")
        for n in {node, old_node} - {None, ""}:
            self._used.pop(n, None)  # type: ignore[arg-type]
        if ev.type == "DELETED" or node or meta.get("deletionTimestamp"):
            self._pending.pop(key, None)
            self._unschedulable.pop(key, None)
            finished = ev.type == "DELETED" or (pod.get("status") or {}).get("phase") in (
                "Succeeded",
                "Failed",
            )
            if finished and node:
                self._retry_unschedulable()
            return
        if spec.get("schedulerName", "default-scheduler") != "default-scheduler":
            return
        if key in self._unschedulable and ev.type == "MODIFIED":
            self._unschedulable[key] = pod
            return
        self._pending[key] = pod

    def _retry_unschedulable(self) -> None:
        if self._unschedulable:
            self._pending.update(self._unschedulable)
            self._unschedulable.clear()

    def _used_on(self, node: str) -> tuple[dict[str, int], int]:
        cached = self._used.get(node)
        if cached is not None:
            return cached
        used: dict[str, int] = {}
        count = 0
        for p in self._store.pods_on_node(node):
            if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            count += 1
            for k, v in pod_requests(p.get("spec") or {}).items():
                used[k] = used.get(k, 0) + v
        self._used[node] = (used, count)
        return used, count

    # filtering -------------------------------------------------------------------------------------------------

    def _filter(self, pod: Obj, info: NodeInfo, requests: dict[str, int]) -> tuple[list[str], bool]:
        """([] if the node fits, else reasons), and whether preemption could help on this node."""
        spec = pod.get("spec") or {}
        tolerations = spec.get("tolerations") or []
        if info.unschedulable and not tolerates(
            tolerations, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
        ):
            return [UNSCHEDULABLE], False
        for taint in info.taints:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
                return [
                    f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
                ], False
        selector = spec.get("nodeSelector") or {}
        if any(info.labels.get(k) != v for k, v in selector.items()):
            return [AFFINITY], False
        required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        if required and not match_node_selector_terms(required.get("nodeSelectorTerms") or [], info.node):
            return [AFFINITY], False
        used, count = self._used_on(info.name)
        reasons = []
        if "pods" in info.allocatable and count + 1 > info.allocatable["pods"]:
            reasons.append("Too many pods")
        for res, want in requests.items():
            if want > info.allocatable.get(res, 0) - used.get(res, 0):
                reasons.append(f"Insufficient {res}")
        return reasons, True

    def _score(self, info: NodeInfo, requests: dict[str, int]) -> float:
        used, _ = self._used_on(info.name)
        scores = []
        for res in ("cpu", "memory"):
            alloc = info.allocatable.get(res, 0)
            if alloc <= 0:
                continue
            free = alloc - used.get(res, 0) - requests.get(res, 0)
            scores.append(free / alloc)
        return sum(scores) / len(scores) if scores else 0.0

    def _schedule(self, pod: Obj) -> None:
        meta = pod["metadata"]
        live = self._store.get("pods", meta.get("namespace", ""), meta["name"])
        if live is None or (live.get("spec") or {}).get("nodeName"):
            return
        pod = live
        # sorted and positive only, so each node's check is a straight loop and reasons come out in a stable order
        requests = {k: v for k, v in sorted(pod_requests(pod.get("spec") or {}).items()) if v > 0}
        names = list(self._nodes)
        n = len(names)
        want = num_feasible_to_find(n)
        feasible: list[NodeInfo] = []
        reasons: Counter[str] = Counter()
        preempt: Counter[str] = Counter()
        start = self._start % n if n else 0
        processed = 0
        for i in range(n):
            info = self._nodes[names[(start + i) % n]]
            processed += 1
            why, helpful = self._filter(pod, info, requests)
            if not why:
                feasible.append(info)
                if len(feasible) >= want:
                    break
            else:
                reasons.update(why)
                preempt[NO_VICTIMS if helpful else NOT_HELPFUL] += 1
        self._start = start + processed
        key = (meta.get("namespace", ""), meta["name"])
        if not feasible:
            self._unschedulable[key] = pod
            if n == 0:
                message = "no nodes available to schedule pods"
            else:
                hist = ", ".join(sorted(f"{c} {r}" for r, c in reasons.items()))
                pre = ", ".join(sorted(f"{c} {r}" for r, c in preempt.items()))
                message = f"0/{n} nodes are available: {hist}. preemption: 0/{n} nodes are available: {pre}."
            self._mark_unschedulable(pod, message)
            return
        scored = [(self._score(i, requests), i) for i in feasible]
        best = max(s for s, _ in scored)
        choice = random.choice([i for s, i in scored if s == best])
        self._bind(pod, choice.name)

    def _mark_unschedulable(self, pod: Obj, message: str) -> None:
        meta = pod["metadata"]
        now = now_rfc3339()

        def change(obj: Obj) -> bool:
            status = obj.setdefault("status", {})
            conds = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            old = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
            if old is not None and old.get("message") == message:
                return False
            conds.append({"type": "PodScheduled", "status": "False", "lastProbeTime": None,
                          "lastTransitionTime": now, "reason": "Unschedulable", "message": message})  # fmt: skip
            status["conditions"] = conds
            return True

        updated = self._store.modify("pods", meta.get("namespace", ""), meta["name"], change)
        if updated is not None:
            self._events.event(updated, "Warning", "FailedScheduling", message, COMPONENT)

    def _bind(self, pod: Obj, node: str) -> None:
        meta = pod["metadata"]
        bound = bind_pod(self._store, meta.get("namespace", ""), meta["name"], node)
        self._used.pop(node, None)
        if bound is not None:
            self._events.event(bound, "Normal", "Scheduled",
                               f"Successfully assigned {meta.get('namespace', '')}/{meta['name']} to {node}", COMPONENT)  # fmt: skip


def bind_pod(store: Store, namespace: str, name: str, node: str) -> Obj | None:
    """Set spec.nodeName and PodScheduled=True (what a Binding does); None if the pod is gone or already bound."""
    now = now_rfc3339()

    def change(obj: Obj) -> bool:
        if (obj.get("spec") or {}).get("nodeName"):
            return False
        obj.setdefault("spec", {})["nodeName"] = node
        status = obj.setdefault("status", {})
        conds = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conds.append(
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
        )
        status["conditions"] = conds
        return True

    before = store.get("pods", namespace, name)
    if before is None or (before.get("spec") or {}).get("nodeName"):
        return None
    return store.modify("pods", namespace, name, change)


def _node_info(node: Obj) -> NodeInfo:
    meta = node["metadata"]
    status = node.get("status") or {}
    alloc_src = status.get("allocatable") or status.get("capacity") or {}
    alloc = {}
    for k, v in alloc_src.items():
        try:
            alloc[k] = milli_value(v)
        except ValueError:
            continue
    spec = node.get("spec") or {}
    return NodeInfo(meta["name"], meta.get("resourceVersion", ""), dict(meta.get("labels") or {}),
                    list(spec.get("taints") or []), bool(spec.get("unschedulable")), alloc, node)  # fmt: skip


def _same_for_scheduling(a: NodeInfo, b: NodeInfo) -> bool:
    return (a.labels, a.taints, a.unschedulable, a.allocatable) == (
        b.labels,
        b.taints,
        b.unschedulable,
        b.allocatable,
    )
