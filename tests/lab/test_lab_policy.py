"""The policy layer on the converged lab with hosts: the taint the hosts joined with, the quota and PriorityClasses
the add-ons deploy applied (inventory/lab.py) each pass; each broken on the real cluster (a taint removed, a
PriorityClass recreated with another value, the quota deleted, an image whose CUDA is newer than the driver) fails
its check with the node, namespace or knob named; the add-ons deploy puts the broken objects back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from pyinfra_runs import run_pyinfra
from suite_runs import failed, node_of, run_suite

from gpuready import kube
from gpuready.lab.state import load_state

pytestmark = pytest.mark.lab
ADDONS = "deploys/cluster_addons.py"
QUOTA_NAMESPACE, QUOTA = "ml-team", 4  # inventory/lab.py
LOW, HIGH = ("gpu-batch", 1000), ("gpu-serving", 100000)


def policy(verdict: dict) -> dict[str, dict[str, tuple[str, str]]]:
    return {
        node: {check: (r["status"], r["message"]) for check, r in data["layers"]["policy"]["checks"].items()}
        for node, data in verdict["nodes"].items()
    }


@pytest.fixture(scope="module")
def cluster(deployed_lab: Any) -> kube.Cluster:
    state = load_state(deployed_lab.lab.paths) or {}
    return kube.connect(state["apiserver"]["kubeconfig"])


def priority_value(cluster: kube.Cluster, name: str) -> int | None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        return client.SchedulingV1Api(cluster.api).read_priority_class(name).value
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


@pytest.fixture
def restored(deployed_lab: Any, cluster: kube.Cluster) -> Iterator[dict[str, list]]:
    """The lab as the deploys left it, whatever the test broke: {node: its taints before} to put back, then the
    add-ons deploy with ownership taken (PriorityClass value and quota back)."""
    state = load_state(deployed_lab.lab.paths) or {}
    taints = {name: cluster.core.read_node(name).spec.taints for name in state["hosts"]}
    yield taints
    for name, before in taints.items():
        body = [cluster.api.sanitize_for_serialization(t) for t in before or []]
        cluster.core.patch_node(name, {"spec": {"taints": body or None}})
    if (
        priority_value(cluster, HIGH[0]) != HIGH[1]
        or not cluster.core.list_namespaced_resource_quota(QUOTA_NAMESPACE).items
    ):
        back = run_pyinfra(deployed_lab.lab, "--data", "addons_take_ownership=True", deploy=ADDONS)
        assert back.returncode == 0, back.output[-3000:]


def test_policies_pass_on_the_lab_and_each_broken_one_fails_until_the_addons_deploy_restores_it(
    deployed_lab, cluster, restored, tmp_path
):
    from kubernetes import client

    l4, h100 = node_of(deployed_lab, "l4-1"), node_of(deployed_lab, "h100-sxm-8")
    where = f"namespace {QUOTA_NAMESPACE} (gpu_resource_quotas in the inventory: {QUOTA} GPUs)"

    healthy = policy(run_suite(deployed_lab, tmp_path / "healthy", "-m", "policy"))
    assert set(healthy) == set(restored)
    for node, checks in healthy.items():
        for check in ("test_plain_pod_stays_off", "test_gpu_pod_by_product_affinity", "test_priority_classes",
                      "test_gpu_quota_refuses"):  # fmt: skip
            assert checks[check] == ("pass", ""), (node, check, checks[check])
        if node != h100:
            status, message = checks["test_priority_preempts"]
            assert status == "skip" and f"preemption is tried on one node per run: {h100}" in message, message
    assert healthy[h100]["test_priority_preempts"] == ("pass", "")

    # broken on the cluster, as a person or another tool would: the L4 node's taint removed; the higher
    # PriorityClass recreated with another value (and no preemption); the team's quota deleted
    cluster.core.patch_node(l4, {"spec": {"taints": None}})
    scheduling = client.SchedulingV1Api(cluster.api)
    scheduling.delete_priority_class(HIGH[0])
    deadline = time.monotonic() + 30
    while priority_value(cluster, HIGH[0]) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    scheduling.create_priority_class(
        {"metadata": {"name": HIGH[0]}, "value": 500, "preemptionPolicy": "Never"}
    )
    cluster.core.delete_namespaced_resource_quota("gpu-quota", QUOTA_NAMESPACE)

    broken = policy(run_suite(deployed_lab, tmp_path / "broken", "-m", "policy"))
    status, message = broken[l4]["test_plain_pod_stays_off"]
    assert status == "fail" and message.startswith(f"{l4}: plain pod plain-{l4} "), message
    assert (
        f"was scheduled on {l4}: the taint nvidia.com/gpu=present:NoSchedule did not keep it off" in message
    )
    assert all(broken[n]["test_plain_pod_stays_off"] == ("pass", "") for n in broken if n != l4)
    for node, checks in broken.items():
        assert checks["test_priority_classes"] == (
            "fail",
            f"{node}: PriorityClass {HIGH[0]} has value 500, expected {HIGH[1]} (priority_classes in the inventory)",
        )
        assert checks["test_gpu_quota_refuses"] == (
            "fail", f"{node}: {where}: a pod requesting {QUOTA + 1} nvidia.com/gpu was admitted, no quota refused "
            "it (no ResourceQuota on GPUs)"
        )  # fmt: skip
    status, message = broken[h100]["test_priority_preempts"]
    assert status == "fail" and f"of PriorityClass {HIGH[0]} (priority 500) preempted none" in message, (
        message
    )

    # the add-ons deploy: a PriorityClass value cannot change in place, and this one is not gpuready's any more
    stopped = run_pyinfra(deployed_lab.lab, deploy=ADDONS)
    assert stopped.returncode != 0
    assert f"PriorityClass {HIGH[0]}: value 500 -> {HIGH[1]} cannot change on a live object" in stopped.output
    assert "addons_take_ownership = True" in stopped.output
    taken = run_pyinfra(deployed_lab.lab, "--data", "addons_take_ownership=True", deploy=ADDONS)
    assert taken.returncode == 0, taken.output[-3000:]
    assert priority_value(cluster, HIGH[0]) == HIGH[1]
    (quota,) = cluster.core.list_namespaced_resource_quota(QUOTA_NAMESPACE).items
    assert quota.spec.hard == {"requests.nvidia.com/gpu": str(QUOTA)}


def test_an_image_newer_than_the_drivers_cuda_fails_on_every_node(deployed_lab, tmp_path):
    image = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda13.1.0-ubuntu24.04"
    verdict = run_suite(
        deployed_lab, tmp_path, "-m", "gpu", "-k", "images_cuda", "--data", f"vectoradd_image={image}"
    )
    bad = failed(verdict)
    assert set(bad) == set(verdict["nodes"]), bad
    for node, checks in bad.items():
        assert list(checks) == ["gpu/test_images_cuda_within_the_driver"], checks
        message = checks["gpu/test_images_cuda_within_the_driver"]
        assert message.startswith(f"{node}: vectoradd_image {image} needs CUDA 13.1, the driver here supports "
                                  "CUDA 13.0 (nvidia-smi, driver 580."), message  # fmt: skip
