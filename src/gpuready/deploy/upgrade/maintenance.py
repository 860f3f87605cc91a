"""Taking a node out of service and back, the way ``kubectl cordon/drain/uncordon`` do, with the official client.

Why not shell out to ``kubectl drain``: it can select pods only by label, and what must leave a GPU node before its
driver changes is "every pod that holds a GPU", whatever its labels (the GPU Operator's upgrade drains the same
way). The rules are kubectl's otherwise: DaemonSet and mirror pods stay, evictions go through the Eviction API so
PodDisruptionBudgets are honoured (a 429 is retried until the timeout), and a pod no controller would recreate is
not evicted unless ``force`` says its loss is accepted.

Every function takes a :class:`gpuready.kube.Cluster` and one node name; API calls grow with the pods on that node.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from gpuready.kube import Cluster
from gpuready.nvidia.mig import RESOURCE_PREFIX as MIG_RESOURCE_PREFIX
from gpuready.spec import GPU_RESOURCE

STATE_ANNOTATION = "gpuready.io/upgrade-state"
FAILURE_ANNOTATION = "gpuready.io/upgrade-failure"
# whole GPUs (and their shared replicas, nvidia.com/gpu.shared) and MIG devices (nvidia.com/mig-1g.10gb, ...)
GPU_RESOURCE_PREFIXES = (GPU_RESOURCE, MIG_RESOURCE_PREFIX)
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
EVICTION_RETRY_SECONDS = 5.0  # kubectl drain waits 5 s between evictions refused by a disruption budget
POLL_SECONDS = 1.0


class MaintenanceError(RuntimeError):
    """A node could not be emptied or did not come back; the message names the pods or the condition."""


@dataclass(frozen=True)
class NodeView:
    """What the upgrade decides on for one node, from one read of the Node object."""

    name: str
    exists: bool
    unschedulable: bool = False
    ready: bool = False
    boot_id: str = ""
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def upgrade_state(self) -> str | None:
        return self.annotations.get(STATE_ANNOTATION)

    @property
    def available(self) -> bool:
        return self.exists and self.ready and not self.unschedulable


def _meta(obj: client.V1Node | client.V1Pod) -> client.V1ObjectMeta:
    """The object's metadata: the API server always sends it (the client's models only make it optional)."""
    assert obj.metadata is not None, "an API object without metadata"
    return obj.metadata


def _key(pod: client.V1Pod) -> tuple[str, str]:
    """(namespace, name) of a pod."""
    meta = _meta(pod)
    return meta.namespace or "", meta.name or ""


def node_view(node: client.V1Node | None, name: str) -> NodeView:
    if node is None:
        return NodeView(name, exists=False)
    conditions = (node.status and node.status.conditions) or []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    info = node.status.node_info if node.status else None
    return NodeView(
        name=name,
        exists=True,
        unschedulable=bool(node.spec and node.spec.unschedulable),
        ready=ready,
        boot_id=(info.boot_id if info else "") or "",
        annotations=dict(_meta(node).annotations or {}),
    )


def read_nodes(cluster: Cluster) -> dict[str, NodeView]:
    """Every node in one list call (the upgrade plan reads the fleet once, not once per node)."""
    views = (node_view(n, _meta(n).name or "") for n in cluster.core.list_node().items)
    return {view.name: view for view in views}


def read_node(cluster: Cluster, name: str) -> NodeView:
    try:
        return node_view(cluster.core.read_node(name), name)
    except ApiException as exc:
        if exc.status == 404:
            return NodeView(name, exists=False)
        raise


def set_state(
    cluster: Cluster, name: str, state: str | None, failure: str | None = None, **spec: Any
) -> None:
    """Record the upgrade step a node reached (and why it failed), with any spec change, in one patch."""
    body: dict[str, Any] = {
        "metadata": {"annotations": {STATE_ANNOTATION: state, FAILURE_ANNOTATION: failure}},
    }
    if spec:
        body["spec"] = spec
    cluster.core.patch_node(name, body)


def cordon(cluster: Cluster, name: str, state: str) -> None:
    set_state(cluster, name, state, unschedulable=True)


def uncordon(cluster: Cluster, name: str, state: str) -> None:
    set_state(cluster, name, state, unschedulable=None)


# --- drain --------------------------------------------------------------------------------------------------------


def requests_gpu(pod: client.V1Pod) -> bool:
    """The pod asks for GPUs: device-plugin resources (whole GPUs, replicas, MIG devices) or, on a
    ``gpu_allocation = "dra"`` node, ResourceClaims (the DRA driver's devices)."""
    if pod.spec is None:
        return False
    if pod.spec.resource_claims:
        return True
    containers = list(pod.spec.containers or []) + list(pod.spec.init_containers or [])
    for c in containers:
        res = c.resources
        for amounts in (res.limits, res.requests) if res else ():
            if any(k.startswith(GPU_RESOURCE_PREFIXES) for k in amounts or {}):
                return True
    return False


def _owner_kinds(pod: client.V1Pod) -> list[str]:
    return [o.kind for o in _meta(pod).owner_references or [] if o.controller]


def pods_to_evict(
    pods: list[client.V1Pod], gpu_only: bool, force: bool
) -> tuple[list[client.V1Pod], list[str]]:
    """The pods a drain evicts, and the reasons it refuses to start (kubectl's rules, GPU pods optionally)."""
    evict, refused = [], []
    for pod in pods:
        meta = _meta(pod)
        if "DaemonSet" in _owner_kinds(pod) or MIRROR_ANNOTATION in (meta.annotations or {}):
            continue  # they belong to the node: the DaemonSet controller would put them straight back
        if pod.status and pod.status.phase in ("Succeeded", "Failed"):
            continue  # finished: nothing runs on the GPU
        if gpu_only and not requests_gpu(pod):
            continue
        if not _owner_kinds(pod) and not force:
            refused.append(f"{meta.namespace}/{meta.name}")
            continue
        evict.append(pod)
    return evict, refused


def _pods_on(cluster: Cluster, node: str) -> list[client.V1Pod]:
    return cluster.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items


def _evict(cluster: Cluster, pod: client.V1Pod) -> str | None:
    """Ask for one eviction; returns why it was refused for now (a disruption budget), None once accepted."""
    namespace, name = _key(pod)
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
    try:
        cluster.core.create_namespaced_pod_eviction(name, namespace, body)
    except ApiException as exc:
        if exc.status == 404:
            return None  # already gone
        if exc.status == 429:
            return _status_message(exc)
        raise MaintenanceError(f"eviction of {namespace}/{name} failed: {_status_message(exc)}") from exc
    return None


def _status_message(exc: ApiException) -> str:
    try:
        status = json.loads(exc.body or "{}")
    except ValueError:
        return f"{exc.status} {exc.reason}"
    causes = [c.get("message", "") for c in (status.get("details") or {}).get("causes") or []]
    return " ".join([status.get("message") or f"{exc.status} {exc.reason}", *causes]).strip()


def drain(
    cluster: Cluster,
    node: str,
    gpu_only: bool = True,
    force: bool = False,
    timeout: float = 600.0,
    progress: Callable[[str], None] = lambda _msg: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Evict the pods that must leave ``node`` and wait until they are gone; returns their names.

    Raises :class:`MaintenanceError` before evicting anything if unmanaged pods would be lost (``force`` accepts that),
    and when ``timeout`` passes with pods left (each with the last refusal, e.g. its disruption budget).
    """
    pods, refused = pods_to_evict(_pods_on(cluster, node), gpu_only, force)
    if refused:
        raise MaintenanceError(
            f"{node}: not draining: pod(s) {', '.join(refused)} have no controller and would be lost "
            "(delete them, or set drain_force = True to evict them anyway)"
        )
    deadline = clock() + timeout
    waiting = {_key(p): _meta(p).uid for p in pods}
    pending = dict(waiting)  # not yet accepted for eviction
    refusals: dict[tuple[str, str], str] = {}
    by_key = {_key(p): p for p in pods}
    while True:
        for key in list(pending):
            reason = _evict(cluster, by_key[key])
            if reason is None:
                pending.pop(key)
                refusals.pop(key, None)
                progress(f"evicted {key[0]}/{key[1]}")
            else:
                refusals[key] = reason
        present = {_key(p): _meta(p).uid for p in _pods_on(cluster, node)}
        left = [k for k, uid in waiting.items() if present.get(k) == uid]
        if not left:
            return [f"{ns}/{name}" for ns, name in waiting]
        if clock() >= deadline:
            detail = "; ".join(
                f"{ns}/{name}: {refusals.get((ns, name)) or 'evicted, still terminating'}"
                for ns, name in left
            )
            raise MaintenanceError(
                f"{node}: drain timed out after {timeout:.0f}s with {len(left)} pod(s) left: {detail}"
            )
        sleep(EVICTION_RETRY_SECONDS if pending else POLL_SECONDS)


def wait_ready(
    cluster: Cluster,
    node: str,
    timeout: float,
    boot_id: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> NodeView:
    """Wait until the node is Ready, and reports ``boot_id`` when given (a Ready from before a reboot is stale)."""
    deadline = clock() + timeout
    while True:
        view = read_node(cluster, node)
        if view.ready and (boot_id is None or view.boot_id == boot_id):
            return view
        if clock() >= deadline:
            if not view.exists:
                why = "it is not in the cluster"
            elif not view.ready:
                why = "it is not Ready"
            else:
                why = f"its kubelet still reports boot {view.boot_id or '?'}, not this boot ({boot_id})"
            raise MaintenanceError(f"{node}: not back after {timeout:.0f}s: {why}")
        sleep(POLL_SECONDS)


def not_ready_pods(pods: list[client.V1Pod], since: datetime | None = None) -> list[str]:
    """``name (phase)`` of each pod that is not Running and Ready (finished pods left out: they are done).

    With ``since`` (the node's boot), a pod also waits until every container of it started at or after then: right
    after a reboot the API still holds the statuses the kubelet posted before it, Running and Ready, until the
    kubelet reports again (seen on the lab's real kubelets: a host back in 2 s, its device plugin pod "Ready" from
    the last boot, then Pending while its containers restarted, failing the validation)."""
    out = []
    for pod in pods:
        phase = (pod.status.phase if pod.status else None) or "Pending"
        if phase in ("Succeeded", "Failed"):
            continue
        conditions = (pod.status.conditions if pod.status else None) or []
        if phase != "Running" or not any(c.type == "Ready" and c.status == "True" for c in conditions):
            out.append(f"{_meta(pod).name} ({phase})")
        elif since is not None and not _started_since(pod, since):
            out.append(f"{_meta(pod).name} (status from before the boot)")
    return sorted(out)


def _started_since(pod: client.V1Pod, since: datetime) -> bool:
    statuses = (pod.status.container_statuses if pod.status else None) or []
    started = [s.state.running.started_at for s in statuses if s.state and s.state.running]
    return (
        bool(statuses)
        and len(started) == len(statuses)
        and all(t is not None and t >= since for t in started)
    )


def wait_pods_ready(
    cluster: Cluster,
    node: str,
    namespace: str,
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    since: datetime | None = None,
) -> list[str]:
    """Wait until every pod of ``namespace`` on ``node`` (the GPU add-ons: device plugin, GFD, dcgm-exporter, the
    DRA driver) is Running and Ready; the ones still not after ``timeout``, [] when all are.

    After a reboot the node is Ready before its DaemonSet pods are: they restart (a sidecar may fail once while the
    node's network comes back) and a check run before then fails on a node that is only still starting. ``since``:
    the node's boot, before which no container of a Ready pod may have started (see :func:`not_ready_pods`)."""
    deadline = clock() + timeout
    while True:
        pods = cluster.core.list_namespaced_pod(namespace, field_selector=f"spec.nodeName={node}").items
        waiting = not_ready_pods(pods, since)
        if not waiting or clock() >= deadline:
            return waiting
        sleep(POLL_SECONDS)
