"""Hardware faults a lab host can be given, so that each conformance check can be seen to fail.

A fault is one row of ``FAULTS``: its name, what it is, and its ``Effects``, the data every emulated tool
renders. Injected, it is a line in the host's hardware file (``{"fault": name, "gpu": index or None,
"effects": {...}}``, every field of ``Effects``); the emulated tools (Python modules installed in the host,
the Go mock NVML and CUDA libraries) read the effects, never the name, and answer as a real machine with
that fault does (see each entry's description), so a new fault is one row here. ``journal_messages`` gives
the kernel lines the lab writes to the host's journal when it injects one. The
kernel formats are the driver's: ``NVRM: Xid (PCI:0000:18:00): 79, pid=..., name=..., <message>`` (quoted in
NVIDIA/NVSentinel#155, leptonai/gpud#1209 and many public XID logs) and the fallen-off-the-bus notice.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Effects:
    """What a fault does to the machine. Every renderer reads these fields (from the hardware file), never a
    fault's name. Several faults on one GPU (or host) combine: flags OR, counts add, ``bandwidth_factor``
    and the PCIe fields take the worst, ``xid`` the largest (the mock NVML raises each): package machine's
    Effects.combine, the one derivation (the kernel files and the lab's dcgm-exporter read its View through
    ``nvemu.read_view``). Where each is rendered:

    GPU effects:

    * ``off_bus``: the GPU fell off the PCIe bus. machine.OffBus (mock NVML: no handle; nvidia-smi; dcgmi leaves
      it out; cudadev: not a CUDA device, for the mock CUDA and nvbandwidth; kernel_files reads its config space
      as all ones), dcgm_exporter.host.Gpu.off_bus (the exporter's blank series).
    * ``xid``: the XID the driver raises (0: none). machine.XIDs (mock NVML XID events: NVIDIA's device
      plugin's health check), dcgm_exporter.host.Gpu.xid (the exporter's DCGM_FI_DEV_XID_ERRORS).
    * ``ecc_uncorrected``: uncorrectable DRAM ECC errors, volatile and aggregate alike. machine
      View.ECCUncorrected (NVML, nvidia-smi).
    * ``dbe_remapped``: double-bit errors the memory handled: each is an uncorrectable remapped row on a
      GPU with row remapping, and a retired page when a page retirement is pending. machine View (NVML,
      nvidia-smi, the lab's dcgm-exporter's remapped-row counters).
    * ``row_remap_pending``: one uncorrectable row remapped, a GPU reset pending. machine View (NVML,
      nvidia-smi, dcgmi's software test, the lab's dcgm-exporter's DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS).
    * ``retired_pages_pending``: one double-bit page retired, a reboot pending. machine View
      (NVML, nvidia-smi).
    * ``pcie_gen_drop`` / ``pcie_width_divisor``: the link trained this many generations below its
      maximum (at least gen 1) and at its maximum width divided by this (at least x1).
      machine View (NVML, nvidia-smi, kernel_files' sysfs link, dcgmi's PCIe test, and machine/bandwidth.go:
      mock CUDA, nvbandwidth).
    * ``nvlink_down``: all the GPU's NVLinks inactive. machine View.NVLinkActive
      (NVML, nvidia-smi nvlink and topo; peer copies of the mock CUDA and nvbandwidth).
    * ``bandwidth_factor``: every copy involving the GPU moves at this fraction of its normal rate.
      machine View.BandwidthFactor (mock CUDA, nvbandwidth, dcgmi's PCIe test).
    * ``dcgm_memory_fails``: DCGM's memory test finds a faulty memory element. machine View.Effects (dcgmi's
      memory test; silicon/tools/dcgmi.go).

    Host effects (a host-wide fault):

    * ``fabric_failed``: NVIDIA Fabric Manager fails to start, the GPU fabric stays In Progress.
      nv-fabricmanager (static tools, fabricmanager.go), machine.Fabric (NVML, nvidia-smi; cudadev: CUDA,
      nvbandwidth).
    * ``driver_mismatch``: NVML init fails with 'Driver/library version mismatch'. machine.CheckLoaded
      (NVML, every emulated tool).
    """

    off_bus: bool = False
    xid: int = 0
    ecc_uncorrected: int = 0
    dbe_remapped: int = 0
    row_remap_pending: bool = False
    retired_pages_pending: bool = False
    pcie_gen_drop: int = 0
    pcie_width_divisor: int = 1
    nvlink_down: bool = False
    bandwidth_factor: float = 1.0
    dcgm_memory_fails: bool = False
    fabric_failed: bool = False
    driver_mismatch: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


EFFECT_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Effects))


@dataclass(frozen=True)
class Fault:
    name: str
    description: str
    per_gpu: bool  # False: a host-wide fault, injected without --gpu
    needs: str = ""  # a hardware property the fault needs ("nvlink", "nvswitch", "row_remapping", ...)
    effects: Effects = Effects()
    # the kernel's Xid line after "NVRM: Xid (PCI:<bus>): ", "{pci}" the GPU's bus; "" when no XID is logged
    xid_log: str = ""


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault(
            "off-bus",
            "GPU fell off the PCIe bus: NVML cannot get its handle ('Unknown Error'), "
            "nvidia-smi exits 15, 'No devices were found' when no GPU is left",
            True,
            effects=Effects(off_bus=True),
        ),
        Fault(
            "xid-79",
            "XID 79 in the kernel log and the GPU off the bus (what XID 79 means)",
            True,
            effects=Effects(off_bus=True, xid=79),
            xid_log="79, pid=0, name=, GPU has fallen off the bus.",
        ),
        Fault(
            "xid-48",
            "XID 48 (double-bit ECC error) in the kernel log; volatile and aggregate uncorrectable "
            "ECC counts go up",
            True,
            "ecc",
            Effects(xid=48, ecc_uncorrected=1, dbe_remapped=1),
            "48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected "
            "on GPU ({pci}).",
        ),
        Fault(
            "ecc-uncorrectable",
            "uncorrectable DRAM ECC errors (volatile and aggregate) on the GPU",
            True,
            "ecc",
            Effects(ecc_uncorrected=2),
        ),
        Fault(
            "row-remap-pending",
            "a row remapping is pending (uncorrectable remapped row; GPU reset needed)",
            True,
            "row_remapping",
            Effects(xid=63, row_remap_pending=True),
            "63, pid='<unknown>', name=<unknown>, Row Remapper: New row marked for remapping, reset gpu to "
            "activate.",
        ),
        Fault(
            "retired-pages-pending",
            "a double-bit ECC page retirement is pending (pre-Ampere GPUs)",
            True,
            "page_retirement",
            Effects(xid=63, retired_pages_pending=True),
            "63, pid='<unknown>', name=<unknown>, Dynamic Page Retirement: New page retired, reboot to "
            "activate (0x00000000000123a4).",
        ),
        Fault(
            "pcie-downgrade",
            "PCIe link trained below its maximum (generation and width)",
            True,
            effects=Effects(pcie_gen_drop=2, pcie_width_divisor=2),
        ),
        Fault(
            "nvlink-down",
            "all NVLinks of the GPU inactive",
            True,
            "nvlink",
            Effects(xid=74, nvlink_down=True),
            "74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 0(0x0, 0x0, 0x10000, "
            "0x0, 0x0, 0x0, 0x0)",
        ),
        Fault(
            "slow-gpu",
            "the GPU moves data at 40% of its normal rate, link trained at its maximum (a degraded "
            "board or a throttled path only a bandwidth test sees)",
            True,
            effects=Effects(bandwidth_factor=0.4),
        ),
        Fault(
            "dcgm-memory",
            "DCGM's memory test fails on the GPU (a bad HBM/GDDR cell nvidia-smi does not show)",
            True,
            effects=Effects(dcgm_memory_fails=True),
        ),
        Fault(
            "fabricmanager-failed",
            "NVIDIA Fabric Manager fails to start; GPU fabric state stays In Progress",
            False,
            "nvswitch",
            Effects(fabric_failed=True),
        ),
        Fault(
            "driver-mismatch",
            "NVML reports 'Driver/library version mismatch' (exit 18), as after a driver "
            "upgrade without reboot",
            False,
            effects=Effects(driver_mismatch=True),
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
    spec, index = _resolve(hw, fault, gpu)
    new = copy.deepcopy(hw)
    faults = new.setdefault("faults", [])
    if not any(f.get("fault") == fault and f.get("gpu") == index for f in faults):
        faults.append({"fault": fault, "gpu": index, "effects": spec.effects.as_dict()})
    return new


def clear_faults(hw: dict) -> dict:
    new = copy.deepcopy(hw)
    new["faults"] = []
    return new


def _pci(gpu: dict) -> str:
    """'00000000:AB:00.0' -> '0000:ab:00': the kernel prints PCI addresses in lower case, without the function."""
    return gpu["pci_bus_id"][4:-2].lower()


def journal_messages(hw: dict, fault: str, gpu: int | None) -> list[str]:
    """Kernel lines a real host logs for this fault (empty for faults the kernel does not log): its Xid line,
    then the fallen-off-the-bus notice for a fault that takes the GPU off the bus."""
    spec, index = _resolve(hw, fault, gpu)
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
    xid = [f"NVRM: Xid (PCI:{pci}): {spec.xid_log.format(pci=pci)}"] if spec.xid_log else []
    return xid + (fell_off if spec.effects.off_bus else [])
