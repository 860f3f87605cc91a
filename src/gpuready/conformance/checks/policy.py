"""Policy layer: the cluster policies the inventory asks for hold as behaviour, judged from API answers.

The suite (``conformance/test_policy.py``) asks the API server and the scheduler once per node or per namespace
and hands the answers here: the scheduler's decision on a plain pod pinned to a tainted GPU node, the list of
PriorityClasses, the API server's answer to a server-side dry-run create of a pod over a namespace's GPU quota.
Each check raises :class:`CannotCheck` (a skip with the reason) when the inventory does not ask for its policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuready.conformance.checks import CannotCheck
from gpuready.spec.kubesyntax import Taint
from gpuready.spec.model import CORDON_TOLERATION, GPU_RESOURCE, NodeSpec

Obj = dict[str, Any]
QUOTA_KEYS = (f"requests.{GPU_RESOURCE}", GPU_RESOURCE)  # what a ResourceQuota on GPUs limits
KEEPS_OFF = ("NoSchedule", "NoExecute")  # PreferNoSchedule only asks the scheduler to avoid the node


def scheduling_taints(node: NodeSpec) -> list[Taint]:
    """The inventory's taints of the node that keep pods off it; CannotCheck when there are none."""
    found = [t for t in node.taints if t.effect in KEEPS_OFF]
    if not found:
        raise CannotCheck(
            "not applicable: the inventory puts no NoSchedule/NoExecute taint on this node (node_taints)"
        )
    return found


def plain_pod(name: str, gpu_pod: Obj) -> Obj:
    """The pod a user without GPU business would run, from a hardened GPU pod (``gpuready.conformance.workloads.gpu_pod``):
    no GPU request, no RuntimeClass, and no toleration but the cordon's (a node is validated while cordoned, and
    the cordon must not be what keeps the pod off). It stays pinned to the node by ``kubernetes.io/hostname``."""
    spec = dict(gpu_pod["spec"])
    spec.pop("runtimeClassName", None)
    spec["tolerations"] = [dict(CORDON_TOLERATION)]
    spec["containers"] = [{k: v for k, v in c.items() if k != "resources"} for c in spec["containers"]]
    labels = {**gpu_pod["metadata"]["labels"], "gpuready.io/check": "plain-pod"}
    return {**gpu_pod, "metadata": {**gpu_pod["metadata"], "name": name, "labels": labels}, "spec": spec}


@dataclass(frozen=True)
class Scheduling:
    """The scheduler's decision on one pod: the node it was bound to, or why it was left Unschedulable."""

    pod: str
    node_name: str | None = None
    unschedulable: str | None = None


def decision(pod: Obj) -> Scheduling | None:
    """The scheduler's decision in a pod object, or None while it has made none."""
    name = pod["metadata"]["name"]
    bound = (pod.get("spec") or {}).get("nodeName")
    if bound:
        return Scheduling(name, node_name=bound)
    for cond in (pod.get("status") or {}).get("conditions") or []:
        scheduled = cond.get("type") == "PodScheduled" and cond.get("status") == "False"
        if scheduled and cond.get("reason") == "Unschedulable":
            return Scheduling(name, unschedulable=cond.get("message") or "no node fits")
    return None


def plain_pod_kept_off(
    node: NodeSpec, found: Scheduling | None, on_node: list[Obj], timeout: float
) -> list[str]:
    """The plain pod pinned to the node was left Unschedulable for an untolerated taint, and the Node (as listed
    before the pod was created: ``on_node`` is its ``spec.taints``) carries one of the inventory's. The
    scheduler's message names the taint in older releases ("untolerated taint {key: value}") and only counts
    nodes since v1.33 ("untolerated taint(s)"): where it names one, it must be the inventory's."""
    taints = scheduling_taints(node)
    named = ", ".join(str(t) for t in taints)
    if found is None:
        return [
            f"the scheduler made no decision on the plain pod within {timeout:g}s (is kube-scheduler running?)"
        ]
    if found.node_name is not None:
        return [
            f"plain pod {found.pod} (no GPU request, no toleration) was scheduled on {found.node_name}: the "
            f"taint {named} did not keep it off (node_taints in the inventory)"
        ]
    message = found.unschedulable or ""
    have = {(t.get("key"), t.get("value") or "", t.get("effect")) for t in on_node}
    carried = [t for t in taints if (t.key, t.value, t.effect) in have]
    names_one = "untolerated taint {" in message
    if (
        "untolerated taint" in message
        and carried
        and (not names_one or any(f"{{{t.key}:" in message for t in carried))
    ):
        return []
    shown = ", ".join(f"{k}={v}:{e}" if v else f"{k}:{e}" for k, v, e in sorted(have)) or "none"
    raise CannotCheck(
        f"the scheduler kept plain pod {found.pod} off the node for another reason, so the taint {named} is not "
        f"proven (the Node's taints: {shown}): {message}"
    )


def priority_classes(node: NodeSpec, found: dict[str, Obj]) -> list[str]:
    """Every PriorityClass of the inventory (``priority_classes``: {name: value}) exists with its value."""
    expected = node.knobs["priority_classes"]
    if not expected:
        raise CannotCheck("not applicable: the inventory asks for no PriorityClass (priority_classes)")
    problems = []
    for name, value in sorted(expected.items()):
        obj = found.get(name)
        if obj is None:
            problems.append(
                f"PriorityClass {name} missing, expected value {value} (priority_classes in the inventory)"
            )
        elif obj.get("value") != value:
            problems.append(
                f"PriorityClass {name} has value {obj.get('value')}, expected {value} (priority_classes in the "
                "inventory)"
            )
    return problems


@dataclass(frozen=True)
class QuotaProbe:
    """The API server's answer to a server-side dry-run create of a pod asking for ``requested`` GPUs in
    ``namespace``: HTTP ``status`` (201 admitted, 403 refused, 404 no such namespace) and its message, with the
    ResourceQuotas of the namespace (API objects) as listed."""

    namespace: str
    requested: int
    status: int
    message: str = ""
    quotas: tuple[Obj, ...] = ()


def gpu_limits(quotas: tuple[Obj, ...] | list[Obj]) -> dict[str, int]:
    """{quota name: the GPUs it allows} for the ResourceQuotas that limit GPU requests."""
    out = {}
    for quota in quotas:
        hard = (quota.get("spec") or {}).get("hard") or {}
        for key in QUOTA_KEYS:
            if key in hard:
                out[quota["metadata"]["name"]] = int(str(hard[key]))
                break
    return out


def quota_refuses(node: NodeSpec, probes: dict[str, QuotaProbe]) -> list[str]:
    """In every namespace of ``gpu_resource_quotas`` ({namespace: max GPUs}) a ResourceQuota allows exactly the
    maximum, and a pod asking for one GPU more is refused with the quota named."""
    expected = node.knobs["gpu_resource_quotas"]
    if not expected:
        raise CannotCheck("not applicable: the inventory sets no GPU quota (gpu_resource_quotas)")
    problems = []
    for namespace, most in sorted(expected.items()):
        probe = probes.get(namespace)
        where = f"namespace {namespace} (gpu_resource_quotas in the inventory: {most} GPUs)"
        if probe is None:
            problems.append(f"{where}: not probed")
            continue
        limits = gpu_limits(probe.quotas)
        shown = (
            ", ".join(f"{name} allows {n}" for name, n in sorted(limits.items()))
            or "no ResourceQuota on GPUs"
        )
        if probe.status == 404:
            problems.append(f"{where}: the namespace does not exist")
            continue
        if probe.status in (200, 201, 202):
            problems.append(
                f"{where}: a pod requesting {probe.requested} {GPU_RESOURCE} was admitted, no quota refused it "
                f"({shown})"
            )
            continue
        if probe.status != 403 or "exceeded quota:" not in probe.message:
            problems.append(f"{where}: the over-quota pod was refused, but not by a quota (HTTP {probe.status}: "
                            f"{probe.message})")  # fmt: skip
            continue
        if limits and min(limits.values()) != most:
            problems.append(f"{where}: {shown}, expected {most}")
    return problems


PRODUCT_LABEL = "nvidia.com/gpu.product"


def product(node: NodeSpec) -> str:
    """The ``nvidia.com/gpu.product`` label GPU feature discovery gives the node, by the inventory."""
    label = node.expected_labels.get(PRODUCT_LABEL)
    if not label:
        raise CannotCheck(
            "not applicable: the inventory expects no nvidia.com/gpu.product label on this node"
        )
    return label


def by_product(pod: Obj, label: str, hostnames: list[str]) -> Obj:
    """A GPU pod (``gpuready.conformance.workloads.gpu_pod``) that asks for ``label`` by required node affinity instead of
    being pinned to a node; kept among ``hostnames`` (the nodes checked) so it never lands outside the run."""
    spec = {k: v for k, v in pod["spec"].items() if k != "nodeSelector"}
    term = {
        "matchExpressions": [
            {"key": PRODUCT_LABEL, "operator": "In", "values": [label]},
            {"key": "kubernetes.io/hostname", "operator": "In", "values": sorted(hostnames)},
        ]
    }
    spec["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    }
    return {**pod, "spec": spec}


def affinity_lands_on_product(
    node: NodeSpec, found: Scheduling | None, products: dict[str, str], timeout: float
) -> list[str]:
    """The GPU pod asking for the node's product by node affinity was bound to a node that has that product by the
    inventory (``products``: node name -> its expected product label)."""
    label = product(node)
    if found is None:
        return [
            f"the scheduler made no decision within {timeout:g}s on the GPU pod asking for {label} by node affinity"
        ]
    asked = f"GPU pod {found.pod} asking for {PRODUCT_LABEL} {label} by node affinity"
    if found.node_name is not None:
        landed = products.get(found.node_name)
        if landed == label:
            return []
        if landed is None:
            return [f"{asked} was scheduled on {found.node_name}, which is not among the nodes checked"]
        return [
            f"{asked} was scheduled on {found.node_name}, whose GPUs are {landed} by the inventory: its "
            f"{PRODUCT_LABEL} label is wrong"
        ]
    message = found.unschedulable or ""
    if "Insufficient" in message:
        raise CannotCheck(f"every node of {label} is busy, so the affinity is not proven: {message}")
    return [f"{asked} was left Unschedulable: {message}"]


@dataclass(frozen=True)
class Preemption:
    """A higher-priority GPU pod sent to a node whose GPUs the ``holders`` (no priority) all held: its priority
    as admitted (``value``), where it was bound (or why not) and which holders the scheduler preempted."""

    pod: str
    priority_class: str
    value: int
    holders: tuple[str, ...]
    victims: tuple[str, ...] = ()
    node_name: str | None = None
    unschedulable: str | None = None
    timeout: float = 0.0


def highest_priority(node: NodeSpec) -> tuple[str, int]:
    """The inventory's PriorityClass with the highest value, the one a preemption is tried with."""
    classes = node.knobs["priority_classes"]
    if not classes:
        raise CannotCheck("not applicable: the inventory asks for no PriorityClass (priority_classes)")
    name, value = max(sorted(classes.items()), key=lambda item: item[1])
    if value <= 0:
        raise CannotCheck(
            f"not applicable: the highest PriorityClass {name} has value {value}, not above a plain pod's 0"
        )
    return name, value


def preempts(node: NodeSpec, found: Preemption | None, why_not: str) -> list[str]:
    """On a node whose GPUs were all held by plain (priority 0) pods, a GPU pod of the inventory's highest
    PriorityClass preempted one of them and was bound to the node. Tried on one node per run; ``why_not`` says,
    for the others, where it was tried or why nowhere."""
    highest_priority(node)
    if found is None:
        raise CannotCheck(why_not)
    asked = f"GPU pod {found.pod} of PriorityClass {found.priority_class} (priority {found.value})"
    held = f"{len(found.holders)} plain pod{'s' if len(found.holders) != 1 else ''} holding every GPU of the node"
    if found.victims and found.node_name:
        return []
    if found.node_name:
        return [f"{asked} was bound to {found.node_name} but preempted none of the {held}"]
    if found.victims:
        return [f"{asked} preempted {', '.join(found.victims)} but was not bound within {found.timeout:g}s"]
    why = f": {found.unschedulable}" if found.unschedulable else f" within {found.timeout:g}s"
    return [f"{asked} preempted none of the {held}{why}"]
