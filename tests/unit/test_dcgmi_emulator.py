"""The emulated ``dcgmi`` answers like DCGM 4.x: its ``diag -j`` parses with the project's reader into the tests of
the run level, faults fail the test real DCGM fails, its JSON layout is byte-identical to real captures.

Run as lab hosts run it: the lab's static tools (gpuready/lab/silicon/tools/dcgmi.go) as ``dcgmi``, hardware and
driver state in a temp dir (tests/unit/emulated.py's ``Machine``).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from emulated import Machine

from gpuready.lab import hardware
from gpuready.lab.gobuild import go_problem
from gpuready.lab.silicon import build
from gpuready.nvidia import bandwidth
from gpuready.nvidia.dcgm_diag import DiagError, DiagReport, parse_diag_json

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm-diag"
LEVELS = {
    1: ("software",),
    2: ("software", "memory", "pcie"),
    # document order: categories Deployment, Hardware, Integration, Stress
    3: ("software", "memory", "diagnostic", "pcie", "targeted_stress", "targeted_power", "memory_bandwidth"),
}


class Host(Machine):
    """A lab machine whose tool is dcgmi; the persistence daemon runs unless ``persistence=False``."""

    def __init__(self, tmp: Path, profile: str, *fault: tuple[str, int | None], persistence: bool = True):
        super().__init__(tmp, profile, *fault, persistence=persistence)

    def dcgmi(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return self.run("dcgmi", *args, **env)

    def diag(self, level: int | str, *extra: str, rc: int = 0) -> DiagReport:
        result = self.dcgmi("diag", "-r", str(level), "-j", *extra)
        assert result.returncode == rc, f"rc={result.returncode}\n{result.stdout}\n{result.stderr}"
        return parse_diag_json(result.stdout)


@pytest.mark.parametrize("profile", sorted(hardware.PROFILES))
@pytest.mark.parametrize("level", sorted(LEVELS))
def test_healthy_host_passes_every_level(tmp_path: Path, profile: str, level: int) -> None:
    host = Host(tmp_path, profile)
    report = host.diag(level)
    count = hardware.PROFILES[profile].gpu_count
    assert report.names() == LEVELS[level]
    assert report.level == level
    assert report.dcgm_version == "4.5.2"
    assert report.driver_version == "580.178.04"
    assert report.gpus == tuple(range(count))
    assert [(t.name, t.gpu) for t in report.tests] == [(n, g) for n in LEVELS[level] for g in range(count)]
    assert {t.status for t in report.tests} == {"Pass"}
    assert report.failed() == []


def test_version(tmp_path: Path) -> None:
    result = Host(tmp_path, "l4-1").dcgmi("--version")
    assert result.returncode == 0
    assert "dcgmi  version: 4.5.2" in result.stdout.splitlines()


def test_persistence_mode_off_fails_software_like_real_dcgm(tmp_path: Path) -> None:
    report = Host(tmp_path, "l40s-2", persistence=False).diag(1, rc=226)
    real = parse_diag_json((FIXTURES / "glimmer-burnin__gb10-level1.json").read_text())
    assert [(t.name, t.gpu, t.status) for t in report.failed()] == [
        ("software", 0, "Fail"),
        ("software", 1, "Fail"),
    ]
    # Same wording as the real DCGM 4.2.3 capture, GPU index aside.
    assert report.failed()[0].messages == real.failed()[0].messages


def test_dcgm_memory_fault_fails_memory_on_that_gpu(tmp_path: Path) -> None:
    host = Host(tmp_path, "h100-sxm-8", ("dcgm-memory", 3))
    assert host.diag(1).failed() == []  # level 1 does not run the memory test
    report = host.diag(2, rc=226)
    failed = report.failed()
    assert [(t.name, t.category, t.gpu) for t in failed] == [("memory", "Hardware", 3)]
    assert failed[0].messages == (
        "Found 1 faulty memory elements on GPU 3 Run a field diagnostic on the GPU.",
    )
    assert {t.status for t in report.tests if t.gpu != 3 or t.name != "memory"} == {"Pass"}


@pytest.mark.parametrize("fault", ["slow-gpu", "pcie-downgrade"])
def test_slow_link_fails_pcie_bandwidth(tmp_path: Path, fault: str) -> None:
    host = Host(tmp_path, "a100-80gb-4", (fault, 1))
    assert host.diag(1).failed() == []
    report = host.diag(2, rc=226)
    failed = report.failed()
    assert [(t.name, t.gpu) for t in failed] == [("pcie", 1)]
    assert [m[: len("Bandwidth of GPU 1 in direction d2h")] for m in failed[0].messages[:2]] == [
        "Bandwidth of GPU 1 in direction d2h",
        "Bandwidth of GPU 1 in direction h2d",
    ]
    assert "did not exceed minimum required bandwidth of 15.75." in failed[0].messages[0]
    healthy = next(t for t in report.tests if t.name == "pcie" and t.gpu == 0)
    h2d = float(healthy.messages[1].split()[-2])
    # A healthy emulated GPU clears the project's own floor for its link.
    assert h2d > bandwidth.pcie_floor_gbps(4, 16)


@pytest.mark.parametrize("fault", ["off-bus", "xid-79"])
def test_gpu_off_the_bus_is_not_in_the_run(tmp_path: Path, fault: str) -> None:
    host = Host(tmp_path, "a100-80gb-4", (fault, 2))
    report = host.diag(2)
    assert report.gpus == (0, 1, 3)
    assert {t.gpu for t in report.tests} == {0, 1, 3}
    result = host.dcgmi("diag", "-r", "1", "-j", "-i", "2")
    assert result.returncode == 238
    with pytest.raises(DiagError, match="GPU is lost"):
        parse_diag_json(result.stdout)


def test_entity_selection(tmp_path: Path) -> None:
    report = Host(tmp_path, "h100-sxm-8").diag(2, "-i", "gpu:1,6")
    assert report.gpus == (1, 6)
    assert {t.gpu for t in report.tests} == {1, 6}
    result = Host(tmp_path, "h100-sxm-8").dcgmi("diag", "-r", "1", "-i", "9")
    assert result.returncode == 255
    assert "Invalid entity id '9'" in result.stdout


def test_named_tests(tmp_path: Path) -> None:
    report = Host(tmp_path, "l4-1").diag("memory,pcie")
    assert report.names() == ("memory", "pcie")


def test_driver_mismatch_means_no_hostengine(tmp_path: Path) -> None:
    result = Host(tmp_path, "l4-1", ("driver-mismatch", None)).dcgmi("diag", "-r", "1", "-j")
    assert result.returncode == 235
    assert result.stdout == (
        "Error: unable to establish a connection to the specified host: localhost\n"
        "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
    )
    with pytest.raises(DiagError, match="nv-hostengine is not reachable"):
        parse_diag_json(result.stdout)


def test_stopped_hostengine(tmp_path: Path) -> None:
    host = Host(tmp_path, "l4-1")
    result = host.dcgmi(
        "diag", "-r", "1", "-j", GPUREADY_LAB_HOSTENGINE_PID=str(tmp_path / "nv-hostengine.pid")
    )
    assert result.returncode == 235
    assert result.stdout.startswith("Error: unable to establish a connection")


def test_table_output(tmp_path: Path) -> None:
    host = Host(tmp_path, "a100-80gb-4", ("dcgm-memory", 2))
    result = host.dcgmi("diag", "-r", "2")
    assert result.returncode == 226
    lines = result.stdout.splitlines()
    assert lines[:6] == [
        "Successfully ran diagnostic for group.",
        "+---------------------------+------------------------------------------------+",
        "| Diagnostic                | Result                                         |",
        "+===========================+================================================+",
        "|-----  Metadata  ----------+------------------------------------------------|",
        "| DCGM Version              | 4.5.2                                          |",
    ]
    assert "| GPU Device IDs Detected   | 20b2, 20b2, 20b2, 20b2                         |" in lines
    assert "+-----  Hardware  ----------+------------------------------------------------+" in lines
    assert "| memory                    | Fail                                           |" in lines
    assert "|                           | GPU2: Fail                                     |" in lines
    assert all(len(line) == 78 for line in lines[1:])
    with pytest.raises(DiagError):
        parse_diag_json(result.stdout)


def test_usage_errors(tmp_path: Path) -> None:
    host = Host(tmp_path, "l4-1")
    for args in (("diag",), ("diag", "-r", "7"), ("diag", "-r", "1", "--bogus"), ("discovery", "-l")):
        result = host.dcgmi(*args)
        assert result.returncode == 255, args
        assert result.stderr.startswith("Error: ")


def test_json_layout_is_byte_identical_to_real_dcgmi() -> None:
    """The static tools' JSON writer (silicon/tools/jsoncpp.go), given a real document's data, reproduces the real
    bytes (jsoncpp's layout): its Go test reads the captures in tests/fixtures/dcgm-diag."""
    problem = go_problem()
    if problem:
        pytest.skip(f"the lab's static tools are built with Go: {problem}")
    result = subprocess.run(
        ["go", "test", "-count=1", "-run", "^TestStyledJSONWritesDCGMDocuments$", "./tools"],
        cwd=build.SILICON,
        env={**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no tests to run" not in result.stdout


def test_emulated_document_has_the_real_key_sets(tmp_path: Path) -> None:
    real = json.loads((FIXTURES / "glimmer-burnin__gb10-level2-plugins-allowed.json").read_text())
    result = Host(tmp_path, "l4-1").dcgmi("diag", "-r", "2", "-j")
    emulated = json.loads(result.stdout)
    assert emulated.keys() == real.keys()
    assert emulated["metadata"].keys() == real["metadata"].keys()
    assert (
        emulated["entity_groups"][0]["entities"][0].keys() == real["entity_groups"][0]["entities"][0].keys()
    )
    real_tests = [t for c in real["DCGM Diagnostic"]["test_categories"] for t in c["tests"]]
    emu_tests = [t for c in emulated["DCGM Diagnostic"]["test_categories"] for t in c["tests"]]
    assert [(t["name"]) for t in emu_tests] == [t["name"] for t in real_tests]
    for emu, ref in zip(emu_tests[1:], real_tests[1:], strict=True):  # memory and pcie: info + status
        assert emu["results"][0].keys() == ref["results"][0].keys()
        assert len(emu["results"][0]["info"]) == len(ref["results"][0]["info"])


def test_link_table_matches_the_floors_module() -> None:
    """Package machine's PCIe lane rates (silicon/machine/bandwidth.go: the copy model and dcgmi's pcie test) are
    the project's own theoretical rates (gpuready.nvidia.bandwidth)."""
    source = (build.SILICON / "machine" / "bandwidth.go").read_text()
    table = re.search(r"var pcieLaneGBps = map\[int\]float64\{(.*?)\n\}", source, re.S)
    assert table, "bandwidth.go has no pcieLaneGBps table"
    lanes = {
        int(gen): _arithmetic(expr)
        for gen, expr in re.findall(r"^\s*(\d+):\s*([^,]+),", table.group(1), re.M)
    }
    assert lanes == pytest.approx({g: bandwidth.pcie_theoretical_gbps(g, 1) for g in range(1, 7)})


def _arithmetic(expr: str) -> float:
    """A Go constant expression of numbers, * and / (the table's entries) as a float."""
    node = ast.parse(expr.strip(), mode="eval").body

    def value(n: ast.expr) -> float:
        if isinstance(n, ast.Constant) and isinstance(n.value, int | float):
            return float(n.value)
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult | ast.Div):
            left, right = value(n.left), value(n.right)
            return left * right if isinstance(n.op, ast.Mult) else left / right
        raise AssertionError(f"not a plain arithmetic expression: {expr!r}")

    return value(node)
