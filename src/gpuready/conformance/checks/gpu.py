"""GPU layer: every GPU the inventory promises is there, healthy and configured as the spec says.

The checks read nvidia-smi's full XML report (or the same :class:`~gpuready.nvidia.smi.SmiReport` built from
NVML when the suite runs locally), the kernel journal, ``nvidia-smi nvlink -s`` and ``nvidia-smi mig -lgi``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass

from gpuready.conformance.checks import CannotCheck, Output, exit_problem, not_found
from gpuready.nvidia.errors import ParseError
from gpuready.nvidia.smi import (
    DEFAULT_COMPUTE,
    EXCLUSIVE_PROCESS,
    LOST_GPU,
    PROHIBITED_COMPUTE,
    GpuInfo,
    SmiReport,
    parse_mig_lgi,
    parse_nvlink_report,
)
from gpuready.spec.model import NodeSpec

NVLINK_COMMAND = "nvidia-smi nvlink -s"
MIG_INSTANCES_COMMAND = "nvidia-smi mig -lgi"
# Kernel ring buffer since boot; lab hosts are containers whose kernel lines arrive through syslog, so the
# whole journal is searched for the driver's Xid lines as well.
JOURNAL_COMMANDS = (
    "journalctl -k -b --no-pager -o cat",
    "journalctl -b --no-pager -o cat -g 'NVRM: Xid'",
)
# Where there is no journalctl (a VM image or container without systemd, as on a lent H200 machine): the kernel's
# ring buffer, which holds this boot's lines until it wraps.
RING_BUFFER_COMMAND = "dmesg"


def commands(node: NodeSpec) -> list[str]:
    """What the gpu layer runs on ``node`` besides the host layer's nvidia-smi report."""
    return [
        *JOURNAL_COMMANDS,
        *([NVLINK_COMMAND] if node.nvswitch else []),
        *([MIG_INSTANCES_COMMAND] if node.mig_enabled_gpus else []),
    ]


# Clock event reasons that are not a problem: an idle GPU, and clocks an administrator set on purpose.
BENIGN_CLOCK_REASONS = frozenset({"gpu_idle", "applications_clocks_setting"})
# nvidia-smi prints this (on stderr or between GPUs) for a GPU the driver has lost, and exits 15.
_LOST = LOST_GPU
EXIT_GPU_LOST = 15
_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+), (.*)")
_NO_MIG_GPUS = "No MIG-enabled devices found"

# Common XIDs and what they mean (NVIDIA "Xid Errors" catalogue, r580 GPU deployment guide); the action says
# who has to act: application errors clear with the application, the rest need a reset, a reboot or a repair.
XIDS: dict[int, str] = {
    13: "graphics engine exception (usually an application's illegal memory access)",
    31: "GPU memory page fault (usually an application's illegal address)",
    43: "GPU stopped processing (an application hit a fault and its channel was reset)",
    45: "preemptive cleanup after a previous error (processes were killed)",
    48: "double-bit ECC error (uncorrectable memory error; drain, reset the GPU)",
    61: "internal micro-controller breakpoint/warning (driver or firmware fault; reset the GPU)",
    62: "internal micro-controller halt (driver or firmware fault; reset the GPU)",
    63: "ECC page retirement or row remapping recorded (reset the GPU to apply it)",
    64: "ECC page retirement or row remapping failed (the GPU needs repair)",
    74: "NVLink error (check the link, reset the GPU)",
    79: "GPU has fallen off the bus (reboot; check power, PCIe and thermals)",
    92: "high single-bit ECC error rate",
    94: "contained ECC error (the affected application was stopped; reset the GPU when idle)",
    95: "uncontained ECC error (every application on the GPU is affected; reset the GPU)",
    119: "GSP RPC timeout (the GPU firmware stopped answering; reset the GPU)",
    120: "GSP error (GPU firmware fault; reset the GPU)",
    154: "GPU recovery action changed (the driver asks for a reset, reboot or drain)",
}


@dataclass(frozen=True)
class Xid:
    pci: str
    code: int
    detail: str


def lost_gpus(out: Output) -> list[str]:
    """'GPU <bus id> (<error>)' for each GPU nvidia-smi could not get a handle for."""
    return [f"GPU {m.group(1)} ({m.group(2).strip()})" for m in _LOST.finditer(out.text)]


def _pci_key(bus_id: str) -> tuple[int, int, int]:
    """'00000000:18:00.0' and '0000:18:00' -> (0, 0x18, 0): the form nvidia-smi and the kernel each print."""
    parts = bus_id.strip().removeprefix("PCI:").split(":")
    if len(parts) < 3:
        raise ValueError(f"not a PCI bus id: {bus_id!r}")
    return int(parts[0], 16), int(parts[1], 16), int(parts[2].split(".")[0], 16)


def _gpu_names(report: SmiReport) -> dict[tuple[int, int, int], str]:
    return {_pci_key(gpu.pci_bus_id): f"GPU {gpu.index}" for gpu in report.gpus}


def _list(gpus: list[GpuInfo]) -> str:
    return ", ".join(str(gpu.index) for gpu in gpus)


def gpus_match_spec(node: NodeSpec, report: SmiReport, lost: list[str]) -> list[str]:
    """Count, model and memory of every GPU = the inventory. `lost` is what :func:`lost_gpus` found."""
    problems = []
    readable = len(report.gpus)
    if readable != node.gpu_count or report.attached_gpus != node.gpu_count:
        what = f"{readable} GPU(s) answer" + (
            f" of {report.attached_gpus} attached" if report.attached_gpus != readable else ""
        )
        # each lost GPU is already named "GPU <bus id> (<error>)"
        detail = f" ({'; '.join(lost)}: fallen off the bus?)" if lost else ""
        problems.append(f"{what}, the inventory says {node.gpu_count}{detail}")
    wrong_model = [gpu for gpu in report.gpus if gpu.name != node.gpu_model]
    for name in sorted({gpu.name or "?" for gpu in wrong_model}):
        gpus = [gpu for gpu in wrong_model if gpu.name == name]
        problems.append(f"GPU {_list(gpus)} is {name}, the inventory says {node.gpu_model}")
    if node.gpu_memory_mib is not None:
        for gpu in report.gpus:
            if gpu.name == node.gpu_model and gpu.memory_total_mib != node.gpu_memory_mib:
                problems.append(
                    f"GPU {gpu.index} has {gpu.memory_total_mib} MiB of memory, {node.gpu_model} has "
                    f"{node.gpu_memory_mib} MiB"
                )
    return problems


def ecc_errors(report: SmiReport) -> list[str]:
    return [
        f"GPU {gpu.index}: {gpu.ecc_uncorrectable_volatile} uncorrectable ECC error(s) since the driver loaded"
        for gpu in report.gpus
        if gpu.ecc_uncorrectable_volatile
    ]


def memory_repairs(report: SmiReport) -> list[str]:
    """No page retirement or row remapping waiting for a reset, and no failed row remapping."""
    problems = []
    for gpu in report.gpus:
        if gpu.retired_pages_pending:
            problems.append(
                f"GPU {gpu.index}: a page retirement is pending (reset the GPU to retire the page)"
            )
        rows = gpu.remapped_rows
        if rows is not None and rows.pending:
            problems.append(f"GPU {gpu.index}: a row remapping is pending (reset the GPU to apply it)")
        if rows is not None and rows.failure:
            problems.append(
                f"GPU {gpu.index}: row remapping failed (no spare rows left; the GPU needs repair)"
            )
    return problems


def performance_states(xml_text: str) -> dict[int, int]:
    """GPU index -> performance state number (P0 = 0) from ``nvidia-smi -q -x``; GPUs without one are left out."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError:
        return {}
    states = {}
    for index, gpu in enumerate(root.findall("gpu")):
        text = (gpu.findtext("performance_state") or "").strip()
        if re.fullmatch(r"P\d+", text):
            states[index] = int(text[1:])
    return states


# NVIDIA documents that the link generation and width "may be reduced when the GPU is not in use": from P5
# on (P8 is the usual idle state) a lower link is power management, not a fault.
POWER_SAVING_PSTATE = 5


def pcie_link(report: SmiReport, pstates: dict[int, int]) -> list[str]:
    problems = []
    saving = []
    for gpu in report.gpus:
        gen, gen_max = gpu.pcie_link_gen_current, gpu.pcie_link_gen_max
        width, width_max = gpu.pcie_link_width_current, gpu.pcie_link_width_max
        low = []
        if gen is not None and gen_max is not None and gen < gen_max:
            low.append(f"Gen{gen} (max Gen{gen_max})")
        if width is not None and width_max is not None and width < width_max:
            low.append(f"x{width} (max x{width_max})")
        if not low:
            continue
        pstate = pstates.get(gpu.index)
        if pstate is not None and pstate >= POWER_SAVING_PSTATE:
            saving.append(f"GPU {gpu.index} at {' '.join(low)} in P{pstate}")
        else:
            problems.append(f"GPU {gpu.index}: PCIe link trained at {' '.join(low)}")
    if not problems and saving:
        raise CannotCheck(
            f"{'; '.join(saving)}: idle GPUs lower their link to save power; judge the link under load"
        )
    return problems


# journalctl run by a user outside the adm/systemd-journal groups shows only that user's messages, and says so.
_PARTIAL_JOURNAL = "You are currently not seeing messages from other users and the system"


def needs_ring_buffer(journal: list[Output]) -> bool:
    """No journalctl on the node: read the kernel's ring buffer instead (:data:`RING_BUFFER_COMMAND`)."""
    return bool(journal) and all(not_found(out) for out in journal)


def journal_xids(journal: list[Output], ring: Output | None = None) -> list[Xid]:
    """Xid lines from the journal outputs, or from the ring buffer (``ring``) where the node has no journalctl.
    The two journal queries overlap, so a line is counted as often as the query that shows it most often (not
    once per query), and a line logged twice still counts twice."""
    if needs_ring_buffer(journal):
        if ring is None or not_found(ring):
            raise CannotCheck("neither journalctl nor dmesg found: cannot read the kernel log")
        if ring.rc != 0:
            raise CannotCheck(f"no journalctl, and dmesg cannot read the kernel log: {ring.first_line()}")
        journal = [ring]
    usable = [out for out in journal if out.rc in (0, 1) and not not_found(out)]
    if journal and not usable:
        raise CannotCheck(f"cannot read the journal: {journal[0].first_line()}")
    if any(_PARTIAL_JOURNAL in out.stderr for out in usable) and not any(
        _XID.search(out.stdout) for out in usable
    ):
        raise CannotCheck(
            "the journal hides the kernel's messages from this user (add it to systemd-journal, or _sudo = True)"
        )
    most: Counter[str] = Counter()
    for out in usable:
        lines = Counter(
            line[m.start() :].strip() for line in out.stdout.splitlines() if (m := _XID.search(line))
        )
        most |= lines  # per line, the larger of the two counts
    xids = []
    for line, count in most.items():
        match = _XID.match(line)
        assert match is not None  # every key was cut at an _XID match
        xids.extend([Xid(match.group(1), int(match.group(2)), match.group(3))] * count)
    return xids


def xid_errors(report: SmiReport | None, journal: list[Output], ring: Output | None = None) -> list[str]:
    """No XID error since boot; each one is named with what it means and which GPU logged it."""
    xids = journal_xids(journal, ring)
    names = _gpu_names(report) if report is not None else {}
    counts = Counter((x.pci, x.code) for x in xids)
    problems = []
    for (pci, code), count in sorted(counts.items(), key=lambda item: (item[0][1], item[0][0])):
        try:
            gpu = names.get(_pci_key(pci), "a GPU not in nvidia-smi's report")
        except ValueError:
            gpu = "an unknown GPU"
        meaning = XIDS.get(code, "see NVIDIA's Xid catalogue")
        times = f" ({count} times)" if count > 1 else ""
        problems.append(f"XID {code} on {gpu} (PCI:{pci}) since boot{times}: {meaning}")
    return problems


def clock_event_reasons(report: SmiReport) -> list[str]:
    problems = []
    for gpu in report.gpus:
        active = [reason for reason in gpu.clock_event_reasons_active if reason not in BENIGN_CLOCK_REASONS]
        if active:
            problems.append(f"GPU {gpu.index}: clocks held down by {', '.join(active)}")
    return problems


def expected_compute_modes(node: NodeSpec) -> tuple[set[str], str]:
    """The compute modes the node's GPUs may be in, and why.

    An MPS pool's GPUs are EXCLUSIVE_PROCESS once NVIDIA's MPS control daemon started MPS on them (it sets the
    mode, then starts ``nvidia-cuda-mps-control -d``; it sets DEFAULT again when it stops): DEFAULT there means
    no daemon runs MPS on the node, and its pods share the GPU without MPS. NVIDIA's DRA driver sets
    EXCLUSIVE_PROCESS for the time a claim shares a GPU by MPS. Anything else runs in DEFAULT: PROHIBITED lets no
    process create a CUDA context, and an exclusive mode lets one pod at a time use the GPU.
    """
    if node.dra:
        return {DEFAULT_COMPUTE, EXCLUSIVE_PROCESS}, "DRA: the driver sets EXCLUSIVE_PROCESS for an MPS claim"
    if str(node.sharing.mode) == "mps":
        return {EXCLUSIVE_PROCESS}, 'gpu_sharing = "mps": the MPS control daemon sets it when it starts MPS'
    return {DEFAULT_COMPUTE}, f'gpu_sharing = "{node.sharing.mode}"'


def compute_mode(node: NodeSpec, report: SmiReport) -> list[str]:
    """Each GPU's compute mode is one the node's sharing needs (:func:`expected_compute_modes`)."""
    allowed, why = expected_compute_modes(node)
    problems = []
    for gpu in report.gpus:
        if gpu.compute_mode is None or gpu.compute_mode in allowed:
            continue
        effect = {
            PROHIBITED_COMPUTE: "no process can create a CUDA context on it",
            DEFAULT_COMPUTE: "no MPS control daemon runs MPS on it: its pods share it without MPS",
        }.get(gpu.compute_mode, "one process at a time can use it")
        problems.append(
            f"GPU {gpu.index} ({gpu.pci_bus_id}): compute mode {gpu.compute_mode}, expected "
            f"{' or '.join(sorted(allowed))} ({why}); {effect}"
        )
    return problems


def nvlink(node: NodeSpec, report: SmiReport, out: Output) -> list[str]:
    """On NVSwitch nodes every NVLink is up and every GPU has joined the fabric."""
    if not node.nvswitch:
        raise CannotCheck("not applicable: the inventory says this node has no NVSwitch (nvswitch = False)")
    problems = []
    for gpu in report.gpus:
        if gpu.fabric_state is not None and gpu.fabric_state != "Completed":
            problems.append(
                f"GPU {gpu.index}: fabric registration is {gpu.fabric_state} (is Fabric Manager running?)"
            )
        elif gpu.fabric_status is not None and gpu.fabric_status != "Success":
            problems.append(f"GPU {gpu.index}: fabric registration failed: {gpu.fabric_status}")
    if not_found(out):
        return [*problems, "nvidia-smi not found"]
    # the exit status first: a run that timed out can have printed the first GPUs whole
    if problem := exit_problem(out, NVLINK_COMMAND, (0, EXIT_GPU_LOST)):
        return [*problems, problem]
    text = "\n".join(line for line in out.stdout.splitlines() if not _LOST.search(line))
    try:
        # nvlink -s prints no total: every GPU of the full report (the lost ones are in neither) must be there
        gpus = parse_nvlink_report(text, expected=len(report.gpus))
    except ParseError as exc:
        return [*problems, f"`{NVLINK_COMMAND}` (exit {out.rc}): {exc}"]
    for linked in gpus:
        if any("MIG mode" in message for message in linked.messages):
            continue  # NVLink cannot be queried on a MIG-enabled GPU; its links are not used by MIG devices
        down = [link.link for link in linked.links if link.speed_gbps is None]
        if not linked.links:
            reason = "; ".join(linked.messages) or "no links listed"
            problems.append(f"GPU {linked.index}: NVLink down ({reason})")
        elif down:
            problems.append(f"GPU {linked.index}: NVLink {', '.join(map(str, down))} inactive")
    return problems


def mig_layout(node: NodeSpec, report: SmiReport, lgi: Output | None) -> list[str]:
    """MIG mode per GPU and the GPU instances per GPU = the inventory's layout; each instance has a compute
    instance (the device plugin advertises only MIG devices, i.e. GPU instances with a compute instance)."""
    layout = list(node.sharing.mig_layout) or [None] * node.gpu_count
    problems = []
    for gpu in report.gpus:
        wanted = layout[gpu.index] if gpu.index < len(layout) else None
        mode = gpu.mig_mode_current
        if wanted is None and mode == "Enabled":
            problems.append(f"GPU {gpu.index}: MIG mode is enabled, the inventory wants a whole GPU")
        elif wanted is not None and mode != "Enabled":
            pending = " (enabled, pending a GPU reset or reboot)" if gpu.mig_mode_pending == "Enabled" else ""
            problems.append(
                f"GPU {gpu.index}: MIG mode is {mode or 'not reported'}{pending}, the inventory wants MIG"
            )
    if not any(wanted is not None for wanted in layout):
        return problems
    if lgi is None or not_found(lgi):
        return [*problems, f"`{MIG_INSTANCES_COMMAND}` did not run"]
    if "Insufficient Permissions" in lgi.text or "No permission" in lgi.text:
        if problems:
            return problems
        raise CannotCheck(
            f"`{MIG_INSTANCES_COMMAND}` needs root here: {lgi.first_line()} (_sudo = True over SSH)"
        )
    if _NO_MIG_GPUS in lgi.text:
        rows = []
    elif problem := exit_problem(lgi, MIG_INSTANCES_COMMAND):
        return [*problems, problem]
    else:
        try:
            rows = parse_mig_lgi(lgi.stdout)
        except ParseError as exc:
            return [*problems, f"`{MIG_INSTANCES_COMMAND}` (exit {lgi.rc}): {exc}"]
    by_gpu: dict[int, list[str]] = {}
    for row in rows:
        by_gpu.setdefault(row.gpu, []).append(row.name.removeprefix("MIG "))
    for gpu in report.gpus:
        wanted = layout[gpu.index] if gpu.index < len(layout) else None
        if wanted is None or gpu.mig_mode_current != "Enabled":
            continue
        have = Counter(by_gpu.get(gpu.index, []))
        want = Counter(wanted)
        if have != want:
            missing = sorted((want - have).elements())
            extra = sorted((have - want).elements())
            detail = "; ".join(
                part
                for part in (
                    f"missing {', '.join(missing)}" if missing else "",
                    f"unexpected {', '.join(extra)}" if extra else "",
                )
                if part
            )
            problems.append(
                f"GPU {gpu.index}: GPU instances {sorted(have.elements())}, the inventory wants "
                f"{sorted(want.elements())} ({detail})"
            )
        elif len(gpu.mig_devices) < sum(want.values()):
            problems.append(
                f"GPU {gpu.index}: {len(gpu.mig_devices)} MIG device(s) for {sum(want.values())} GPU instances: "
                "a GPU instance has no compute instance"
            )
    return problems


def vector_add(node: NodeSpec, out: Output) -> list[str]:
    """Every CUDA device ran vectorAdd (``python -m gpuready.conformance.cuda.vector_add``) and got the right sums."""
    from gpuready.nvidia.cuda import NO_LIBCUDA
    from gpuready.nvidia.cuda import VECTOR_ADD_PASSED as PASSED

    if out.rc == NO_LIBCUDA:
        raise CannotCheck(f"cannot run vectorAdd here: {out.first_line()}")
    lines = [line.strip() for line in out.stdout.splitlines() if "vectorAdd" in line]
    problems = [line for line in lines if not line.endswith(PASSED)]
    if out.rc != 0 and not problems:
        problems.append(f"vectorAdd did not run (exit {out.rc}): {out.first_line()}")
    passed = len(lines) - len([line for line in lines if not line.endswith(PASSED)])
    if not problems and not node.mig_enabled_gpus and passed != node.gpu_count:
        problems.append(f"vectorAdd ran on {passed} CUDA device(s), the inventory says {node.gpu_count} GPUs")
    return problems


def image_cuda(node: NodeSpec, report: SmiReport) -> list[str]:
    """Every CUDA image the suite runs on this node needs no newer CUDA than the driver reports (nvidia-smi's
    "CUDA Version"): otherwise its pods fail with "CUDA driver version is insufficient"."""
    from gpuready.nvidia import cuda

    supports = cuda.parse(report.cuda_version)
    if supports is None:
        raise CannotCheck("nvidia-smi reports no CUDA version")
    problems = []
    for knob, image in (
        ("vectoradd_image", node.images.vectoradd),
        ("cuda_base_image", node.images.cuda_base),
    ):
        needs = cuda.image_cuda(image)
        if needs is not None and needs > supports:
            problems.append(
                f"{knob} {image} needs CUDA {cuda.show(needs)}, the driver here supports CUDA "
                f"{cuda.show(supports)} (nvidia-smi, driver {report.driver_version})"
            )
    return problems
