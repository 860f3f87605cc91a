"""Policy layer: the cluster policies the inventory asks for, proven as behaviour by the API server and scheduler.

What is asked, and with how few requests (plain pods on tainted nodes, GPU pods by product affinity, the
PriorityClasses, one preemption, dry-run pods over the GPU quotas), is in :mod:`gpuready.conformance.policy_runs`;
the judging in :mod:`gpuready.conformance.checks.policy`.
"""

import pytest

from gpuready.conformance import policy_runs as runs
from gpuready.conformance.checks import CannotCheck
from gpuready.conformance.checks import policy as checks
from gpuready.conformance.plugin import judge

pytestmark = pytest.mark.policy


@pytest.fixture(scope="module")
def plain_pods(gpuready_suite, gpuready_workloads):
    """{node name: PlainPod} for every tainted node still in the running."""
    return runs.plain_pods(gpuready_suite, gpuready_workloads)


@pytest.fixture(scope="module")
def affinity_pods(gpuready_suite, gpuready_workloads):
    """{product label: the scheduler's decision on a GPU pod asking for it by node affinity}."""
    return runs.affinity_pods(gpuready_suite, gpuready_workloads)


@pytest.fixture(scope="module")
def preemption(gpuready_suite, gpuready_workloads):
    """A PreemptionTry on one node nothing else holds, or why it was not tried."""
    return runs.preemption(gpuready_suite, gpuready_workloads)


@pytest.fixture(scope="module")
def priority_classes(cluster):
    return runs.priority_classes(cluster)


@pytest.fixture(scope="module")
def quota_probes(gpuready_suite, cluster):
    """{namespace: QuotaProbe} for every namespace of the selected nodes' ``gpu_resource_quotas``."""
    return runs.quota_probes(gpuready_suite, cluster)


def test_plain_pod_stays_off(node, gpuready_suite, plain_pods):
    if not runs.tainted(node):
        judge(node, checks.scheduling_taints, node)  # skips with the reason
    plain = plain_pods.get(node.name, runs.PlainPod(None, []))
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
