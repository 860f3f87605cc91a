"""Workloads layer: GPU pods on every node, created for the whole fleet at once and followed with one watch.

Two rounds, each one create-all + one watch: first a vectorAdd pod per node (short-lived, so its GPU is free
again afterwards), then the sharing checks, whose pods keep running (they hold their GPUs for the metrics
layer, which looks for them in dcgm-exporter's pod labels): time-slicing nodes get ``replicas`` pods per GPU
plus one that must stay Unschedulable; MIG nodes one pod per MIG profile; ``gpu_allocation = "dra"`` nodes two pods
naming one ResourceClaim of a whole GPU with the DRA driver's time-slicing config. The rounds are
:mod:`gpuready.conformance.workload_runs`; the judging is in :mod:`gpuready.conformance.checks.workloads`; pods and
namespace in :mod:`gpuready.conformance.workloads`.
"""

import pytest

from gpuready.conformance import dra_workloads as dw
from gpuready.conformance import workload_runs as runs
from gpuready.conformance.checks import dra as dra_checks
from gpuready.conformance.checks import workloads as checks
from gpuready.conformance.plugin import judge

pytestmark = pytest.mark.workloads


@pytest.fixture(scope="module")
def pods(gpuready_suite, gpuready_workloads):
    """Every pod of this layer, for every node still in the running: {(node, check, item): PodResult}."""
    return runs.layer_pods(gpuready_suite, gpuready_workloads)


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
        for profile in runs.mig_resources(node):
            name = runs.mig_pod_name(node, profile)
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
