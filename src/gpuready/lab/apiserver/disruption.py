"""policy/v1 PodDisruptionBudget: the disruption controller's status and the eviction handler that honours it.

A drain is only as safe as these two agree: the controller publishes how many disruptions a budget allows
(expectedPods, currentHealthy, desiredHealthy, disruptionsAllowed, the DisruptionAllowed condition) and the
eviction subresource spends one per eviction by writing the budget's status (disruptionsAllowed - 1 and the pod in
disruptedPods) before it deletes the pod, so a second eviction right after sees the smaller budget even though the
controller has not run yet. Both sides take the store lock for their read-decide-write, which stands in for the
real ones' optimistic-concurrency retries. Messages, codes and the status arithmetic are the real ones'
(kube-controller-manager's disruption controller, kube-apiserver's pods/eviction REST handler).
"""

from __future__ import annotations

import math
import re
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from . import errors, tables
from .controllers import _Loop, _parse_time
from .events import Recorder
from .replicaset import controller_ref, pod_ready_since
from .selectors import match_label_selector_object
from .store import Event, now_rfc3339

if TYPE_CHECKING:
    from .server import ApiServer

Obj = dict[str, Any]
KEY = "poddisruptionbudgets.policy"
COMPONENT = "controllermanager"
DELETION_TIMEOUT = 120.0  # seconds an approved eviction stays in disruptedPods before the pod counts again
MAX_DISRUPTED_PODS = 2000
TOO_MANY = "Cannot evict pod as it would violate the pod's disruption budget."
MULTIPLE = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
_PERCENT = re.compile(r"^[0-9]+%$")


def pdb_selects(pdb: Obj, labels: dict[str, str]) -> bool:
    """A nil selector selects nothing; an empty one everything in the namespace (policy/v1)."""
    selector = (pdb.get("spec") or {}).get("selector")
    if selector is None:
        return False
    return match_label_selector_object(selector, labels)


def scaled_value(value: int | str, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent with rounding up, as the disruption controller calls it."""
    if isinstance(value, int):
        return value
    if not _PERCENT.match(value):
        raise ValueError(f"invalid value for IntOrString: invalid type: string is not a percentage: {value}")
    return math.ceil(int(value[:-1]) * total / 100)


def _stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _set_allowed_condition(status: Obj, reason: str | None = None, message: str = "") -> None:
    """pdbhelper.UpdateDisruptionAllowedCondition (or the SyncFailed condition of failSafe when `reason`)."""
    allowed = int(status.get("disruptionsAllowed", 0)) > 0 and reason is None
    reason = reason or ("SufficientPods" if allowed else "InsufficientPods")
    value = "True" if allowed else "False"
    conditions = list(status.get("conditions") or [])
    old = next((c for c in conditions if c.get("type") == "DisruptionAllowed"), None)
    stamp = old.get("lastTransitionTime") if old is not None and old.get("status") == value else now_rfc3339()
    cond: Obj = {"type": "DisruptionAllowed", "status": value}
    if status.get("observedGeneration"):
        cond["observedGeneration"] = status["observedGeneration"]
    cond.update({"lastTransitionTime": stamp, "reason": reason, "message": message})
    status["conditions"] = (
        [cond if c is old else c for c in conditions] if old is not None else [*conditions, cond]
    )


def _conditions_up_to_date(pdb: Obj) -> bool:
    status = pdb.get("status") or {}
    cond = next((c for c in status.get("conditions") or [] if c.get("type") == "DisruptionAllowed"), None)
    if cond is None or status.get("observedGeneration") != pdb["metadata"].get("generation", 1):
        return False
    if int(status.get("disruptionsAllowed", 0)) > 0:
        return (cond.get("status"), cond.get("reason")) == ("True", "SufficientPods")
    return (cond.get("status"), cond.get("reason")) == ("False", "InsufficientPods")


class DisruptionController(_Loop):
    """Keeps every PodDisruptionBudget's status current as pods come, go and change readiness."""

    keys = (KEY, "pods", "replicasets.apps")

    def __init__(self, server: ApiServer) -> None:
        super().__init__(server)
        self._dirty: set[tuple[str, str]] = set()
        self._namespaces: set[str] = set()
        self._recheck: dict[tuple[str, str], float] = {}
        self._events = Recorder(self.store)

    def observe(self, ev: Event) -> None:
        meta = ev.obj["metadata"]
        ns = meta.get("namespace", "")
        if ev.key == KEY:
            if ev.type != "DELETED":
                self._dirty.add((ns, meta["name"]))
        elif ev.key == "replicasets.apps":
            self._namespaces.add(ns)  # a scale change moves expectedPods of percentage/maxUnavailable budgets
        else:
            label_sets = [(o["metadata"].get("labels") or {}) for o in (ev.obj, ev.old) if o is not None]
            for pdb in self.store.list(KEY, ns)[0]:
                if any(pdb_selects(pdb, labels) for labels in label_sets):
                    self._dirty.add((ns, pdb["metadata"]["name"]))

    def reconcile(self) -> None:
        for ns in self._namespaces:
            self._dirty.update((ns, p["metadata"]["name"]) for p in self.store.list(KEY, ns)[0])
        self._namespaces = set()
        now = time.time()
        for key, when in list(self._recheck.items()):
            if when <= now:
                del self._recheck[key]
                self._dirty.add(key)
        dirty, self._dirty = self._dirty, set()
        for ns, name in sorted(dirty):
            with self.store.lock:  # the eviction handler's check-and-decrement cannot interleave with a sync
                pdb = self.store.get(KEY, ns, name)
                if pdb is not None:
                    self._sync(pdb, now)

    def _sync(self, pdb: Obj, now: float) -> None:
        meta = pdb["metadata"]
        ns = meta.get("namespace", "")
        pods = [
            p for p in self.store.list("pods", ns)[0] if pdb_selects(pdb, p["metadata"].get("labels") or {})
        ]
        if not pods:
            self._events.event(pdb, "Normal", "NoPods", "No matching pods found", COMPONENT)
        try:
            expected, desired, unmanaged = self._expected_count(pdb, pods)
        except ValueError as exc:
            self._events.event(pdb, "Warning", "CalculateExpectedPodCountFailed",
                               f"Failed to calculate the number of expected pods: {exc}", COMPONENT)  # fmt: skip
            self._fail_safe(pdb, str(exc))
            return
        if unmanaged:
            self._events.event(pdb, "Warning", "UnmanagedPods", "Pods selected by this PodDisruptionBudget "
                               f"(selector: {_go_selector(pdb['spec'].get('selector'))}) were found to be "
                               "unmanaged. As a result, the status of the PDB cannot be calculated correctly, "
                               "which may result in undefined behavior. To account for these pods please set "
                               '".spec.minAvailable" field of the PDB to an integer value.', COMPONENT)  # fmt: skip
        disrupted = self._disrupted_pods(pdb, pods, now)
        healthy = 0
        for pod in pods:
            if pod["metadata"].get("deletionTimestamp") or pod["metadata"]["name"] in disrupted:
                continue
            if pod_ready_since(pod) is not None:
                healthy += 1
        allowed = healthy - desired
        if expected <= 0 or allowed <= 0:
            allowed = 0
        status = pdb.get("status") or {}
        generation = meta.get("generation", 1)
        same = (status.get("currentHealthy"), status.get("desiredHealthy"), status.get("expectedPods"),
                status.get("disruptionsAllowed"), status.get("disruptedPods") or {},
                status.get("observedGeneration")) == (healthy, desired, expected, allowed, disrupted, generation)  # fmt: skip
        if same and _conditions_up_to_date(pdb):
            return
        new: Obj = {"observedGeneration": generation}  # the real API's field order
        if disrupted:
            new["disruptedPods"] = disrupted
        new.update({"disruptionsAllowed": allowed, "currentHealthy": healthy, "desiredHealthy": desired,
                    "expectedPods": expected})  # fmt: skip
        if status.get("conditions"):
            new["conditions"] = status["conditions"]
        _set_allowed_condition(new)
        self._write_status(pdb, new)

    def _expected_count(self, pdb: Obj, pods: list[Obj]) -> tuple[int, int, list[str]]:
        """(expectedPods, desiredHealthy, unmanaged pod names), like getExpectedPodCount."""
        spec = pdb.get("spec") or {}
        max_unavailable, min_available = spec.get("maxUnavailable"), spec.get("minAvailable")
        if max_unavailable is not None:
            expected, unmanaged = self._expected_scale(pods)
            return expected, max(0, expected - scaled_value(max_unavailable, expected)), unmanaged
        if isinstance(min_available, int):
            return len(pods), min_available, []
        if min_available is not None:
            expected, unmanaged = self._expected_scale(pods)
            return expected, scaled_value(min_available, expected), unmanaged
        return 0, 0, []

    def _expected_scale(self, pods: list[Obj]) -> tuple[int, list[str]]:
        """Sum of the scale of the pods' controllers; pods without a controller are reported, not counted.

        Only ReplicaSets are known here (the real controller also knows ReplicationControllers, Deployments,
        StatefulSets and anything with a scale subresource); a pod owned by anything else, a DaemonSet
        included, fails the sync exactly as a DaemonSet-owned pod does on a real cluster.
        """
        scales: dict[str, int] = {}
        unmanaged: list[str] = []
        for pod in pods:
            ref = controller_ref(pod)
            if ref is None:
                unmanaged.append(pod["metadata"]["name"])
                continue
            if ref.get("uid") in scales:
                continue
            owner = None
            if ref.get("kind") == "ReplicaSet" and ref.get("apiVersion", "").startswith("apps/"):
                owner = self.store.get(
                    "replicasets.apps", pod["metadata"].get("namespace", ""), ref.get("name", "")
                )
            if owner is None or owner["metadata"].get("uid") != ref.get("uid"):
                raise ValueError(f'found no controllers for pod "{pod["metadata"]["name"]}"')
            scales[ref["uid"]] = int((owner.get("spec") or {}).get("replicas", 1))
        return sum(scales.values()), unmanaged

    def _disrupted_pods(self, pdb: Obj, pods: list[Obj], now: float) -> dict[str, str]:
        """buildDisruptedPodMap: entries for pods still there and not yet being deleted, until the timeout."""
        known = (pdb.get("status") or {}).get("disruptedPods") or {}
        kept: dict[str, str] = {}
        key = (pdb["metadata"].get("namespace", ""), pdb["metadata"]["name"])
        for pod in pods:
            name = pod["metadata"]["name"]
            if pod["metadata"].get("deletionTimestamp") or name not in known:
                continue
            expires = (_parse_time(known[name]) or now) + DELETION_TIMEOUT
            if expires < now:
                self._events.event(pod, "Warning", "NotDeleted", f"Pod was expected by PDB {key[0]}/{key[1]} to "
                                   "be deleted but it wasn't", COMPONENT)  # fmt: skip
                continue
            kept[name] = known[name]
            self._recheck[key] = min(self._recheck.get(key, float("inf")), expires)
        return kept

    def _fail_safe(self, pdb: Obj, message: str) -> None:
        """failSafe: when the status cannot be computed, at least allow no disruptions."""
        status = dict(pdb.get("status") or {})
        status["disruptionsAllowed"] = 0
        _set_allowed_condition(status, "SyncFailed", message)
        self._write_status(pdb, status)

    def _write_status(self, pdb: Obj, status: Obj) -> None:
        if pdb.get("status") == status:
            return
        updated = dict(pdb)
        updated["metadata"] = dict(pdb["metadata"])
        updated["status"] = status
        self.store.update(KEY, updated, expected_rv=pdb["metadata"].get("resourceVersion"))


def _go_selector(selector: Obj | None) -> str:
    """%v of a *metav1.LabelSelector, as the UnmanagedPods event prints it."""
    if selector is None:
        return "nil"
    labels = " ".join(f"{k}:{v}" for k, v in sorted((selector.get("matchLabels") or {}).items()))
    exprs = " ".join(
        f"{{{e.get('key', '')} {e.get('operator', '')} [{' '.join(e.get('values') or [])}]}}"
        for e in selector.get("matchExpressions") or []
    )
    return f"&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{exprs}}},}}"


# eviction ------------------------------------------------------------------------------------------------------


def _status(code: int, message: str = "", reason: str = "", details: Obj | None = None) -> Obj:
    body: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                 "status": "Success" if code < 300 else "Failure"}  # fmt: skip
    if message:
        body["message"] = message
    if reason:
        body["reason"] = reason
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def _too_many_requests(cause: str, retry_after: int = 0) -> tuple[int, Obj, dict[str, str]]:
    details: Obj = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    headers: dict[str, str] = {}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
        headers["Retry-After"] = str(retry_after)
    return 429, _status(429, TOO_MANY, "TooManyRequests", details), headers


def _can_ignore_budget(pod: Obj) -> bool:
    """canIgnorePDB: terminal, pending and already-deleting pods cause no new disruption."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed", "Pending", None) or bool(pod["metadata"].get("deletionTimestamp"))


def evict(
    server: ApiServer, namespace: str, name: str, eviction: Obj, dry_run: bool
) -> tuple[int, Obj, dict[str, str]]:
    """POST pods/NAME/eviction: (HTTP code, Status body, extra headers), like EvictionREST.Create.

    The pod is deleted through the normal delete path (ownerReferences, DELETED watch events) after a
    DisruptionTarget condition is added, as the real handler does.
    """
    if (eviction.get("metadata") or {}).get("name") != name:
        raise errors.bad_request("name in URL does not match name in Eviction object")
    options = eviction.get("deleteOptions") or {}
    dry_run = dry_run or "All" in (options.get("dryRun") or [])
    store = server.store
    with store.lock:
        pod = store.get("pods", namespace, name)
        if pod is None:
            raise errors.not_found("", "pods", name)
        if not _can_ignore_budget(pod):
            pdbs = [
                p
                for p in store.list(KEY, namespace)[0]
                if pdb_selects(p, pod["metadata"].get("labels") or {})
            ]
            if len(pdbs) > 1:
                return 500, _status(500, MULTIPLE), {}
            if pdbs:
                refused = _check_and_decrement(server, pdbs[0], pod, dry_run)
                if refused is not None:
                    return refused
        if not dry_run:
            _delete_with_condition(server, pod, options)
    return 201, _status(201), {}


def _check_and_decrement(
    server: ApiServer, pdb: Obj, pod: Obj, dry_run: bool
) -> tuple[int, Obj, dict[str, str]] | None:
    """None when the eviction may go ahead (the budget's status already charged), else the refusal."""
    status = pdb.get("status") or {}
    pdb_name = pdb["metadata"]["name"]
    healthy, desired = int(status.get("currentHealthy", 0)), int(status.get("desiredHealthy", 0))
    unhealthy_policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy")
    if pod_ready_since(pod) is None and (
        unhealthy_policy == "AlwaysAllow" or (healthy >= desired and desired > 0)
    ):
        return None  # an unready pod is not part of the healthy count: deleting it costs no disruption
    if int(status.get("observedGeneration", 0)) < int(pdb["metadata"].get("generation", 1)):
        return _too_many_requests(
            f"The disruption budget {pdb_name} is still being processed by the server.", 10
        )
    allowed = int(status.get("disruptionsAllowed", 0))
    if allowed < 0:
        raise _forbidden(pdb_name, "pdb disruptions allowed is negative")
    if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
        raise _forbidden(
            pdb_name, "DisruptedPods map too big - too many evictions not confirmed by PDB controller"
        )
    if allowed == 0:
        return _too_many_requests(f"The disruption budget {pdb_name} needs {desired} healthy pods and has "
                                  f"{healthy} currently")  # fmt: skip
    if dry_run:
        return None
    new = dict(status)
    new["disruptionsAllowed"] = allowed - 1
    if new["disruptionsAllowed"] == 0:
        _set_allowed_condition(new)
    new["disruptedPods"] = {
        **(status.get("disruptedPods") or {}),
        pod["metadata"]["name"]: _stamp(time.time()),
    }
    updated = dict(pdb)
    updated["metadata"] = dict(pdb["metadata"])
    updated["status"] = new
    server.store.update(KEY, updated, expected_rv=pdb["metadata"].get("resourceVersion"))
    return None


def _forbidden(name: str, why: str) -> errors.ApiError:
    return errors.ApiError(403, "Forbidden", f'poddisruptionbudget.policy "{name}" is forbidden: {why}',
                           {"name": name, "group": "policy", "kind": "poddisruptionbudget"})  # fmt: skip


def _delete_with_condition(server: ApiServer, pod: Obj, options: Obj) -> None:
    meta = pod["metadata"]
    ns, name = meta.get("namespace", ""), meta["name"]
    if meta.get("deletionTimestamp"):
        server.api.delete(server.resource("pods"), ns, name, options)
        return
    pre = dict(options.get("preconditions") or {})
    for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
        if pre.get(field) and pre[field] != meta.get(field):
            what = "deleted and then recreated" if field == "uid" else "modified"
            raise errors.conflict("", "Pod", name, f"the {label} in the precondition ({pre[field]}) does not match "
                                  f"the {label} in record ({meta.get(field)}). The object might have been {what}")  # fmt: skip

    def mark(p: Obj) -> None:
        status = p.setdefault("status", {})
        conds = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionTarget"]
        conds.append({"type": "DisruptionTarget", "status": "True", "lastProbeTime": None,
                      "lastTransitionTime": now_rfc3339(), "reason": "EvictionByEvictionAPI",
                      "message": "Eviction API: evicting"})  # fmt: skip
        status["conditions"] = conds

    marked = server.store.modify("pods", ns, name, mark) or pod
    if pre.get("resourceVersion"):
        # our own condition write moved the resourceVersion the client named; carry it forward as the handler does
        options = {
            **options,
            "preconditions": {**pre, "resourceVersion": marked["metadata"]["resourceVersion"]},
        }
    server.api.delete(server.resource("pods"), ns, name, options)


def _row(pdb: Obj) -> list[Any]:
    spec = pdb.get("spec") or {}
    return [pdb["metadata"]["name"], str(spec.get("minAvailable", "N/A")), str(spec.get("maxUnavailable", "N/A")),
            int((pdb.get("status") or {}).get("disruptionsAllowed", 0)), tables.age(pdb)]  # fmt: skip


# `kubectl get pdb` columns (the real PodDisruptionBudget printer); tables.py has no entry of its own for it.
tables.PRINTERS[KEY] = (
    [("Name", "string", 0, "name"), ("Min Available", "string", 0, ""), ("Max Unavailable", "string", 0, ""),
     ("Allowed Disruptions", "integer", 0, ""), ("Age", "string", 0, "")],
    _row,
)  # fmt: skip

__all__ = ["DisruptionController", "evict", "pdb_selects", "scaled_value"]
