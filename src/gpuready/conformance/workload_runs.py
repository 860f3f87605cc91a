"""The workloads layer's pods for the whole fleet: rounds of create-all + one watch
(:meth:`gpuready.conformance.workloads.Workloads.run`).

First a vectorAdd pod per node (short-lived, so its GPU is free again afterwards; on dra nodes through a
ResourceClaimTemplate, with a claim for more GPUs than the node has that must stay pending), then the sharing
checks, whose pods keep running until their outputs are read: time-slicing nodes get ``replicas`` pods per GPU plus
one that must stay Unschedulable; MIG nodes one pod per MIG profile; ``gpu_allocation = "dra"`` nodes two pods naming
one ResourceClaim of a whole GPU with the DRA driver's time-slicing config. Then those pods go (the policy layer
needs nodes nothing holds) and dra nodes print their driver version in a pod. The suite's ``test_workloads.py``
judges the results with :mod:`gpuready.conformance.checks.workloads` and :mod:`gpuready.conformance.checks.dra`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuready.conformance import dra_workloads as dw
from gpuready.conformance import workloads as wl
from gpuready.conformance.checks import CannotCheck
from gpuready.conformance.checks import workloads as checks
from gpuready.nvidia import catalogue
from gpuready.spec import NodeSpec

if TYPE_CHECKING:
    from gpuready.conformance.plugin import Suite

LAYER = "workloads"
LIST_AND_HOLD = ["sh", "-c", "nvidia-smi -L; sleep infinity"]
DRIVER_VERSION = ["sh", "-c", "nvidia-smi --query-gpu=driver_version --format=csv,noheader"]


def mig_resources(node: NodeSpec) -> dict[str, str]:
    """MIG profile -> the resource a pod asks for to get one device of it."""
    if node.sharing.mode != "mig":
        return {}
    if node.sharing.mig_strategy == "single":
        return {profile: checks.GPU_RESOURCE for profile in node.mig_device_counts()}
    profiles = catalogue.mig_profiles(node.gpu_model)
    return {p: profiles[p].resource_name for p in sorted(node.mig_device_counts())}


def mig_pod_name(node: NodeSpec, profile: str) -> str:
    return f"mig-{node.name}-{profile.replace('.', '-')}"


def pod_resource(node: NodeSpec) -> str | None:
    """The extended resource a node's GPU pod asks for; None on a dra node or where there is none."""
    if node.dra:
        return None
    try:
        return checks.pod_resource(node)
    except CannotCheck:
        return None


def layer_pods(suite: Suite, workloads: wl.Workloads) -> dict[tuple[str, str, str], Any]:
    """Every pod of this layer, for every node still in the running: {(node, check, item): PodResult} (a list of
    them for time-slicing, the pods and the claim's devices for a shared claim)."""
    nodes = [n for n in suite.nodes if suite.gated(n, LAYER) is None]
    timeout = suite.pod_timeout
    found: dict[tuple[str, str, str], Any] = {}
    first = [
        (wl.gpu_pod(f"vectoradd-{n.name}", n, n.images.vectoradd, res, check="vectoradd"), "finished")
        for n in nodes
        if (res := pod_resource(n))
    ]
    # dra nodes: vectorAdd through a ResourceClaimTemplate, and a claim for more GPUs than the node has
    templates = []
    for n in (n for n in nodes if n.dra):
        single, too_many = dw.single_device(n), dw.claim_template(count=n.gpu_count + 1)
        templates += [single, too_many]
        first.append(
            (dw.dra_pod(f"vectoradd-{n.name}", n, n.images.vectoradd, single, check="vectoradd"), "finished")
        )
        pod = dw.dra_pod(
            f"unsatisfiable-{n.name}", n, n.images.cuda_base, too_many, command=LIST_AND_HOLD, check="dra"
        )
        first.append((pod, "settled"))
    if templates:
        dw.ensure_templates(workloads, templates)
    results = workloads.run(first, timeout) if first else {}
    for n in nodes:
        found[(n.name, "vectoradd", "")] = results.get(f"vectoradd-{n.name}")
        found[(n.name, "unsatisfiable", "")] = results.get(f"unsatisfiable-{n.name}")
    second, claims = [], []
    for n in nodes:
        if n.sharing.mode == "time-slicing":
            total = n.expected_allocatable.get(checks.GPU_RESOURCE, 0) or sum(n.expected_allocatable.values())
            res = checks.pod_resource(n)
            for i in range(total + 1):
                name = f"timeslice-{n.name}-{i}"
                second.append(
                    (
                        wl.gpu_pod(
                            name, n, n.images.cuda_base, res, command=LIST_AND_HOLD, check="time-slicing"
                        ),
                        "settled",
                    )
                )
        if n.dra and dw.shares_whole_gpu(n):  # two pods, one time-sliced claim
            claims.append(dw.shared_claim(n))
            second += [
                (pod, "running") for pod in dw.shared_pods(n, n.images.cuda_base, LIST_AND_HOLD, "dra")
            ]
        for profile, res in mig_resources(n).items():
            name = mig_pod_name(n, profile)
            if n.dra:
                template = dw.claim_template(profile=profile)
                dw.ensure_templates(workloads, [template])
                pod = dw.dra_pod(name, n, n.images.cuda_base, template, command=LIST_AND_HOLD, check="mig")
            else:
                pod = wl.gpu_pod(name, n, n.images.cuda_base, res, command=LIST_AND_HOLD, check="mig")
            second.append((pod, "running"))
    if claims:
        dw.create_claims(workloads, claims)
    results = workloads.run(second, timeout) if second else {}
    shared = dw.allocated(workloads, [c["metadata"]["name"] for c in claims])
    for n in nodes:
        name = dw.shared_claim(n)["metadata"]["name"]
        if name in shared:
            pods = [results.get(p) for p in dw.shared_pod_names(n)]
            found[(n.name, "shared-claim", "")] = ([p for p in pods if p is not None], shared[name])
    for name, result in results.items():
        if name.startswith("shared-"):
            continue
        if name.startswith("timeslice-"):
            found.setdefault((result.node, "time-slicing", ""), []).append(result)
        else:
            found[(result.node, "mig", name)] = result
    # the pods that hold GPUs go now (their outputs are read): the policy layer needs nodes nothing holds
    workloads.release(("time-slicing", "mig", "dra"), timeout)
    # dra nodes: the driver version nvidia-smi prints in a pod, once the GPUs are free again
    third = [
        (dw.dra_pod(f"driver-{n.name}", n, n.images.cuda_base, dw.single_device(n), command=DRIVER_VERSION,
                    check="dra"), "finished")
        for n in nodes
        if n.dra
    ]  # fmt: skip
    results = workloads.run(third, timeout) if third else {}
    for n in nodes:
        found[(n.name, "driver-version", "")] = results.get(f"driver-{n.name}")
    workloads.release(("dra",), timeout)
    return found
