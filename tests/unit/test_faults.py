"""Every lab fault shows up in the emulated tools the way it does on real hardware, and bad requests are refused."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from static_tools import static_tools

from gpuready.lab import faults, hardware
from gpuready.nvidia import smi


class Host:
    def __init__(self, tmp: Path, profile: str, *inject: tuple[str, int | None]):
        self.tmp = tmp
        hw = hardware.make_hardware(profile, 0)
        for fault, gpu in inject:
            hw = faults.apply_fault(hw, fault, gpu)
        self.hw = hw
        hardware.write_hardware(tmp / "hardware.json", hw)
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GPUREADY_LAB_HARDWARE": str(tmp / "hardware.json"),
            "GPUREADY_LAB_STATE": str(tmp / "state.json"),
            "GPUREADY_LAB_BOOT_ID": "boot-1",
            "GPUREADY_LAB_DRIVER_VERSION": "580.178.04",
            "GPUREADY_LAB_PERSISTENCED_PID": str(tmp / "persistenced.pid"),
            "GPUREADY_LAB_FABRICMANAGER_PID": str(tmp / "fm.pid"),
        }

    def run(self, *args: str, tool: str = "nvidia-smi") -> subprocess.CompletedProcess:
        """Run the static tools' ``tool`` (nvidia-smi, nv-fabricmanager, nvidia-persistenced)."""
        return subprocess.run(
            [static_tools(), tool, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
        )

    def csv(self, *fields: str) -> list[dict]:
        result = self.run(f"--query-gpu={','.join(fields)}", "--format=csv")
        return smi.parse_query_gpu_csv(result.stdout, list(fields))


def test_fault_names_and_descriptions() -> None:
    assert set(faults.FAULTS) == {
        "off-bus",
        "xid-79",
        "xid-48",
        "ecc-uncorrectable",
        "row-remap-pending",
        "retired-pages-pending",
        "pcie-downgrade",
        "nvlink-down",
        "fabricmanager-failed",
        "driver-mismatch",
        "slow-gpu",
        "dcgm-memory",
    }
    assert all(f.description and "\n" not in f.description for f in faults.FAULTS.values())


def test_apply_and_clear_return_new_dicts() -> None:
    hw = hardware.make_hardware("h100-sxm-8", 0)
    faulty = faults.apply_fault(hw, "xid-79", 3)
    assert hw["faults"] == []

    def line(name: str, gpu: int | None) -> dict:
        return {"fault": name, "gpu": gpu, "effects": faults.FAULTS[name].effects.as_dict()}

    assert faulty["faults"] == [line("xid-79", 3)]
    assert faults.apply_fault(faulty, "xid-79", 3)["faults"] == faulty["faults"]
    assert faults.apply_fault(hw, "ecc-uncorrectable", None)["faults"] == [line("ecc-uncorrectable", 0)]
    assert faults.apply_fault(hw, "driver-mismatch", None)["faults"] == [line("driver-mismatch", None)]
    assert faults.clear_faults(faulty)["faults"] == []
    assert faulty["faults"] != []


@pytest.mark.parametrize(
    ("profile", "fault", "gpu", "message"),
    [
        ("h100-sxm-8", "melted", 0, "unknown fault 'melted'"),
        ("h100-sxm-8", "xid-79", 8, "GPU 8 does not exist on this host (GPUs 0-7)"),
        ("t4-1", "off-bus", -1, "GPU -1 does not exist"),
        ("t4-1", "nvlink-down", 0, "needs nvlink"),
        ("l4-1", "fabricmanager-failed", None, "needs an NVSwitch system"),
        ("h100-sxm-8", "driver-mismatch", 2, "affects the whole host"),
        ("h100-sxm-8", "retired-pages-pending", 0, "needs page retirement"),
        ("t4-1", "row-remap-pending", 0, "needs row remapping"),
    ],
)
def test_bad_fault_requests_are_refused_clearly(
    profile: str, fault: str, gpu: int | None, message: str
) -> None:
    with pytest.raises(faults.FaultError, match=re.escape(message)):
        faults.apply_fault(hardware.make_hardware(profile, 0), fault, gpu)


def test_journal_lines_use_the_kernel_format() -> None:
    hw = hardware.make_hardware("h100-sxm-8", 0)
    assert faults.journal_messages(hw, "xid-79", 0) == [
        "NVRM: Xid (PCI:0000:18:00): 79, pid=0, name=, GPU has fallen off the bus.",
        "NVRM: The NVIDIA GPU 0000:18:00.0",
        "NVRM: (PCI ID: 10de:2330) installed in this system has",
        "NVRM: fallen off the bus and is not responding to commands.",
    ]
    (xid48,) = faults.journal_messages(hw, "xid-48", 1)
    assert xid48 == (
        "NVRM: Xid (PCI:0000:2a:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) "
        "has been detected on GPU (0000:2a:00)."
    )
    assert faults.journal_messages(hw, "pcie-downgrade", 0) == []
    assert faults.journal_messages(hw, "driver-mismatch", None) == []


def test_off_bus_gpu_is_unreachable(tmp_path: Path) -> None:
    host = Host(tmp_path, "a100-80gb-4", ("off-bus", 1))
    listed = host.run("-L")
    assert listed.returncode == 15
    lines = listed.stdout.splitlines()
    assert lines[1] == "Unable to determine the device handle for GPU0000:0F:00.0: Unknown Error"
    assert lines[0].startswith("GPU 0: NVIDIA A100-SXM4-80GB") and lines[2].startswith("GPU 2:")
    query = host.run("-q", "-x")
    assert query.returncode == 15
    # the lost GPU's line goes to stderr: the reader is told how many GPUs nvidia-smi could not reach
    report = smi.parse_query_xml(query.stdout, unlisted=len(smi.LOST_GPU.findall(query.stderr)))
    assert report.attached_gpus == 4
    assert [g.pci_bus_id for g in report.gpus] == ["00000000:07:00.0", "00000000:47:00.0", "00000000:4E:00.0"]


def test_all_gpus_off_the_bus(tmp_path: Path) -> None:
    host = Host(tmp_path, "l40s-2", ("xid-79", 0), ("off-bus", 1))
    for args in ((), ("-L",), ("-q", "-x"), ("--query-gpu=index", "--format=csv")):
        result = host.run(*args)
        assert (result.returncode, result.stdout) == (6, "No devices were found\n"), args


def test_ecc_faults_count_uncorrectable_errors(tmp_path: Path) -> None:
    host = Host(tmp_path, "h100-sxm-8", ("ecc-uncorrectable", 2), ("xid-48", 5))
    rows = host.csv(
        "index", "ecc.errors.uncorrected.volatile.total", "ecc.errors.uncorrected.aggregate.total"
    )
    assert [r["ecc.errors.uncorrected.volatile.total"] for r in rows] == [0, 0, 2, 0, 0, 1, 0, 0]
    report = smi.parse_query_xml(host.run("-q", "-x").stdout)
    assert [g.ecc_uncorrectable_aggregate for g in report.gpus] == [0, 0, 2, 0, 0, 1, 0, 0]
    table = host.run().stdout.splitlines()
    assert table[16].endswith("|                    2 |")


def test_row_remap_pending(tmp_path: Path) -> None:
    host = Host(tmp_path, "a100-80gb-4", ("row-remap-pending", 0))
    gpu0, gpu1 = smi.parse_query_xml(host.run("-q", "-x").stdout).gpus[:2]
    assert gpu0.remapped_rows is not None and gpu0.remapped_rows.pending is True
    assert gpu0.remapped_rows.uncorrectable == 1
    assert gpu1.remapped_rows is not None and gpu1.remapped_rows.pending is False
    rows = host.csv("index", "remapped_rows.pending", "remapped_rows.uncorrectable")
    assert [r["remapped_rows.pending"] for r in rows] == ["Yes", "No", "No", "No"]


def test_retired_pages_pending_on_a_t4(tmp_path: Path) -> None:
    host = Host(tmp_path, "t4-1", ("retired-pages-pending", 0))
    (gpu,) = smi.parse_query_xml(host.run("-q", "-x").stdout).gpus
    assert (gpu.retired_pages_double_bit, gpu.retired_pages_pending) == (1, True)
    text = host.run("-q", "-d", "PAGE_RETIREMENT").stdout
    assert "        Double Bit ECC" in text and text.rstrip().endswith(": Yes")


def test_pcie_downgrade(tmp_path: Path) -> None:
    host = Host(tmp_path, "h100-sxm-8", ("pcie-downgrade", 7))
    fields = (
        "index",
        "pcie.link.gen.current",
        "pcie.link.gen.max",
        "pcie.link.width.current",
        "pcie.link.width.max",
    )
    rows = host.csv(*fields)
    assert [tuple(rows[i][f] for f in fields[1:]) for i in (0, 7)] == [(5, 5, 16, 16), (3, 5, 8, 16)]


def test_nvlink_down(tmp_path: Path) -> None:
    host = Host(tmp_path, "h100-sxm-8", ("nvlink-down", 4))
    out = host.run("nvlink", "-s").stdout
    assert "NVML: Unable to retrieve NVLink information as all links are inActive" in out
    report = {gpu.index: gpu for gpu in smi.parse_nvlink_report(out)}
    assert len(report[0].links) == 18
    assert report[4].links == ()
    assert report[4].messages == ("NVML: Unable to retrieve NVLink information as all links are inActive",)
    topo = host.run("topo", "-m").stdout.splitlines()
    assert topo[1].split("\t")[5] != "NV18"


def test_fabricmanager_failed(tmp_path: Path) -> None:
    host = Host(tmp_path, "h100-sxm-8", ("fabricmanager-failed", None))
    cfg = tmp_path / "fm.cfg"
    log = tmp_path / "fabricmanager.log"
    cfg.write_text(f"LOG_FILE_NAME={log}\nLOG_LEVEL=4\n")
    result = host.run("-c", str(cfg), tool="nv-fabricmanager")
    assert result.returncode == 1
    text = log.read_text()
    assert "[ERROR]" in text and "fabric manager initialization failed" in text
    assert text.splitlines()[0].startswith("[") and "] [INFO] [tid " in text.splitlines()[0]
    report = smi.parse_query_xml(host.run("-q", "-x").stdout)
    assert {g.fabric_state for g in report.gpus} == {"In Progress"}


def test_fabric_completed_while_fabricmanager_runs(tmp_path: Path) -> None:
    host = Host(tmp_path, "h100-sxm-8")
    Path(host.env["GPUREADY_LAB_FABRICMANAGER_PID"]).write_text(f"{os.getpid()}\n")
    report = smi.parse_query_xml(host.run("-q", "-x").stdout)
    assert {(g.fabric_state, g.fabric_status) for g in report.gpus} == {("Completed", "Success")}


def test_driver_mismatch(tmp_path: Path) -> None:
    host = Host(tmp_path, "l4-1", ("driver-mismatch", None))
    for args in (("-L",), ("-q", "-x"), ("mig", "-lgi"), ("nvlink", "-s")):
        result = host.run(*args)
        assert (result.returncode, result.stdout) == (
            18,
            "Failed to initialize NVML: Driver/library version mismatch\n",
        )
    persistenced = host.run("--foreground", tool="nvidia-persistenced")
    assert persistenced.returncode == 1
    assert "nvidia-persistenced failed to initialize" in persistenced.stderr
