"""The lab's emulated ``nvbandwidth`` prints the real ``-j`` document, read back by the project's parser, with
figures from the hardware file: healthy ones near 85% of the current PCIe link and 80% of NVLink, and each fault
changing exactly the figures it should.

Run as lab hosts run it: the static tools' ELF under its name, hardware and driver state in a
temp dir (tests/unit/emulated.py's ``Machine``).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import emulated
import pytest

from gpuready.nvidia.nvbandwidth import NVBANDWIDTH_COMMAND, BandwidthReport, parse_nvbandwidth_json

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "nvbandwidth" / "dcgm__verbose-full-output.json"
ARGS = shlex.split(NVBANDWIDTH_COMMAND)[1:]

# Theoretical unidirectional GB/s of an x16 link (128b/130b), written out independently of the emulator.
GEN5_X16, GEN4_X16, GEN3_X8 = 63.015, 31.508, 7.877
SPREAD = 0.0101  # the emulator's deterministic +-1% per figure


class Machine(emulated.Machine):
    """A lab machine whose tool is nvbandwidth; Fabric Manager runs unless ``fabric_up=False``."""

    def __init__(self, tmp: Path, profile: str, *faults: tuple[str, int | None], fabric_up: bool = True):
        super().__init__(tmp, profile, *faults, fabric_up=fabric_up)

    def nvbandwidth(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run("nvbandwidth", *args)

    def report(self, *args: str) -> BandwidthReport:
        result = self.nvbandwidth(*(args or ARGS))
        assert result.returncode == 0, f"rc={result.returncode}\n{result.stdout}\n{result.stderr}"
        return parse_nvbandwidth_json(result.stdout)


def near(value: float, expected: float) -> bool:
    return abs(value / expected - 1) <= SPREAD


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path


# ---- healthy machines ------------------------------------------------------------------------------
def test_h100_sxm_8_healthy(tmp: Path) -> None:
    report = Machine(tmp, "h100-sxm-8").report()
    assert report.errors == () and report.waived == ()
    assert report.driver_version == "580.178.04"
    assert sorted(report.host_to_device) == sorted(report.device_to_host) == list(range(8))
    assert all(
        near(v, GEN5_X16 * 0.85) for v in [*report.host_to_device.values(), *report.device_to_host.values()]
    )
    # NVSwitch: every ordered pair over all 18 links at 26.562 GB/s, 80% of it
    assert sorted(report.peer) == [(a, b) for a in range(8) for b in range(8) if a != b]
    assert all(near(v, 18 * 26.562 * 0.8) for v in report.peer.values())
    assert report.devices[3].startswith("3: NVIDIA H100 80GB HBM3 (00000000:5d:00): (")


def test_a100_80gb_4_healthy(tmp: Path) -> None:
    report = Machine(tmp, "a100-80gb-4").report()
    assert report.errors == ()
    assert all(
        near(v, GEN4_X16 * 0.85) for v in [*report.host_to_device.values(), *report.device_to_host.values()]
    )
    # no NVSwitch: 12 links shared by 3 peers, NV4 per pair as `nvidia-smi topo -m` shows
    assert len(report.peer) == 12
    assert all(near(v, 4 * 25 * 0.8) for v in report.peer.values())


def test_l4_1_healthy(tmp: Path) -> None:
    report = Machine(tmp, "l4-1").report()
    assert report.errors == ()
    assert list(report.host_to_device) == [0] and near(report.host_to_device[0], GEN4_X16 * 0.85)
    assert near(report.device_to_host[0], GEN4_X16 * 0.85)
    # one GPU: nvbandwidth waives the device-to-device testcase
    assert report.peer == {} and report.waived == ("device_to_device_memcpy_read_ce",)


def test_figures_are_deterministic_and_differ_per_gpu(tmp: Path) -> None:
    machine = Machine(tmp, "h100-sxm-8")
    first, second = machine.nvbandwidth(*ARGS), machine.nvbandwidth(*ARGS)
    assert first.stdout == second.stdout
    report = parse_nvbandwidth_json(first.stdout)
    assert len(set(report.host_to_device.values())) == 8
    assert report.host_to_device != report.device_to_host


# ---- faults: exactly the figures they should change -----------------------------------------------
def test_pcie_downgrade_lowers_that_gpus_host_copies_only(tmp: Path) -> None:
    healthy = Machine(tmp / "a", "h100-sxm-8").report()
    faulty = Machine(tmp / "b", "h100-sxm-8", ("pcie-downgrade", 2)).report()
    # nvidia-smi's current link under the fault: two generations down, half the width (Gen3 x8)
    assert near(faulty.host_to_device[2], GEN3_X8 * 0.85)
    assert near(faulty.device_to_host[2], GEN3_X8 * 0.85)
    assert {k: v for k, v in faulty.host_to_device.items() if k != 2} == {
        k: v for k, v in healthy.host_to_device.items() if k != 2
    }
    assert {k: v for k, v in faulty.device_to_host.items() if k != 2} == {
        k: v for k, v in healthy.device_to_host.items() if k != 2
    }
    assert faulty.peer == healthy.peer  # peer copies go over NVSwitch


def test_slow_gpu_is_at_40_percent_in_every_figure_it_is_in(tmp: Path) -> None:
    healthy = Machine(tmp / "a", "a100-80gb-4").report()
    faulty = Machine(tmp / "b", "a100-80gb-4", ("slow-gpu", 1)).report()
    for figures_h, figures_f in (
        (healthy.host_to_device, faulty.host_to_device),
        (healthy.device_to_host, faulty.device_to_host),
    ):
        assert figures_f[1] == pytest.approx(figures_h[1] * 0.4, rel=1e-5)
        assert {k: v for k, v in figures_f.items() if k != 1} == {
            k: v for k, v in figures_h.items() if k != 1
        }
    for pair, value in healthy.peer.items():
        if 1 in pair:
            assert faulty.peer[pair] == pytest.approx(value * 0.4, rel=1e-5)
        else:
            assert faulty.peer[pair] == value


def test_nvlink_down_sends_that_gpus_peer_copies_over_pcie(tmp: Path) -> None:
    healthy = Machine(tmp / "a", "h100-sxm-8").report()
    faulty = Machine(tmp / "b", "h100-sxm-8", ("nvlink-down", 0)).report()
    assert faulty.host_to_device == healthy.host_to_device
    assert faulty.device_to_host == healthy.device_to_host
    for pair, value in healthy.peer.items():
        if 0 not in pair:
            assert faulty.peer[pair] == value
        elif max(pair) <= 3:  # GPUs 0-3 share NUMA node 0: PCIe peer copy, 80% of Gen5 x16
            assert near(faulty.peer[pair], GEN5_X16 * 0.8)
        else:  # across the CPU interconnect no peer access: N/A, so no figure
            assert pair not in faulty.peer


@pytest.mark.parametrize("fault", ["off-bus", "xid-79"])
def test_gpu_off_the_bus_is_not_a_cuda_device(tmp: Path, fault: str) -> None:
    healthy = Machine(tmp / "a", "h100-sxm-8").report()
    faulty = Machine(tmp / "b", "h100-sxm-8", (fault, 3)).report()
    # CUDA counts 7 devices; the GPUs after the lost one move up an ordinal
    expected = [v for k, v in sorted(healthy.host_to_device.items()) if k != 3]
    assert [faulty.host_to_device[k] for k in range(7)] == expected
    assert sorted(faulty.host_to_device) == list(range(7))
    assert len(faulty.devices) == 7 and not any(":5d:00" in d for d in faulty.devices)
    assert len(faulty.peer) == 7 * 6


def test_every_gpu_off_the_bus_is_no_cuda_device(tmp: Path) -> None:
    result = Machine(tmp, "l4-1", ("off-bus", 0)).nvbandwidth(*ARGS)
    assert result.returncode == 1
    report = parse_nvbandwidth_json(result.stdout)
    assert report.host_to_device == {} and len(report.errors) == 1
    assert report.errors[0].startswith(
        "nvbandwidth: [CUDA_ERROR_NO_DEVICE] no CUDA-capable device is detected"
    )


@pytest.mark.parametrize("fault", ["ecc-uncorrectable", "row-remap-pending", "dcgm-memory", "xid-48"])
def test_faults_a_copy_does_not_see_change_nothing(tmp: Path, fault: str) -> None:
    healthy = Machine(tmp / "a", "a100-80gb-4").nvbandwidth(*ARGS).stdout
    assert Machine(tmp / "b", "a100-80gb-4", (fault, 2)).nvbandwidth(*ARGS).stdout == healthy


def test_driver_mismatch_is_the_cuinit_error_and_exit_1(tmp: Path) -> None:
    machine = Machine(tmp, "a100-80gb-4", ("driver-mismatch", None))
    result = machine.nvbandwidth(*ARGS)
    assert result.returncode == 1
    report = parse_nvbandwidth_json(result.stdout)
    assert report.errors == (
        "nvbandwidth: [CUDA_ERROR_SYSTEM_DRIVER_MISMATCH] system has unsupported display driver / cuda driver "
        "combination in expression cuInit(0) in int main(int, char**)() : /opt/nvbandwidth/nvbandwidth.cpp:270",
    )
    assert report.testcases == () and report.driver_version is None
    # without -j the CU_ASSERT message goes to stderr
    plain = machine.nvbandwidth("-t", "host_to_device_memcpy_ce")
    assert plain.returncode == 1
    assert plain.stderr.startswith("[CUDA_ERROR_SYSTEM_DRIVER_MISMATCH]")
    assert plain.stdout.startswith("nvbandwidth Version: v0.8\n")


def test_kernel_module_and_library_versions_disagreeing_is_the_same_error(tmp: Path) -> None:
    machine = Machine(tmp, "l4-1")
    assert machine.nvbandwidth(*ARGS).returncode == 0
    # the driver's first user loads the 580.178.04 module (nvemu records it; the mock libraries only read it)
    assert machine.run("nvidia-smi", "-L").returncode == 0
    machine.env["GPUREADY_LAB_DRIVER_VERSION"] = "580.105.08"  # library upgraded, module still the old one
    # (the variable sets both versions; the loaded module is what the state file remembers)
    result = machine.nvbandwidth(*ARGS)
    assert result.returncode == 1
    assert "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH" in parse_nvbandwidth_json(result.stdout).errors[0]


def test_nvswitch_fabric_not_up_is_system_not_ready(tmp: Path) -> None:
    result = Machine(tmp, "h100-sxm-8", fabric_up=False).nvbandwidth(*ARGS)
    assert result.returncode == 1
    assert (
        parse_nvbandwidth_json(result.stdout)
        .errors[0]
        .startswith(
            "nvbandwidth: [CUDA_ERROR_SYSTEM_NOT_READY] system not yet initialized in expression cuInit(0)"
        )
    )


# ---- the command line and the document ---------------------------------------------------------------
def test_testcases_by_index_equal_by_name(tmp: Path) -> None:
    machine = Machine(tmp, "a100-80gb-4")
    assert machine.nvbandwidth("-j", "-t", "0", "1", "4").stdout == machine.nvbandwidth(*ARGS).stdout


def test_second_t_is_invalid_arguments_as_in_boost(tmp: Path) -> None:
    result = Machine(tmp, "l4-1").nvbandwidth(
        "-j", "-t", "host_to_device_memcpy_ce", "-t", "device_to_host_memcpy_ce"
    )
    assert result.returncode == 1
    assert "ERROR: Invalid Arguments" in result.stdout and "-t [ --testcase ] arg" in result.stdout


def test_unknown_testcase_is_an_error_entry(tmp: Path) -> None:
    result = Machine(tmp, "l4-1").nvbandwidth("-j", "-t", "host_to_device_memcpy_ce", "no_such_case", "99")
    assert result.returncode == 0
    report = parse_nvbandwidth_json(result.stdout)
    assert report.errors == (
        "no_such_case: not a testcase of this nvbandwidth",
        "99: not a testcase of this nvbandwidth",
    )
    assert list(report.host_to_device) == [0]


@pytest.mark.parametrize("args", [[], ["-j"], ["-j", "-t", "device_local_copy"], ["-l"]])
def test_what_is_not_emulated_says_so(tmp: Path, args: list[str]) -> None:
    result = Machine(tmp, "l4-1").nvbandwidth(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "not emulated" in result.stderr


def test_document_has_the_shape_of_the_real_capture(tmp: Path) -> None:
    real = json.loads(FIXTURE.read_text(encoding="utf-8"))["nvbandwidth"]
    text = Machine(tmp, "h100-sxm-8").nvbandwidth("-j", "-v", "-t", *ARGS[2:]).stdout
    emulated = json.loads(text)["nvbandwidth"]
    # v0.8 added the device list; everything else at the top is what v0.5 printed
    assert set(emulated) == set(real) | {"GPU Device list"}
    real_passed = next(t for t in real["testcases"] if t["status"] == "Passed")
    assert all(set(t) == set(real_passed) for t in emulated["testcases"])
    assert isinstance(emulated["CUDA Runtime Version"], int) and emulated["CUDA Runtime Version"] == 13000
    # jsoncpp's styled writer: tab indents, `"key" : ` and the nested value on the next line, trailing blank line
    assert text.startswith('{\n\t"nvbandwidth" : \n\t{\n\t\t"CUDA Runtime Version" : 13000,\n')
    assert text.endswith("\n\t}\n}\n\n")
    peer = next(t for t in emulated["testcases"] if t["name"] == "device_to_device_memcpy_read_ce")
    assert [row[i] for i, row in enumerate(peer["bandwidth_matrix"])] == ["N/A"] * 8
    assert peer["min"] == 0.0  # nvbandwidth folds the N/A diagonal into min as 0
    assert peer["sum"] == pytest.approx(
        sum(float(c) for row in peer["bandwidth_matrix"] for c in row if c != "N/A"), rel=1e-5
    )


def test_plain_text_output(tmp: Path) -> None:
    result = Machine(tmp, "l4-1").nvbandwidth(
        "-t", "host_to_device_memcpy_ce", "device_to_device_memcpy_read_ce"
    )
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[:2] == ["nvbandwidth Version: v0.8", "Built from Git version: v0.8"]
    assert "Device 0: NVIDIA L4 (00000000:00:03)" in lines
    at = lines.index("Running host_to_device_memcpy_ce.")
    assert lines[at + 1] == "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)"
    assert lines[at + 2] == "           0"
    row = lines[at + 3]
    label, value = row.split()
    assert row.startswith(" 0") and len(row) == 12 and label == "0" and near(float(value), GEN4_X16 * 0.85)
    assert lines[at + 5] == f"SUM host_to_device_memcpy_ce {value}"
    assert "Waived: " in lines
