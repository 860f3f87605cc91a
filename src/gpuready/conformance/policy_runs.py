"""The policy layer's questions to the API server and the scheduler, asked for the whole fleet at once.

- taints: one LIST of nodes (their taints when the pods are created), one plain pod (no GPU request, no toleration) per tainted node, pinned by ``kubernetes.io/hostname``,
  all created at once in the run's namespace and followed with one watch until the scheduler decided (bound or
  Unschedulable): no waiting for a timeout when the answer is known. The pods are deleted with one call after.
- affinity: one GPU pod per GPU product of the fleet, asking for it by required node affinity on
  ``nvidia.com/gpu.product`` (among the nodes checked), created at once and followed with the same one watch
  until bound or Unschedulable; it must be bound to a node of that product by the inventory. Deleted after.
- PriorityClasses: one LIST for the whole fleet.
- preemption: on one node (the fewest whole GPUs, none held by any pod: one LIST) plain pods hold every GPU, then a
  GPU pod of the inventory's highest PriorityClass is sent there and followed with one watch until bound: it must
  have preempted one of them. The pods are deleted after.
- GPU quotas: per quota namespace, one LIST of its ResourceQuotas and one server-side dry-run create
  (``dryRun=All``: admission, quota included, runs; nothing is stored) of a pod asking for one GPU more than the
  quota allows.

So the layer's requests grow with the tainted nodes and the quota namespaces, not with nodes x checks. The
watch is :meth:`gpuready.conformance.workloads.Workloads.follow`'s; the judging is in
:mod:`gpuready.conformance.checks.policy`; the suite's ``test_policy.py`` hands one to the other.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, NamedTuple

from gpuready.conformance import workloads as wl
from gpuready.conformance.checks import CannotCheck
from gpuready.conformance.checks import policy as checks
from gpuready.conformance.checks import workloads as workload_checks
from gpuready.kube import Cluster
from gpuready.spec import NodeSpec
from gpuready.spec.knobs import SharingMode

if TYPE_CHECKING:
    from gpuready.conformance.plugin import Suite

Obj = dict[str, Any]
LAYER = "policy"
HOLD = ["sh", "-c", "nvidia-smi -L; sleep infinity"]
HOPELESS = ("Preemption is not helpful", "No preemption victims found", "preemptionPolicy=Never")


class PlainPod(NamedTuple):
    decision: checks.Scheduling | None  # None: the scheduler decided nothing in time
    taints: list  # the Node's spec.taints as listed before the pod was created


class PreemptionTry(NamedTuple):
    where: str  # the node it was tried on, or why it was tried nowhere
    found: checks.Preemption | None


class Candidate(NamedTuple):
    gpus: int
    name: str
    node: NodeSpec
    highest: tuple[str, int]  # the inventory's highest PriorityClass and its value


def tainted(node: NodeSpec) -> bool:
    """Whether the inventory puts a taint on the node that keeps pods off it."""
    try:
        return bool(checks.scheduling_taints(node))
    except CannotCheck:
        return False


def decisions(workloads: wl.Workloads, pods: list[Obj], timeout: float) -> dict[str, checks.Scheduling]:
    """Create ``pods`` at once and follow them with one watch until the scheduler decided on each (or timeout)."""
    for pod in pods:
        workloads.cluster.core.create_namespaced_pod(workloads.namespace, pod)  # type: ignore[arg-type]
    names = {p["metadata"]["name"] for p in pods}
    found: dict[str, checks.Scheduling] = {}

    def seen(_type: str, obj: Obj) -> None:
        if obj["metadata"]["name"] in names and (d := checks.decision(obj)) is not None:
            found[obj["metadata"]["name"]] = d

    workloads.follow(seen, lambda: set(found) == names, timeout)
    return found


def plain_pods(suite: Suite, workloads: wl.Workloads) -> dict[str, PlainPod]:
    """{node name: PlainPod} for every tainted node still in the running."""
    nodes = [n for n in suite.nodes if suite.gated(n, LAYER) is None and tainted(n)]
    if not nodes:
        return {}
    pods = {}
    for n in nodes:
        base = wl.gpu_pod(
            f"plain-{n.name}",
            n,
            n.images.cuda_base,
            checks.GPU_RESOURCE,
            check="plain-pod",
            command=["sleep", "infinity"],
        )
        pods[n.name] = checks.plain_pod(f"plain-{n.name}", base)
    workloads.ensure_namespace()
    cluster = workloads.cluster
    raw: Any = cluster.core.list_node(_preload_content=False)
    listed = json.loads(raw.data)["items"]
    taints = {n["metadata"]["name"]: (n.get("spec") or {}).get("taints") or [] for n in listed}
    try:
        found = decisions(workloads, list(pods.values()), suite.pod_timeout)
    finally:  # a bound plain pod must not hold the node for the layers after this one
        cluster.core.delete_collection_namespaced_pod(
            workloads.namespace, label_selector="gpuready.io/check=plain-pod", grace_period_seconds=0
        )
    return {
        name: PlainPod(found.get(pod["metadata"]["name"]), taints.get(name, [])) for name, pod in pods.items()
    }


def affinity_pods(suite: Suite, workloads: wl.Workloads) -> dict[str, checks.Scheduling | None]:
    """{product label: the scheduler's decision on a GPU pod asking for it by node affinity}: one pod per
    product among the nodes still in the running, created at once, deleted once decided."""
    nodes = [n for n in suite.nodes if suite.gated(n, LAYER) is None]
    groups: dict[str, list[tuple[NodeSpec, str]]] = {}
    for n in nodes:
        try:  # a node with no extended GPU resource (a dra node) sends no pod, and makes no empty group
            label, resource = checks.product(n), workload_checks.pod_resource(n)
        except CannotCheck:
            continue
        groups.setdefault(label, []).append((n, resource))
    pods = {}
    for i, (label, members) in enumerate(sorted(groups.items())):
        first, resource = members[0]
        pod = wl.gpu_pod(
            f"affinity-{i}",
            first,
            first.images.cuda_base,
            resource,
            check="affinity",
            command=["nvidia-smi", "-L"],
        )
        tolerations = [t for n, _ in members for t in wl.tolerations(n)]
        pod["spec"]["tolerations"] = [t for i, t in enumerate(tolerations) if t not in tolerations[:i]]
        pods[label] = checks.by_product(pod, label, [n.name for n in nodes])
    if not pods:
        return {}
    workloads.ensure_namespace()
    try:
        found = decisions(workloads, list(pods.values()), suite.pod_timeout)
    finally:  # they only had to be placed: give the GPUs back
        workloads.cluster.core.delete_collection_namespaced_pod(
            workloads.namespace, label_selector="gpuready.io/check=affinity", grace_period_seconds=0
        )
    return {label: found.get(pod["metadata"]["name"]) for label, pod in pods.items()}


def gpus_held(cluster: Cluster) -> dict[str, int]:
    """{node: GPUs requested by its pods that have not finished}, every namespace, from one LIST: what the
    scheduler counts as taken (a terminating pod's GPU included, until the pod is gone)."""
    raw: Any = cluster.core.list_pod_for_all_namespaces(
        field_selector="status.phase!=Succeeded,status.phase!=Failed", _preload_content=False
    )
    held: dict[str, int] = {}
    for pod in json.loads(raw.data)["items"]:
        where = (pod.get("spec") or {}).get("nodeName")
        for container in (pod.get("spec") or {}).get("containers") or []:
            wanted = ((container.get("resources") or {}).get("requests") or {}).get(checks.GPU_RESOURCE)
            if where and wanted:
                held[where] = held.get(where, 0) + int(wanted)
    return held


def preemption_candidate(
    suite: Suite, workloads: wl.Workloads, node: NodeSpec, held: dict[str, int]
) -> Candidate | None:
    """The node as a Candidate when the suite can fill its GPUs alone, else None."""
    if (
        suite.gated(node, LAYER) is not None
        or node.sharing.mode != SharingMode.NONE
        or workloads.running_on(node.name)
        or held.get(node.name)
    ):
        return None
    try:
        highest = checks.highest_priority(node)
    except CannotCheck:
        return None
    count = node.expected_allocatable.get(checks.GPU_RESOURCE, 0)
    return Candidate(count, node.name, node, highest) if count else None


def preemption(suite: Suite, workloads: wl.Workloads) -> PreemptionTry:
    """A PreemptionTry on the node with the fewest whole GPUs that nothing else holds, or why it was not tried.
    Plain pods hold every GPU of it first; only then, so that the only possible victims are the suite's own,
    a GPU pod of the inventory's highest PriorityClass is sent there and followed until bound."""
    held_before = gpus_held(workloads.cluster)
    options = [c for n in suite.nodes if (c := preemption_candidate(suite, workloads, n, held_before))]
    if not options:
        return PreemptionTry(
            "no node the suite could fill alone (whole GPUs, sharing none, none held by any pod): not tried",
            None,
        )
    chosen = min(options, key=lambda c: (c.gpus, c.name))
    count, node, (pc, value) = chosen.gpus, chosen.node, chosen.highest
    holders = [
        (
            wl.gpu_pod(
                f"holder-{node.name}-{i}",
                node,
                node.images.cuda_base,
                checks.GPU_RESOURCE,
                command=HOLD,
                check="preemption",
            ),
            "settled",
        )
        for i in range(count)
    ]
    workloads.ensure_namespace()
    cluster, namespace = workloads.cluster, workloads.namespace
    try:
        held = workloads.run(holders, suite.pod_timeout)
        if not all(r.phase == "Running" for r in held.values()):
            states = "; ".join(r.describe() for r in held.values() if r.phase != "Running")
            return PreemptionTry(
                f"preemption not tried on {node.name}: the plain pods did not hold every GPU ({states})", None
            )
        pod = wl.gpu_pod(
            f"preemptor-{node.name}",
            node,
            node.images.cuda_base,
            checks.GPU_RESOURCE,
            command=HOLD,
            check="preemption",
        )
        pod["spec"]["priorityClassName"] = pc
        cluster.core.create_namespaced_pod(namespace, pod)  # type: ignore[arg-type]
        name, names = pod["metadata"]["name"], tuple(sorted(held))
        victims: set[str] = set()
        state: dict[str, Any] = {"node": None, "unschedulable": None, "hopeless": False, "priority": value}

        def seen(kind: str, obj: Obj) -> None:
            meta, status = obj["metadata"], obj.get("status") or {}
            conditions = status.get("conditions") or []
            if meta["name"] in names:
                preempted = any(
                    c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in conditions
                )
                if kind == "DELETED" or meta.get("deletionTimestamp") or preempted:
                    victims.add(meta["name"])
            elif meta["name"] == name:
                state["priority"] = (obj.get("spec") or {}).get("priority", value)
                found = checks.decision(obj)
                state["node"] = found.node_name if found else None
                state["unschedulable"] = found.unschedulable if found else None
                state["hopeless"] = bool(
                    found
                    and found.unschedulable
                    and not status.get("nominatedNodeName")
                    and any(h in found.unschedulable for h in HOPELESS)
                )

        workloads.follow(seen, lambda: bool(state["node"] or state["hopeless"]), suite.pod_timeout)
        # a holder preempted and gone before the watch's first LIST was never seen being deleted: it is a victim
        raw: Any = cluster.core.list_namespaced_pod(
            namespace, label_selector="gpuready.io/check=preemption", _preload_content=False
        )
        alive = {
            p["metadata"]["name"]
            for p in json.loads(raw.data)["items"]
            if not p["metadata"].get("deletionTimestamp")
        }
        victims |= {holder for holder in names if holder not in alive}
        result = checks.Preemption(
            name,
            pc,
            state["priority"],
            names,
            tuple(sorted(victims)),
            state["node"],
            state["unschedulable"],
            suite.pod_timeout,
        )
        return PreemptionTry(node.name, result)
    finally:  # give the GPUs back
        cluster.core.delete_collection_namespaced_pod(
            namespace, label_selector="gpuready.io/check=preemption", grace_period_seconds=0
        )


def priority_classes(cluster: Cluster) -> dict[str, Obj]:
    """{name: PriorityClass} of the cluster, from one LIST."""
    from kubernetes import client

    raw: Any = client.SchedulingV1Api(cluster.api).list_priority_class(_preload_content=False)
    return {pc["metadata"]["name"]: pc for pc in json.loads(raw.data)["items"]}


def quota_probes(suite: Suite, cluster: Cluster) -> dict[str, checks.QuotaProbe]:
    """{namespace: QuotaProbe} for every namespace of the selected nodes' ``gpu_resource_quotas``."""
    from kubernetes.client.exceptions import ApiException

    wanted: dict[str, tuple[NodeSpec, int]] = {}
    for n in suite.nodes:
        for namespace, most in n.knobs["gpu_resource_quotas"].items():
            wanted.setdefault(namespace, (n, int(most)))
    probes = {}
    for namespace, (n, most) in sorted(wanted.items()):
        raw: Any = cluster.core.list_namespaced_resource_quota(namespace, _preload_content=False)
        quotas = tuple(json.loads(raw.data)["items"])
        pod = wl.gpu_pod(
            f"over-quota-{namespace}"[:63],
            n,
            n.images.cuda_base,
            checks.GPU_RESOURCE,
            check="quota",
            count=most + 1,
        )
        pod["spec"].pop("nodeSelector")  # dry-run: never scheduled, and no node name in the quota's business
        try:
            cluster.core.create_namespaced_pod(namespace, pod, dry_run="All")  # type: ignore[arg-type]
            status, message = 201, ""
        except ApiException as exc:
            status = exc.status
            try:
                message = json.loads(exc.body or "").get("message", "")
            except (TypeError, ValueError):
                message = str(exc.body or exc.reason)
        probes[namespace] = checks.QuotaProbe(namespace, most + 1, status, message, quotas)
    return probes
