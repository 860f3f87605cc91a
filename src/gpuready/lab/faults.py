"""Hardware faults a lab host can be given, so that each conformance check can be seen to fail.

A fault is a line in the host's hardware file (``{"fault": name, "gpu": index or None}``); the emulated
tools read it and answer as a real machine with that fault does (see each entry's description), and
``journal_messages`` gives the kernel lines the lab writes to the host's journal when it injects one. The
kernel formats are the driver's: ``NVRM: Xid (PCI:0000:18:00): 79, pid=..., name=..., <message>`` (quoted in
NVIDIA/NVSentinel#155, leptonai/gpud#1209 and many public XID logs) and the fallen-off-the-bus notice.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass


@dataclass(frozen=True)
class Fault:
    name: str
    description: str
    per_gpu: bool  # False: a host-wide fault, injected without --gpu
    needs: str = ""  # a hardware property the fault needs ("nvlink", "nvswitch", "row_remapping", ...)


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault(
            "off-bus",
            "GPU fell off the PCIe bus: NVML cannot get its handle ('Unknown Error'), "
            "nvidia-smi exits 15, 'No devices were found' when no GPU is left",
            True,
        ),
        Fault("xid-79", "XID 79 in the kernel log and the GPU off the bus (what XID 79 means)", True),
        Fault(
            "xid-48",
            "XID 48 (double-bit ECC error) in the kernel log; volatile and aggregate uncorrectable "
            "ECC counts go up",
            True,
            "ecc",
        ),
        Fault(
            "ecc-uncorrectable",
            "uncorrectable DRAM ECC errors (volatile and aggregate) on the GPU",
            True,
            "ecc",
        ),
        Fault(
            "row-remap-pending",
            "a row remapping is pending (uncorrectable remapped row; GPU reset needed)",
            True,
            "row_remapping",
        ),
        Fault(
            "retired-pages-pending",
            "a double-bit ECC page retirement is pending (pre-Ampere GPUs)",
            True,
            "page_retirement",
        ),
        Fault("pcie-downgrade", "PCIe link trained below its maximum (generation and width)", True),
        Fault("nvlink-down", "all NVLinks of the GPU inactive", True, "nvlink"),
        Fault(
            "slow-gpu",
            "the GPU moves data at 40% of its normal rate, link trained at its maximum (a degraded "
            "board or a throttled path only a bandwidth test sees)",
            True,
        ),
        Fault(
            "dcgm-memory",
            "DCGM's memory test fails on the GPU (a bad HBM/GDDR cell nvidia-smi does not show)",
            True,
        ),
        Fault(
            "fabricmanager-failed",
            "NVIDIA Fabric Manager fails to start; GPU fabric state stays In Progress",
            False,
            "nvswitch",
        ),
        Fault(
            "driver-mismatch",
            "NVML reports 'Driver/library version mismatch' (exit 18), as after a driver "
            "upgrade without reboot",
            False,
        ),
    )
}


class FaultError(ValueError):
    """An unknown fault, or one that does not fit the host (bad GPU index, no NVLink, ...)."""


def _gpu_has(gpu: dict, need: str) -> bool:
    if need == "nvlink":
        return gpu.get("nvlink_links", 0) > 0
    if need == "ecc":
        return bool(gpu.get("ecc_supported", True))
    return bool(gpu.get(need))


def _resolve(hw: dict, fault: str, gpu: int | None) -> tuple[Fault, int | None]:
    if fault not in FAULTS:
        raise FaultError(f"unknown fault {fault!r}; known faults: {', '.join(FAULTS)}")
    spec = FAULTS[fault]
    gpus = hw.get("gpus", [])
    if not spec.per_gpu:
        if gpu is not None:
            raise FaultError(f"fault {fault!r} affects the whole host; do not name a GPU")
        if spec.needs == "nvswitch" and not hw.get("system", {}).get("nvswitch"):
            raise FaultError(
                f"fault {fault!r} needs an NVSwitch system; profile {hw.get('profile')!r} has none"
            )
        return spec, None
    index = 0 if gpu is None else gpu
    if not isinstance(index, int) or not 0 <= index < len(gpus):
        raise FaultError(f"GPU {gpu!r} does not exist on this host (GPUs 0-{len(gpus) - 1})")
    if spec.needs and not _gpu_has(gpus[index], spec.needs):
        raise FaultError(
            f"fault {fault!r} needs {spec.needs.replace('_', ' ')}, which {gpus[index]['name']} lacks"
        )
    return spec, index


def apply_fault(hw: dict, fault: str, gpu: int | None) -> dict:
    """A copy of ``hw`` with the fault added (GPU 0 when a per-GPU fault names no GPU); idempotent."""
    _spec, index = _resolve(hw, fault, gpu)
    new = copy.deepcopy(hw)
    entry = {"fault": fault, "gpu": index}
    faults = new.setdefault("faults", [])
    if entry not in faults:
        faults.append(entry)
    return new


def clear_faults(hw: dict) -> dict:
    new = copy.deepcopy(hw)
    new["faults"] = []
    return new


def _pci(gpu: dict) -> str:
    """'00000000:AB:00.0' -> '0000:ab:00': the kernel prints PCI addresses in lower case, without the function."""
    return gpu["pci_bus_id"][4:-2].lower()


def journal_messages(hw: dict, fault: str, gpu: int | None) -> list[str]:
    """Kernel lines a real host logs for this fault (empty for faults the kernel does not log)."""
    _spec, index = _resolve(hw, fault, gpu)
    if index is None:
        return []
    g = hw["gpus"][index]
    pci = _pci(g)
    device_id = g["pci_device_id"][:4].lower()
    fell_off = [
        f"NVRM: The NVIDIA GPU {g['pci_bus_id'][4:].lower()}",
        f"NVRM: (PCI ID: 10de:{device_id}) installed in this system has",
        "NVRM: fallen off the bus and is not responding to commands.",
    ]
    if fault == "xid-79":
        return [f"NVRM: Xid (PCI:{pci}): 79, pid=0, name=, GPU has fallen off the bus.", *fell_off]
    if fault == "off-bus":
        return fell_off
    if fault == "xid-48":
        return [
            f"NVRM: Xid (PCI:{pci}): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error "
            f"(DBE) has been detected on GPU ({pci}).",
        ]
    if fault == "row-remap-pending":
        return [
            f"NVRM: Xid (PCI:{pci}): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row marked for "
            "remapping, reset gpu to activate."
        ]
    if fault == "retired-pages-pending":
        return [
            f"NVRM: Xid (PCI:{pci}): 63, pid='<unknown>', name=<unknown>, Dynamic Page Retirement: New page "
            "retired, reboot to activate (0x00000000000123a4)."
        ]
    if fault == "nvlink-down":
        return [
            f"NVRM: Xid (PCI:{pci}): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on "
            "link 0(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"
        ]
    return []
