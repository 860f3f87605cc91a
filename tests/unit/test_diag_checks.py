"""The diag layer's checks judge what the lab's emulated nvbandwidth and dcgmi print: a healthy node passes with
its figures, and each fault fails exactly the check that should catch it, with measured value, floor and unit."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import pytest
from emulated import Machine

from gpuready.conformance.checks import CannotCheck, Output, diag
from gpuready.nvidia.nvbandwidth import NVBANDWIDTH_COMMAND
from gpuready.spec import Diag

REPO = Path(__file__).resolve().parents[2]


def measured(tmp: Path, *fault: tuple[str, int | None], level: int = 2) -> tuple[Output, Output]:
    machine = Machine(tmp, "h100-sxm-8", *fault, persistence=True, fabric_up=True)
    copies = machine.run("nvbandwidth", *shlex.split(NVBANDWIDTH_COMMAND)[1:])
    dcgm = machine.run("dcgmi", "diag", "-r", str(level), "-j")
    return Output(copies.returncode, copies.stdout, copies.stderr), Output(
        dcgm.returncode, dcgm.stdout, dcgm.stderr
    )


def test_healthy_h100_node_passes_with_its_figures(tmp_path, h100):
    copies, dcgm = measured(tmp_path)
    for check in (diag.host_to_device, diag.device_to_host, diag.peer):
        problems, figures = check(h100, copies)
        assert problems == [], check.__name__
        lowest = figures[-1]
        assert lowest.name.startswith("lowest ") and lowest.unit == "GB/s"
        assert lowest.floor is not None and lowest.measured >= lowest.floor
    h2d = diag.host_to_device(h100, copies)[1]
    assert [m.name for m in h2d[:-1]] == [f"GPU {i} host->device" for i in range(8)]
    assert len(diag.peer(h100, copies)[1]) == 8 * 7 + 1
    assert diag.dcgm(h100, dcgm) == []


def test_pcie_downgrade_fails_the_host_copies_of_that_gpu_only(tmp_path, h100):
    copies, _ = measured(tmp_path, ("pcie-downgrade", 2))
    for check, what in ((diag.host_to_device, "host->device"), (diag.device_to_host, "device->host")):
        problems, _ = check(h100, copies)
        assert len(problems) == 1 and problems[0].startswith(f"GPU 2: {what} "), problems
        assert "GB/s < floor" in problems[0]
    assert diag.peer(h100, copies)[0] == []


def test_slow_gpu_fails_every_copy_involving_it(tmp_path, h100):
    copies, _ = measured(tmp_path, ("slow-gpu", 1))
    assert [p.split(":")[0] for p in diag.host_to_device(h100, copies)[0]] == ["GPU 1"]
    assert [p.split(":")[0] for p in diag.device_to_host(h100, copies)[0]] == ["GPU 1"]
    peer = diag.peer(h100, copies)[0]
    assert len(peer) == 2 * 7 and all("GPU 1" in p for p in peer)


def test_nvlink_down_fails_only_the_peer_copies(tmp_path, h100):
    copies, _ = measured(tmp_path, ("nvlink-down", 3))
    assert diag.host_to_device(h100, copies)[0] == diag.device_to_host(h100, copies)[0] == []
    peer = diag.peer(h100, copies)[0]
    assert peer and all("GPU 3" in p for p in peer)


def test_dcgm_memory_failure_is_named(tmp_path, h100):
    copies, dcgm = measured(tmp_path, ("dcgm-memory", 5))
    problems = diag.dcgm(h100, dcgm)
    assert len(problems) == 1 and problems[0].startswith("GPU 5: DCGM memory Fail"), problems
    assert diag.host_to_device(h100, copies)[0] == []


def test_level_1_does_not_run_the_memory_test(tmp_path, h100):
    _, dcgm = measured(tmp_path, ("dcgm-memory", 5), level=1)
    assert diag.dcgm(h100, dcgm) == []


def test_inventory_floor_override(tmp_path, h100):
    copies, _ = measured(tmp_path)
    strict = dataclasses.replace(h100, diag=Diag(floors={"h2d_gbps": 60.0}))
    problems, figures = diag.host_to_device(strict, copies)
    assert len(problems) == 8 and figures[-1].floor == 60.0


def test_missing_tools_and_mig_are_skips_with_the_reason(fleet, h100):
    absent = Output(0, f"{diag.NO_TOOL} nvbandwidth\n", "")
    with pytest.raises(CannotCheck, match="nvbandwidth is not installed"):
        diag.host_to_device(h100, absent)
    with pytest.raises(CannotCheck, match="DCGM"):
        diag.dcgm(h100, Output(0, f"{diag.NO_TOOL} dcgmi\n", ""))
    mig = fleet.nodes["gpu-infer-a100-01.prod.example.com"]
    with pytest.raises(CannotCheck, match="MIG"):
        diag.host_to_device(mig, Output(0, '{"nvbandwidth": {"testcases": []}}', ""))


def test_a_failing_tool_is_a_problem_not_a_skip(tmp_path, h100):
    machine = Machine(tmp_path, "h100-sxm-8", ("driver-mismatch", None), fabric_up=True)
    out = machine.run("nvbandwidth", *shlex.split(NVBANDWIDTH_COMMAND)[1:])
    problems, figures = diag.host_to_device(h100, Output(out.returncode, out.stdout, out.stderr))
    assert figures == [] and len(problems) == 1 and "CUDA_ERROR" in problems[0], problems


def test_dcgmi_that_cannot_run_is_a_problem(h100):
    # what dcgmi prints when nv-hostengine is not running
    out = Output(235, "Error: unable to establish a connection to the specified host: localhost\n", "")
    (problem,) = diag.dcgm(h100, out)
    assert problem.startswith("dcgmi diag -r 1 did not run (exit 235): ")
