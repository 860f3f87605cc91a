"""The whole conformance suite on the deployed lab: healthy, it passes; with one fault injected on one host, the
matching check fails on that node only, naming the node and the cause, while the other nodes pass."""

from __future__ import annotations

import time

import pytest
from suite_runs import failed, node_of, run_suite

from gpuready.lab import hosts
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
    h100 = verdict["nodes"][node_of(deployed_lab, "h100-sxm-8")]["layers"]["diag"]["checks"]
    for check in ("test_host_to_device_bandwidth", "test_device_to_host_bandwidth", "test_peer_bandwidth"):
        figures = h100[check]["measurements"]
        assert figures and all(f["measured"] >= f["floor"] > 0 and f["unit"] == "GB/s" for f in figures), (
            figures
        )


H2D, D2H, PEER, DCGM = (f"diag/test_{name}" for name in (
    "host_to_device_bandwidth", "device_to_host_bandwidth", "peer_bandwidth", "dcgm_diagnostics"))  # fmt: skip
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
    hosts.inject_fault(deployed_lab.lab.paths, node, fault, gpu)
    try:
        verdict = run_suite(deployed_lab, tmp_path, "-m", "diag")
    finally:
        hosts.inject_fault(deployed_lab.lab.paths, node, None)
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
    hosts.inject_fault(deployed_lab.lab.paths, node, fault, gpu)
    try:
        verdict = run_suite(deployed_lab, tmp_path)
    finally:
        hosts.inject_fault(deployed_lab.lab.paths, node, None)
    bad = failed(verdict)
    assert list(bad) == [node], bad
    assert check in bad[node], bad[node]
    assert bad[node][check].startswith(f"{node}: ") and words in bad[node][check]


def test_kubelet_stopped_fails_ready_on_that_node_only(deployed_lab, tmp_path):
    node = node_of(deployed_lab, "l4-1")
    deployed_lab.lab.ssh(node, "systemctl stop kubelet")
    try:
        wait_not_ready(deployed_lab, node)
        verdict = run_suite(deployed_lab, tmp_path, "-m", "node or workloads or metrics")
    finally:
        deployed_lab.lab.ssh(node, "systemctl start kubelet")
    bad = failed(verdict)
    assert list(bad) == [node], bad
    assert bad[node]["node/test_ready"].startswith(f"{node}: NotReady"), bad[node]


def wait_not_ready(deployed_lab, node: str, timeout: float = 180.0) -> None:
    """The node lifecycle controller marks the node after its grace period (40 s by default)."""
    from gpuready import kube

    state = load_state(deployed_lab.lab.paths) or {}
    cluster = kube.connect(state["apiserver"]["kubeconfig"])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        conditions = cluster.core.read_node(node).status.conditions or []
        if any(c.type == "Ready" and c.status != "True" for c in conditions):
            return
        time.sleep(1)
    raise AssertionError(f"{node} still Ready {timeout}s after its kubelet stopped")
