"""The whole conformance suite on the deployed lab: healthy, it passes; with one fault injected on one host, the
matching check fails on that node only, naming the node and the cause, while the other nodes pass."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from polling import wait_for
from pyinfra_runs import run_pyinfra
from suite_runs import failed, faulted, gpu_allocatable, lab_cluster, node_of, run_suite, wait_until_settled

from gpuready import kube
from gpuready.conformance import workloads as wl
from gpuready.lab.state import load_state

pytestmark = pytest.mark.lab


DIAG_PACKAGES = "datacenter-gpu-manager-4-core nvbandwidth"


@pytest.fixture(scope="module")
def diag_tools(deployed_lab):
    """DCGM and nvbandwidth on every lab host, from the lab's CUDA repository (the node deploy installs neither)."""
    state = load_state(deployed_lab.lab.paths) or {}
    for node in state["hosts"]:
        deployed_lab.lab.ssh(node, f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q {DIAG_PACKAGES}")
    yield
    for node in state["hosts"]:
        deployed_lab.lab.ssh(node, f"apt-get purge -y -q {DIAG_PACKAGES}", check=False)


def test_healthy_lab_passes_the_whole_suite(deployed_lab, diag_tools, tmp_path):
    verdict = run_suite(deployed_lab, tmp_path)
    assert failed(verdict) == {}
    for node, data in verdict["nodes"].items():
        for layer in ("host", "gpu", "node", "workloads", "metrics", "policy", "diag"):
            statuses = {r["status"] for r in data["layers"][layer]["checks"].values()}
            assert "pass" in statuses, (node, layer, statuses)
    # the workloads and metrics layers give their GPUs back when done: in the same run the policy layer finds
    # the H100 node free, fills it and preempts there, and places the L4 affinity pod
    policy_checks = {n: d["layers"]["policy"]["checks"] for n, d in verdict["nodes"].items()}
    assert policy_checks[node_of(deployed_lab, "h100-sxm-8")]["test_priority_preempts"]["status"] == "pass"
    assert (
        policy_checks[node_of(deployed_lab, "l4-1")]["test_gpu_pod_by_product_affinity"]["status"] == "pass"
    )
    h100 = verdict["nodes"][node_of(deployed_lab, "h100-sxm-8")]["layers"]["diag"]["checks"]
    for check in ("test_host_to_device_bandwidth", "test_device_to_host_bandwidth", "test_peer_bandwidth"):
        figures = h100[check]["measurements"]
        assert figures and all(f["measured"] >= f["floor"] > 0 and f["unit"] == "GB/s" for f in figures), (
            figures
        )


# --- the policy layer on the converged lab with hosts --------------------------------------------------------------
# The taint the hosts joined with, the quota and PriorityClasses the add-ons deploy applied (inventory/lab.py) each
# pass; each broken on the real cluster (a taint removed, a PriorityClass recreated with another value, the quota
# deleted, an image whose CUDA is newer than the driver) fails its check with the node, namespace or knob named;
# the add-ons deploy puts the broken objects back. (Before test_lab_lifecycle, which brings up a fresh lab, and before
# the fault tests below: an XID 79 stays in the journal, and its GPU out of allocatable, until a reboot.)

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
    return lab_cluster(deployed_lab)


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
    taints = {n.metadata.name: n.spec.taints for n in cluster.core.list_node().items}
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
    # the earlier runs' namespaces are deleted as each run ends, their pods still terminating: the preemption
    # check only tries a node none of whose GPUs any pod holds, so let them go first
    wait_for(
        lambda: (
            not [
                n
                for n in cluster.core.list_namespace().items
                if n.metadata.name.startswith(wl.NAMESPACE_PREFIX)
            ]
        ),
        timeout=120,
        what="earlier runs gone",
    )

    healthy = policy(run_suite(deployed_lab, tmp_path / "healthy", "-m", "policy"))
    assert set(healthy) <= set(restored)  # every node the suite checked is a node of the cluster
    for node, checks in healthy.items():
        for check in (
            "test_plain_pod_stays_off",
            "test_gpu_pod_by_product_affinity",
            "test_priority_classes",
            "test_gpu_quota_refuses",
        ):
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
            "fail",
            f"{node}: {where}: a pod requesting {QUOTA + 1} nvidia.com/gpu was admitted, no quota refused "
            "it (no ResourceQuota on GPUs)",
        )
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
    statuses = {n: d["layers"]["gpu"]["checks"] for n, d in verdict["nodes"].items()}
    assert set(bad) == set(verdict["nodes"]), statuses
    for node, checks in bad.items():
        assert list(checks) == ["gpu/test_images_cuda_within_the_driver"], checks
        message = checks["gpu/test_images_cuda_within_the_driver"]
        assert message.startswith(
            f"{node}: vectoradd_image {image} needs CUDA 13.1, the driver here supports "
            "CUDA 13.0 (nvidia-smi, driver 580."
        ), message


H2D, D2H, PEER, DCGM = (
    f"diag/test_{name}"
    for name in ("host_to_device_bandwidth", "device_to_host_bandwidth", "peer_bandwidth", "dcgm_diagnostics")
)
DIAG_FAULTS = [
    # (fault, GPU, lab profile, the diag checks that must fail on that node; DCGM level 2 runs its PCIe test too)
    ("slow-gpu", 1, "h100-sxm-8", {H2D, D2H, PEER, DCGM}),
    ("pcie-downgrade", 0, "l4-1", {H2D, D2H, DCGM}),
    ("nvlink-down", 3, "h100-sxm-8", {PEER}),
    ("dcgm-memory", 5, "h100-sxm-8", {DCGM}),
]


@pytest.mark.parametrize(("fault", "gpu", "profile", "checks"), DIAG_FAULTS, ids=[f[0] for f in DIAG_FAULTS])
def test_one_fault_fails_its_diag_checks_on_that_node_only(
    deployed_lab, diag_tools, tmp_path, fault, gpu, profile, checks
):
    node = node_of(deployed_lab, profile)
    with faulted(deployed_lab, node, fault, gpu):
        verdict = run_suite(deployed_lab, tmp_path, "-m", "diag")
    bad = failed(verdict)
    assert list(bad) == [node], bad
    assert set(bad[node]) == checks, bad[node]
    for check in checks - {DCGM}:  # a bandwidth failure names the GPU, the figure, the floor and the unit
        assert f"GPU {gpu}" in bad[node][check] and "GB/s < floor" in bad[node][check], bad[node][check]
    if DCGM in checks:
        assert f"GPU {gpu}: DCGM" in bad[node][DCGM], bad[node][DCGM]


FAULTS = [
    # (fault, GPU, lab profile, the check that must fail, words its message must carry). XID 79 goes last: its
    # kernel line stays in the journal "since boot" after the fault is cleared, as on a real host until reboot.
    ("ecc-uncorrectable", 0, "l4-1", "gpu/test_no_uncorrectable_ecc_errors", "ECC"),
    ("pcie-downgrade", 0, "a100-80gb-4", "gpu/test_pcie_link_at_max", "PCIe"),
    ("driver-mismatch", None, "l4-1", "host/test_no_driver_library_mismatch", "mismatch"),
    ("xid-79", 0, "h100-sxm-8", "gpu/test_no_xid_errors", "79"),
]


@pytest.mark.parametrize(("fault", "gpu", "profile", "check", "words"), FAULTS, ids=[f[0] for f in FAULTS])
def test_one_fault_fails_its_check_on_that_node_only(
    deployed_lab, tmp_path, fault, gpu, profile, check, words
):
    node = node_of(deployed_lab, profile)
    with faulted(deployed_lab, node, fault, gpu):
        verdict = run_suite(deployed_lab, tmp_path)
    bad = failed(verdict)
    assert list(bad) == [node], bad
    assert check in bad[node], bad[node]
    assert bad[node][check].startswith(f"{node}: ") and words in bad[node][check]


def test_a_critical_xid_takes_exactly_that_gpu_out_of_the_allocatable(deployed_lab, tmp_path):
    """Issue #29: an XID 48 (double-bit ECC; the GPU stays on the bus) on GPU 3 of the 8-GPU H100. The device
    plugin (NVIDIA's own on real kubelets: its health checker reads the XID event from the mock NVML's event set)
    marks that one GPU unhealthy: allocatable drops by one, capacity stays, and the suite names the node, the count
    the plugin marked unhealthy, and the GPU the XID came from. (XID 79, the GPU off the bus, through NVIDIA's
    plugin on a time-sliced pool: test_lab_taint_xid_real.py.)"""
    node = node_of(deployed_lab, "h100-sxm-8")
    assert gpu_allocatable(deployed_lab, node) == {"nvidia.com/gpu": "8"}
    with faulted(deployed_lab, node, "xid-48", 3):
        wait_for(lambda: gpu_allocatable(deployed_lab, node) == {"nvidia.com/gpu": "7"}, timeout=120,
                 what=f"{node}'s allocatable nvidia.com/gpu 7 after an XID 48 on GPU 3")  # fmt: skip
        # each layer on its own: a full run skips the node layer of a node whose gpu layer failed
        gpu_layer = failed(run_suite(deployed_lab, tmp_path / "gpu", "-m", "gpu"))
        node_layer = failed(run_suite(deployed_lab, tmp_path / "node", "-m", "node"))
    assert list(gpu_layer) == [node] and list(node_layer) == [node], (gpu_layer, node_layer)
    assert "XID 48 on GPU 3 (PCI:" in gpu_layer[node]["gpu/test_no_xid_errors"], gpu_layer[node]
    assert node_layer[node] == {
        "node/test_allocatable": f"{node}: allocatable nvidia.com/gpu = 7, expected 8 (8 GPUs, not shared); 1 of "
        "8 in capacity marked unhealthy by the device plugin"
    }, node_layer[node]


def test_a_gpu_left_in_prohibited_compute_mode_fails_on_that_node_only(deployed_lab, tmp_path):
    """An admin's ``nvidia-smi -c PROHIBITED`` (no CUDA context can be created) on the L4: the gpu layer names the
    node, the GPU and the mode; every other node, and that one once the mode is back to DEFAULT, passes."""
    node = node_of(deployed_lab, "l4-1")
    deployed_lab.lab.ssh(node, "nvidia-smi -i 0 -c PROHIBITED")
    try:
        verdict = run_suite(deployed_lab, tmp_path / "prohibited", "-m", "gpu")
    finally:
        deployed_lab.lab.ssh(node, "nvidia-smi -i 0 -c DEFAULT")
    bad = failed(verdict)
    assert list(bad) == [node] and list(bad[node]) == ["gpu/test_compute_mode"], bad
    message = bad[node]["gpu/test_compute_mode"]
    assert message.startswith(f"{node}: GPU 0 (") and "compute mode Prohibited, expected Default" in message
    assert message.endswith("no process can create a CUDA context on it"), message
    assert failed(run_suite(deployed_lab, tmp_path / "default", "-m", "gpu", "-k", "compute_mode")) == {}


def test_kubelet_stopped_fails_ready_on_that_node_only(deployed_lab, tmp_path):
    """The kubelet back, the test waits until the node is Ready and its device plugin has registered again with
    the new kubelet: until then the node has no nvidia.com/gpu allocatable, which the next module's healthy run
    would rightly report (stop 52's CI: host/test_labels_agree on the L4, "allocatable nvidia.com/gpu = absent")."""
    node = node_of(deployed_lab, "l4-1")
    deployed_lab.lab.ssh(node, "systemctl stop kubelet")
    try:
        wait_not_ready(deployed_lab, node)
        verdict = run_suite(deployed_lab, tmp_path, "-m", "node or workloads or metrics")
    finally:
        deployed_lab.lab.ssh(node, "systemctl start kubelet")
        wait_until_settled(deployed_lab)
    bad = failed(verdict)
    assert list(bad) == [node], bad
    assert bad[node]["node/test_ready"].startswith(f"{node}: NotReady"), bad[node]


def wait_not_ready(deployed_lab, node: str, timeout: float = 180.0) -> None:
    """The node lifecycle controller marks the node after its grace period (40 s by default)."""
    cluster = lab_cluster(deployed_lab)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        conditions = cluster.core.read_node(node).status.conditions or []
        if any(c.type == "Ready" and c.status != "True" for c in conditions):
            return
        time.sleep(1)
    raise AssertionError(f"{node} still Ready {timeout}s after its kubelet stopped")
