"""Policy layer: the cluster policies the inventory asks for, proven as behaviour by the API server and scheduler.

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
judging is in :mod:`gpuready.conformance.checks.policy`.
"""

import json
import time
from typing import Any, NamedTuple

import pytest

from gpuready.conformance import workloads as wl
from gpuready.conformance.checks import CannotCheck
from gpuready.conformance.checks import policy as checks
from gpuready.conformance.checks import workloads as workload_checks
from gpuready.conformance.plugin import judge
from gpuready.spec.knobs import SharingMode

pytestmark = pytest.mark.policy


def _tainted(node):
    try:
        return bool(checks.scheduling_taints(node))
    except CannotCheck:
        return False


def _watch(cluster, namespace, seen, done, timeout):
    """Follow the namespace's pods with one watch, handing ``seen(event type, pod)`` each, until ``done()`` or
    ``timeout`` seconds passed."""
    from kubernetes import watch
    from kubernetes.client.exceptions import ApiException

    core = cluster.core
    deadline = time.monotonic() + timeout
    listed = json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)
    for obj in listed["items"]:
        seen("ADDED", obj)
    version = listed["metadata"].get("resourceVersion")
    while not done() and time.monotonic() < deadline:
        remaining = max(1, int(deadline - time.monotonic() + 0.999))
        stream = watch.Watch()
        try:
            for event in stream.stream(
                core.list_namespaced_pod,
                namespace,
                resource_version=version,
                timeout_seconds=remaining,
                _request_timeout=remaining + 5,
            ):
                obj = cluster.api.sanitize_for_serialization(event["object"])
                version = obj["metadata"].get("resourceVersion") or version
                seen(event["type"], obj)
                if done() or time.monotonic() >= deadline:
                    break
        except ApiException as exc:
            if exc.status != 410:  # 410 Gone: list again and watch from there
                raise
            listed = json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)
            for obj in listed["items"]:
                seen("ADDED", obj)
            version = listed["metadata"].get("resourceVersion")
        finally:
            stream.stop()


def _decisions(cluster, namespace, pods, timeout):
    """Create ``pods`` at once and follow them with one watch until the scheduler decided on each (or timeout)."""
    for pod in pods:
        cluster.core.create_namespaced_pod(namespace, pod)
    names = {p["metadata"]["name"] for p in pods}
    found = {}

    def seen(_type, obj):
        if obj["metadata"]["name"] in names and (d := checks.decision(obj)) is not None:
            found[obj["metadata"]["name"]] = d

    _watch(cluster, namespace, seen, lambda: set(found) == names, timeout)
    return found


class PlainPod(NamedTuple):
    decision: checks.Scheduling | None  # None: the scheduler decided nothing in time
    taints: list  # the Node's spec.taints as listed before the pod was created


class PreemptionTry(NamedTuple):
    where: str  # the node it was tried on, or why it was tried nowhere
    found: checks.Preemption | None


class Candidate(NamedTuple):
    gpus: int
    name: str
    node: Any
    highest: tuple[str, int]  # the inventory's highest PriorityClass and its value


@pytest.fixture(scope="module")
def plain_pods(gpuready_suite, gpuready_workloads):
    """{node name: PlainPod} for every tainted node still in the running."""
    suite = gpuready_suite
    nodes = [n for n in suite.nodes if suite.gated(n, "policy") is None and _tainted(n)]
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
    gpuready_workloads.ensure_namespace()
    namespace = gpuready_workloads.namespace
    cluster = gpuready_workloads.cluster
    listed = json.loads(cluster.core.list_node(_preload_content=False).data)["items"]
    taints = {n["metadata"]["name"]: (n.get("spec") or {}).get("taints") or [] for n in listed}
    try:
        found = _decisions(cluster, namespace, list(pods.values()), suite.pod_timeout)
    finally:  # a bound plain pod must not hold the node for the layers after this one
        cluster.core.delete_collection_namespaced_pod(
            namespace, label_selector="gpuready.io/check=plain-pod", grace_period_seconds=0
        )
    return {
        name: PlainPod(found.get(pod["metadata"]["name"]), taints.get(name, [])) for name, pod in pods.items()
    }


@pytest.fixture(scope="module")
def affinity_pods(gpuready_suite, gpuready_workloads):
    """{product label: the scheduler's decision on a GPU pod asking for it by node affinity}: one pod per
    product among the nodes still in the running, created at once, deleted once decided."""
    suite = gpuready_suite
    nodes = [n for n in suite.nodes if suite.gated(n, "policy") is None]
    groups = {}
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
    gpuready_workloads.ensure_namespace()
    namespace, cluster = gpuready_workloads.namespace, gpuready_workloads.cluster
    try:
        found = _decisions(cluster, namespace, list(pods.values()), suite.pod_timeout)
    finally:  # they only had to be placed: give the GPUs back
        cluster.core.delete_collection_namespaced_pod(
            namespace, label_selector="gpuready.io/check=affinity", grace_period_seconds=0
        )
    return {label: found.get(pod["metadata"]["name"]) for label, pod in pods.items()}


HOLD = ["sh", "-c", "nvidia-smi -L; sleep infinity"]
HOPELESS = ("Preemption is not helpful", "No preemption victims found", "preemptionPolicy=Never")


def _gpus_held(cluster):
    """{node: GPUs requested by its pods that have not finished}, every namespace, from one LIST: what the
    scheduler counts as taken (a terminating pod's GPU included, until the pod is gone)."""
    raw = cluster.core.list_pod_for_all_namespaces(
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


def _preemption_candidate(suite, workloads, node, held):
    """The node as a Candidate when the suite can fill its GPUs alone, else None."""
    if (
        suite.gated(node, "policy") is not None
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


@pytest.fixture(scope="module")
def preemption(gpuready_suite, gpuready_workloads):
    """A PreemptionTry on the node with the fewest whole GPUs that nothing else holds, or why it was not tried.
    Plain pods hold every GPU of it first; only then, so that the only possible victims are the suite's own,
    a GPU pod of the inventory's highest PriorityClass is sent there and followed until bound."""
    suite, workloads = gpuready_suite, gpuready_workloads
    held = _gpus_held(workloads.cluster)
    options = [c for n in suite.nodes if (c := _preemption_candidate(suite, workloads, n, held))]
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
        cluster.core.create_namespaced_pod(namespace, pod)
        name, names = pod["metadata"]["name"], tuple(sorted(held))
        state = {"victims": set(), "node": None, "unschedulable": None, "hopeless": False, "priority": value}

        def seen(kind, obj):
            meta, status = obj["metadata"], obj.get("status") or {}
            conditions = status.get("conditions") or []
            if meta["name"] in names:
                preempted = any(
                    c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in conditions
                )
                if kind == "DELETED" or meta.get("deletionTimestamp") or preempted:
                    state["victims"].add(meta["name"])
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

        _watch(cluster, namespace, seen, lambda: bool(state["node"] or state["hopeless"]), suite.pod_timeout)
        # a holder preempted and gone before the watch's first LIST was never seen being deleted: it is a victim
        left = json.loads(
            cluster.core.list_namespaced_pod(
                namespace, label_selector="gpuready.io/check=preemption", _preload_content=False
            ).data
        )["items"]
        alive = {p["metadata"]["name"] for p in left if not p["metadata"].get("deletionTimestamp")}
        state["victims"] |= {holder for holder in names if holder not in alive}
        result = checks.Preemption(
            name,
            pc,
            state["priority"],
            names,
            tuple(sorted(state["victims"])),
            state["node"],
            state["unschedulable"],
            suite.pod_timeout,
        )
        return PreemptionTry(node.name, result)
    finally:  # give the GPUs back
        cluster.core.delete_collection_namespaced_pod(
            namespace, label_selector="gpuready.io/check=preemption", grace_period_seconds=0
        )


@pytest.fixture(scope="module")
def priority_classes(cluster):
    from kubernetes import client

    raw = client.SchedulingV1Api(cluster.api).list_priority_class(_preload_content=False)
    return {pc["metadata"]["name"]: pc for pc in json.loads(raw.data)["items"]}


@pytest.fixture(scope="module")
def quota_probes(gpuready_suite, cluster):
    """{namespace: QuotaProbe} for every namespace of the selected nodes' ``gpu_resource_quotas``."""
    from kubernetes.client.exceptions import ApiException

    wanted = {}
    for n in gpuready_suite.nodes:
        for namespace, most in n.knobs["gpu_resource_quotas"].items():
            wanted.setdefault(namespace, (n, int(most)))
    probes = {}
    for namespace, (n, most) in sorted(wanted.items()):
        raw = cluster.core.list_namespaced_resource_quota(namespace, _preload_content=False)
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
            cluster.core.create_namespaced_pod(namespace, pod, dry_run="All")
            status, message = 201, ""
        except ApiException as exc:
            status = exc.status
            try:
                message = json.loads(exc.body).get("message", "")
            except (TypeError, ValueError):
                message = str(exc.body or exc.reason)
        probes[namespace] = checks.QuotaProbe(namespace, most + 1, status, message, quotas)
    return probes


def test_plain_pod_stays_off(node, gpuready_suite, plain_pods):
    if not _tainted(node):
        judge(node, checks.scheduling_taints, node)  # skips with the reason
    plain = plain_pods.get(node.name, PlainPod(None, []))
    judge(node, checks.plain_pod_kept_off, node, plain.decision, plain.taints, gpuready_suite.pod_timeout)


def test_gpu_pod_by_product_affinity(node, gpuready_suite, affinity_pods):
    label = None
    try:
        label = checks.product(node)
    except CannotCheck:
        judge(node, checks.product, node)  # skips with the reason
    if label not in affinity_pods:
        why = (
            "gpu_allocation is 'dra' (GPUs through ResourceClaims)"
            if node.dra
            else "the inventory expects no GPU resource here"
        )
        pytest.skip(f"{node.name}: no GPU pod was sent for {label}: {why}")
    products = {n.name: n.expected_labels.get(checks.PRODUCT_LABEL) for n in gpuready_suite.nodes}
    judge(
        node,
        checks.affinity_lands_on_product,
        node,
        affinity_pods.get(label),
        products,
        gpuready_suite.pod_timeout,
    )


def test_priority_classes(node, priority_classes):
    judge(node, checks.priority_classes, node, priority_classes)


def test_priority_preempts(node, preemption):
    if preemption.found is None or preemption.where != node.name:
        why = (
            preemption.where
            if preemption.found is None
            else f"preemption is tried on one node per run: {preemption.where}"
        )
        judge(node, checks.preempts, node, None, why)  # skips with the reason
    judge(node, checks.preempts, node, preemption.found, "")


def test_gpu_quota_refuses(node, quota_probes):
    judge(node, checks.quota_refuses, node, quota_probes)
