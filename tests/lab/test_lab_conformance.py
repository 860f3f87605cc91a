"""The whole conformance suite on the deployed lab: healthy, it passes; with one fault injected on one host, the
matching check fails on that node only, naming the node and the cause, while the other nodes pass."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuready.lab import hosts
from gpuready.lab.state import load_state

pytestmark = pytest.mark.lab
REPO = Path(__file__).resolve().parents[2]


def run_suite(deployed_lab, report_dir: Path, *args: str) -> dict:
    lab = deployed_lab.lab
    state = load_state(lab.paths) or {}
    kubeconfig = (state.get("apiserver") or {}).get("kubeconfig")
    assert kubeconfig, "the lab records no API server kubeconfig"
    cmd = [sys.executable, "-m", "pytest", "conformance", "--inventory", "inventory/lab.py", "--kubeconfig",
           kubeconfig, "--report-dir", str(report_dir), "-p", "no:cacheprovider", "-q", *args]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, env=lab.env(), capture_output=True, text=True, timeout=600)
    print(
        f"conformance suite on the lab: {time.monotonic() - started:.1f} s"
    )  # a number for the closing note
    verdict_path = report_dir / "verdict.json"
    assert verdict_path.exists(), done.stdout[-4000:] + done.stderr[-2000:]
    return json.loads(verdict_path.read_text())


def failed(verdict: dict) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for node, data in verdict["nodes"].items():
        for layer, checks in data["layers"].items():
            for check, result in checks["checks"].items():
                if result["status"] == "fail":
                    out.setdefault(node, {})[f"{layer}/{check}"] = result["message"]
    return out


def node_of(deployed_lab, profile: str) -> str:
    state = load_state(deployed_lab.lab.paths) or {}
    return next(name for name, host in state["hosts"].items() if host["profile"] == profile)


def test_healthy_lab_passes_the_whole_suite(deployed_lab, tmp_path):
    verdict = run_suite(deployed_lab, tmp_path)
    assert failed(verdict) == {}
    for node, data in verdict["nodes"].items():
        for layer in ("host", "gpu", "node", "workloads", "metrics"):
            statuses = {r["status"] for r in data["layers"][layer]["checks"].values()}
            assert "pass" in statuses, (node, layer, statuses)


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
