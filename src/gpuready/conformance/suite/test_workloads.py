"""Workloads layer: GPU pods on every node, created for the whole fleet at once and followed with one watch.

Two rounds, each one create-all + one watch: first a vectorAdd pod per node (short-lived, so its GPU is free
again afterwards), then the sharing checks, whose pods keep running (they hold their GPUs for the metrics
layer, which looks for them in dcgm-exporter's pod labels): time-slicing nodes get ``replicas`` pods per GPU
plus one that must stay Unschedulable; MIG nodes one pod per MIG profile; ``gpu_allocation = "dra"`` nodes two pods
naming one ResourceClaim of a whole GPU with the DRA driver's time-slicing config. The judging is in
:mod:`gpuready.conformance.checks.workloads`; pods and namespace in :mod:`gpuready.conformance.workloads`.
"""

import pytest

from gpuready.conformance import dra_workloads as dw
from gpuready.conformance import workloads as wl
from gpuready.conformance.checks import CannotCheck
from gpuready.conformance.checks import dra as dra_checks
from gpuready.conformance.checks import workloads as checks
from gpuready.conformance.plugin import judge
from gpuready.nvidia import catalogue

pytestmark = pytest.mark.workloads

LIST_AND_HOLD = ["sh", "-c", "nvidia-smi -L; sleep infinity"]
DRIVER_VERSION = ["sh", "-c", "nvidia-smi --query-gpu=driver_version --format=csv,noheader"]


def _mig_resources(node):
    """MIG profile -> the resource a pod asks for to get one device of it."""
    if node.sharing.mode != "mig":
        return {}
    if node.sharing.mig_strategy == "single":
        return {profile: checks.GPU_RESOURCE for profile in node.mig_device_counts()}
    profiles = catalogue.mig_profiles(node.gpu_model)
    return {p: profiles[p].resource_name for p in sorted(node.mig_device_counts())}


def _pod_resource(node):
    if node.dra:
        return None
    try:
        return checks.pod_resource(node)
    except CannotCheck:
        return None


@pytest.fixture(scope="module")
def pods(gpuready_suite, gpuready_workloads):
    """Every pod of this layer, for every node still in the running: {(node, check, item): PodResult}."""
    nodes = [n for n in gpuready_suite.nodes if gpuready_suite.gated(n, "workloads") is None]
    timeout = gpuready_suite.pod_timeout
    found = {}
    first = [
        (wl.gpu_pod(f"vectoradd-{n.name}", n, n.images.vectoradd, res, check="vectoradd"), "finished")
        for n in nodes
        if (res := _pod_resource(n))
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
        dw.ensure_templates(gpuready_workloads, templates)
    results = gpuready_workloads.run(first, timeout) if first else {}
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
        for profile, res in _mig_resources(n).items():
            name = f"mig-{n.name}-{profile.replace('.', '-')}"
            if n.dra:
                template = dw.claim_template(profile=profile)
                dw.ensure_templates(gpuready_workloads, [template])
                pod = dw.dra_pod(name, n, n.images.cuda_base, template, command=LIST_AND_HOLD, check="mig")
            else:
                pod = wl.gpu_pod(name, n, n.images.cuda_base, res, command=LIST_AND_HOLD, check="mig")
            second.append((pod, "running"))
    if claims:
        dw.create_claims(gpuready_workloads, claims)
    results = gpuready_workloads.run(second, timeout) if second else {}
    shared = dw.allocated(gpuready_workloads, [c["metadata"]["name"] for c in claims])
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
    gpuready_workloads.release(("time-slicing", "mig", "dra"), timeout)
    # dra nodes: the driver version nvidia-smi prints in a pod, once the GPUs are free again
    third = [
        (dw.dra_pod(f"driver-{n.name}", n, n.images.cuda_base, dw.single_device(n), command=DRIVER_VERSION,
                    check="dra"), "finished")
        for n in nodes
        if n.dra
    ]  # fmt: skip
    results = gpuready_workloads.run(third, timeout) if third else {}
    for n in nodes:
        found[(n.name, "driver-version", "")] = results.get(f"driver-{n.name}")
    gpuready_workloads.release(("dra",), timeout)
    return found


def test_vector_add(node, pods):
    judge(node, checks.vector_add, node, pods.get((node.name, "vectoradd", "")))


def test_time_slicing(node, pods):
    if node.sharing.mode != "time-slicing":
        pytest.skip(f"{node.name}: not applicable: sharing mode is '{node.sharing.mode}'")
    results = pods.get((node.name, "time-slicing", ""), [])
    # every pod asks for the same thing: whichever the scheduler left out is "the one more"
    extra = next((r for r in results if r.unschedulable is not None and not r.running), None)
    shared = [r for r in results if r is not extra]
    judge(node, checks.time_slicing, node, shared, extra)


def test_mig_devices(node, pods):
    if node.sharing.mode != "mig":
        pytest.skip(f"{node.name}: not applicable: sharing mode is '{node.sharing.mode}'")

    def all_profiles():
        problems = []
        for profile in _mig_resources(node):
            name = f"mig-{node.name}-{profile.replace('.', '-')}"
            problems += checks.mig_device(node, profile, pods.get((node.name, "mig", name)))
        return problems

    judge(node, all_profiles)


def test_dra_shared_claim_same_gpu(node, pods):
    results, devices = pods.get((node.name, "shared-claim", ""), ([], None))
    claim = dw.shared_claim(node)["metadata"]["name"]
    judge(node, dra_checks.shared_claim, node, claim, results, devices)


def test_dra_unsatisfiable_claim_pending(node, pods):
    judge(node, dra_checks.unsatisfiable, node, pods.get((node.name, "unsatisfiable", "")))


@pytest.fixture(scope="module")
def resource_slices(cluster, gpuready_suite):
    return dw.list_dra_objects(cluster)[0] if any(n.dra for n in gpuready_suite.nodes) else []


def test_dra_driver_version_matches_smi(node, pods, resource_slices):
    judge(node, dra_checks.driver_version, node, resource_slices, pods.get((node.name, "driver-version", "")))
