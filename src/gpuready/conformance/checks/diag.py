"""Diag layer checks: copy bandwidth against per-model floors, and DCGM's diagnostics.

vectorAdd proves that a GPU computes; these catch the GPU that moves data slowly (a link trained down, a degraded
NVLink, a throttled board) and the one with a failing memory test. Bandwidth comes from one JSON document in
``nvbandwidth -j``'s format: NVIDIA's ``nvbandwidth`` on the node over SSH, or ``python -m gpuready.conformance.cuda.bandwidth``
(the CUDA driver API, no toolkit) with ``--connection local``. Floors come from :mod:`gpuready.nvidia.bandwidth`
(by PCIe generation and width as the catalogue gives the model's maximum, and NVLink generation), replaced per
pool by ``diag_bandwidth_floors``. Each check returns its problems and its figures (measured, floor, unit) so the
report shows the numbers whether the check passed or not.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from gpuready.conformance.checks import KILLED, TIMED_OUT, CannotCheck, Output, exit_problem
from gpuready.conformance.report import Measurement
from gpuready.nvidia import bandwidth, dcgm_diag, nvbandwidth
from gpuready.nvidia.cuda import NO_LIBCUDA
from gpuready.spec.model import NodeSpec

NO_TOOL = "__gpuready_no_tool__"
DCGM_ACCEPTED = (0, 226)
UNIT = "GB/s"


# GPU feature discovery's family names -> the architecture names the floors are kept under
_ARCHITECTURE = {
    "volta": "Volta",
    "turing": "Turing",
    "ampere": "Ampere",
    "ada-lovelace": "Ada Lovelace",
    "hopper": "Hopper",
    "blackwell": "Blackwell",
}

Result = tuple[list[str], list[Measurement]]


def _guarded(tool: str, command: str) -> str:
    """Run ``command`` if ``tool`` is installed, else print the marker (a missing tool is a skip, not a failure)."""
    return f"command -v {tool} >/dev/null 2>&1 || {{ echo {NO_TOOL} {tool}; exit 0; }}; {command}"


def bandwidth_command(connection: str) -> str:
    if connection == "local":
        return f"{sys.executable} -m gpuready.conformance.cuda.bandwidth"
    return _guarded("nvbandwidth", nvbandwidth.NVBANDWIDTH_COMMAND)


def dcgm_command(node: NodeSpec) -> str:
    return _guarded("dcgmi", f"dcgmi diag -r {node.diag.dcgm_level} -j")


def commands(node: NodeSpec, connection: str) -> list[str]:
    """What the diag layer runs on ``node``, in order."""
    return [bandwidth_command(connection), dcgm_command(node)]


def floors(node: NodeSpec) -> bandwidth.Floors:
    """The node's floors: the catalogue's for its model and links, with the inventory's overrides."""
    model = node.model
    if model is None:
        raise CannotCheck(
            f"no bandwidth floors for {node.gpu_model!r}: set diag_bandwidth_floors for this pool"
        )
    return bandwidth.floors_for(
        _ARCHITECTURE.get(model.family, model.family),
        model.max_pcie_gen,
        model.max_pcie_width,
        model.nvlink_links if node.nvswitch else 0,
        overrides=dict(node.diag.floors),
    )


def _not_installed(out: Output) -> str | None:
    first = out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""
    return first.split()[1] if first.startswith(NO_TOOL) else None


def bandwidth_report(node: NodeSpec, out: Output) -> nvbandwidth.BandwidthReport:
    """The measurement, or CannotCheck where no tool can measure here (the tool failing is a problem)."""
    tool = _not_installed(out)
    if tool:
        raise CannotCheck(
            f"{tool} is not installed on the node (Debian and Ubuntu package it, deploys/gpu_node.py installs it "
            "with diag_tools = True where a repository has it; or build it from github.com/NVIDIA/nvbandwidth, or "
            "run this layer on the node with --connection local)"
        )
    if out.rc == NO_LIBCUDA and "libcuda" in out.text:
        raise CannotCheck(f"cannot measure bandwidth here: {out.first_line()}")
    if out.rc in (TIMED_OUT, KILLED):  # whatever it printed before it was stopped is not a measurement
        raise _Failed(f"the bandwidth measurement {exit_problem(out, 'nvbandwidth')}")
    try:
        report = nvbandwidth.parse_nvbandwidth_json(out.stdout)
    except nvbandwidth.NvbandwidthError as exc:
        raise _Failed(f"the bandwidth measurement failed (exit {out.rc}): {exc}") from exc
    if out.rc != 0 and not report.errors:
        # nvbandwidth (and the CUDA fallback) exit non-zero with the error in the document; a failure that the
        # document does not explain leaves its figures untrustworthy
        raise _Failed(
            f"the bandwidth measurement failed (exit {out.rc}) without naming an error: {out.first_line()}"
        )
    return report


class _Failed(Exception):
    """The measuring tool itself failed: a problem of the node, not a reason to skip."""


def _whole_gpus(node: NodeSpec) -> list[int]:
    """GPUs a copy test measures: MIG mode hides a whole GPU from CUDA."""
    gpus = [i for i in range(node.gpu_count) if i not in node.mig_enabled_gpus]
    if not gpus:
        raise CannotCheck("every GPU is in MIG mode: copy bandwidth is measured on whole GPUs only")
    return gpus


def _per_gpu(
    node: NodeSpec,
    out: Output,
    pick: Callable[[nvbandwidth.BandwidthReport], dict[int, float]],
    floor_of: Callable[[bandwidth.Floors], float | None],
    what: str,
) -> Result:
    gpus = _whole_gpus(node)
    try:
        report = bandwidth_report(node, out)
    except _Failed as exc:
        return [str(exc)], []
    raw = floor_of(floors(node))
    floor = round(raw, 2) if raw is not None else None
    figures = pick(report)
    if not figures and report.errors:
        return [f"{what} not measured: {'; '.join(report.errors)}"], []
    problems: list[str] = []
    measurements: list[Measurement] = []
    for gpu in gpus:
        if gpu not in figures:
            problems.append(f"GPU {gpu}: no {what} figure (the GPU is missing from the measurement)")
            continue
        measured = round(figures[gpu], 2)
        measurements.append(Measurement(f"GPU {gpu} {what}", measured, floor, UNIT))
        if floor is not None and measured < floor:
            problems.append(f"GPU {gpu}: {what} {measured:g} {UNIT} < floor {floor:g} {UNIT}")
    if measurements:
        lowest = min(measurements, key=lambda m: m.measured)
        measurements.append(Measurement(f"lowest {what}", lowest.measured, floor, UNIT))
    return problems, measurements


def host_to_device(node: NodeSpec, out: Output) -> Result:
    """Every whole GPU copies host->device (pinned memory) at least at its floor."""
    return _per_gpu(node, out, lambda r: r.host_to_device, lambda f: f.h2d_gbps, "host->device")


def device_to_host(node: NodeSpec, out: Output) -> Result:
    """Every whole GPU copies device->host (pinned memory) at least at its floor."""
    return _per_gpu(node, out, lambda r: r.device_to_host, lambda f: f.d2h_gbps, "device->host")


def peer(node: NodeSpec, out: Output) -> Result:
    """On NVLink/NVSwitch nodes, every ordered GPU pair copies at least at the NVLink floor."""
    raw = floors(node).peer_gbps
    limit = round(raw, 2) if raw is not None else None
    if not node.nvswitch or limit is None:
        raise CannotCheck("no NVLink between this node's GPUs: peer bandwidth has no floor here")
    gpus = _whole_gpus(node)
    try:
        report = bandwidth_report(node, out)
    except _Failed as exc:
        return [str(exc)], []
    if not report.peer and (report.errors or report.waived):
        return [f"peer copies not measured: {'; '.join(report.errors or report.waived)}"], []
    problems: list[str] = []
    measurements: list[Measurement] = []
    for src in gpus:
        for dst in gpus:
            if src == dst:
                continue
            figure = report.peer.get((src, dst))
            if figure is None:
                problems.append(f"GPU {src} -> GPU {dst}: no peer figure (peer access not possible?)")
                continue
            measured = round(figure, 2)
            measurements.append(Measurement(f"GPU {src}->{dst} peer", measured, limit, UNIT))
            if measured < limit:
                problems.append(f"GPU {src} -> GPU {dst}: peer {measured:g} {UNIT} < floor {limit:g} {UNIT}")
    if measurements:
        lowest = min(measurements, key=lambda m: m.measured)
        measurements.append(Measurement("lowest peer", lowest.measured, limit, UNIT))
    return problems, measurements


def dcgm(node: NodeSpec, out: Output) -> list[str]:
    """``dcgmi diag`` passed every test it ran; each failed test is named with its GPU and DCGM's message."""
    tool = _not_installed(out)
    if tool:
        raise CannotCheck(
            "DCGM (dcgmi) is not installed on the node: its diagnostics were not run (deploys/gpu_node.py installs "
            "DCGM with diag_tools = True)"
        )
    command = f"dcgmi diag -r {node.diag.dcgm_level}"
    # dcgmi exits 0 when nothing failed (warnings included) and 226 (DCGM_ST_NVVS_ERROR) when a test failed;
    # anything else (a timeout, no host engine, a lost GPU) means the document is not the run's verdict
    status = exit_problem(out, command, DCGM_ACCEPTED)
    try:
        report = dcgm_diag.parse_diag_json(out.stdout)
    except dcgm_diag.DiagError as exc:
        return [f"{command} did not run (exit {out.rc}): {exc}"]
    problems = [status] if status else []
    for test in report.failed():
        where = f"GPU {test.gpu}" if test.gpu is not None else "node"
        detail = f": {'; '.join(test.messages)}" if test.messages else ""
        problems.append(f"{where}: DCGM {test.name} {test.status}{detail}")
    if out.rc != 0 and not problems:
        problems.append(f"{command} exited {out.rc} (a test failed) but its document names no failed test")
    return problems
