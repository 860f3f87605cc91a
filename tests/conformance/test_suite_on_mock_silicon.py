"""The suite's ``--connection local`` code on the lab's mock silicon: ``gpuready check`` runs, in a process of its
own whose library path holds the mock ``libnvidia-ml.so.1`` and ``libcuda.so.1`` (src/gpuready/lab/silicon), against
a fake node (the lab's emulated nvidia-smi and stand-in tools on PATH, the same hardware file the libraries read).
So the product's real local-mode paths run end to end: the NVML reader (nvidia-ml-py) compared with nvidia-smi,
vectorAdd through the CUDA driver API, and the copy bandwidths against the model's floors. A healthy node passes
with the copies measured; each fault fails the checks that must catch it, naming the GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from shims import read_verdict


@pytest.fixture(scope="module")
def mock_library_path() -> str:
    """LD_LIBRARY_PATH holding the built mock libraries (built once and cached by source, as `make control-plane`
    does); the test is skipped, with the reason, where Go or a C compiler is missing."""
    from gpuready.lab.cluster.binaries import PrerequisiteError
    from gpuready.lab.silicon import build

    try:
        libraries = build.ensure_libraries(lambda _line: None, names=["nvml", "cuda"])
    except PrerequisiteError as exc:
        pytest.skip(f"the mock NVML and CUDA libraries cannot be built here: {exc}")
    return os.pathsep.join(sorted({str(path.parent) for path in libraries.values()}))


def run_local(
    node, library_path: str, report_dir: Path, marks: str = "host or gpu or diag"
) -> subprocess.CompletedProcess[str]:
    """The host, gpu and diag layers as a GPU runner runs them; DCGM (NVIDIA's proprietary, emulated by the lab's
    dcgmi, not by these libraries) is left to test_suite_on_fake_node.py."""
    env = {**os.environ, **node.env(), "LD_LIBRARY_PATH": library_path}
    env.setdefault("GPUREADY_LAB_DRIVER_VERSION", "580.178.04")  # what the fake node's nvidia-smi reports
    return subprocess.run(
        [sys.executable, "-m", "gpuready.cli", "check", "--inventory", str(node.inventory()), "--connection",
         "local", "--report-dir", str(report_dir), "-m", marks, "-k", "not test_dcgm_diagnostics"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip


def checks(report_dir: Path) -> dict[str, dict]:
    node = read_verdict(report_dir)["nodes"]["gpu-node-1"]
    return {name: result for layer in node["layers"].values() for name, result in layer["checks"].items()}


def test_healthy_node_passes_with_vector_add_and_the_copies_measured(make_node, mock_library_path, tmp_path):
    node = make_node("l4-1")  # a model with bandwidth floors: the figures are judged, not only recorded
    node.activate()
    proc = run_local(node, mock_library_path, tmp_path / "report")
    got = checks(tmp_path / "report")
    failed = {name: r["message"] for name, r in got.items() if r["status"] == "fail"}
    assert failed == {} and proc.returncode == 0, (failed, proc.stdout[-3000:])
    for name in ("test_vector_add", "test_host_to_device_bandwidth", "test_device_to_host_bandwidth"):
        assert got[name]["status"] == "pass", (name, got[name])  # run, not skipped for want of libcuda
    figures = [m for r in got.values() for m in r.get("measurements", [])]
    (h2d,) = [m for m in figures if m["name"] == "GPU 0 host->device"]
    assert h2d["floor"] is not None and h2d["measured"] >= h2d["floor"], h2d


@pytest.mark.parametrize(
    ("profile", "fault", "gpu", "marks", "failing"),
    [
        ("l40s-2", "off-bus", 1, "host or gpu or diag", {"test_gpus_match_spec", "test_vector_add"}),
        # the gpu layer sees the link and gates the diag layer; alone, the diag layer sees the copies slow down
        ("l4-1", "pcie-downgrade", 0, "host or gpu or diag", {"test_pcie_link_at_max"}),
        (
            "l4-1",
            "pcie-downgrade",
            0,
            "diag",
            {"test_host_to_device_bandwidth", "test_device_to_host_bandwidth"},
        ),
        (
            "l4-1",
            "slow-gpu",
            0,
            "host or gpu or diag",
            {"test_host_to_device_bandwidth", "test_device_to_host_bandwidth"},
        ),
        # pre-Ampere page retirement (the T4: no host of the session lab has it), recorded by the driver's XID 63
        (
            "t4-1",
            "retired-pages-pending",
            0,
            "host or gpu",
            {"test_no_pending_memory_repairs", "test_no_xid_errors"},
        ),
    ],
)
def test_a_fault_fails_its_checks_naming_the_gpu(
    make_node, mock_library_path, tmp_path, profile, fault, gpu, marks, failing
):
    node = make_node(profile)
    node.inject(fault, gpu)
    node.activate()
    proc = run_local(node, mock_library_path, tmp_path / "report", marks)
    got = checks(tmp_path / "report")
    failed = {name: r["message"] for name, r in got.items() if r["status"] == "fail"}
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert set(failed) == failing, (fault, failed)
    bus = node.hw["gpus"][gpu]["pci_bus_id"][-7:].lower()  # e.g. 61:00.0, as nvidia-smi names a lost GPU
    for name, message in failed.items():
        named = any(f"GPU {gpu}{end}" in message for end in (":", " (")) or bus in message.lower()
        named = named or "CUDA device" in message
        assert message.startswith("gpu-node-1: ") and named, (name, message)


def test_the_device_check_script_runs_here_as_on_a_lent_gpu(make_node, mock_library_path, tmp_path):
    """scripts/device-check.sh, as a lent GPU machine runs it (docs/device-check.md), on the lab's H200 profile:
    it captures the tools' outputs and NVML's answers and runs the host, gpu and diag layers one by one. What it
    found on the real H200 is kept in tests/fixtures/device/; this keeps the script itself working."""
    import json
    import tarfile

    node = make_node("h200-1")
    node.activate()
    env = {**os.environ, **node.env(), "LD_LIBRARY_PATH": mock_library_path, "PYTHON": sys.executable}
    env.setdefault("GPUREADY_LAB_DRIVER_VERSION", "580.178.04")
    script = Path(__file__).resolve().parents[2] / "scripts" / "device-check.sh"
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", str(script), str(out)], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = (out / "summary.txt").read_text()
    assert "gpu layer: exit 0" in summary and "diag layer: exit 0" in summary, summary
    with tarfile.open(out / "device-captures.tar.gz") as tar:
        names = set(tar.getnames())
        probe = json.load(tar.extractfile("captures/nvml-probe.json"))  # type: ignore[arg-type]
    assert {"captures/nvidia-smi-q-x.xml", "captures/MANIFEST.tsv", "report/gpu/verdict.json"} <= names, names
    assert probe["system"]["nvmlDeviceGetCount"] == 1
    assert probe["gpus"][0]["nvmlDeviceGetName"] == "NVIDIA H200"
