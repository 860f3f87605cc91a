"""The emulated driver as the lab's Python side reads it: the machine, the driver's own state, faults.

Every emulated NVIDIA tool and library on a lab host is Go over package machine (``lab/silicon``: the mock
libnvidia-ml.so.1 and libcuda.so.1, nvidia-smi, dcgmi, nvbandwidth, the daemons, nvidia-container-cli); none of this
module is installed in a host. It remains for what the lab renders or simulates outside the hosts: the kernel's
files (``kernel_files``: /dev, /proc/driver/nvidia and sysfs, rendered from the host's hardware file and state
file), the fault catalogue's combining rules (``faults.Effects``) and the lab's dcgm-exporter
(``lab/dcgm_exporter``). The machine (GPUs, faults) is the read-only hardware file the lab writes; what a real
driver keeps in the kernel (MIG mode, GPU/compute instances, persistence mode, the loaded module version) lives in
the host's state file, which reads as reset when the boot id changes, as a reboot resets a real GPU. The Go twin of
every reading here is in package machine; tests/unit/test_mock_nvml.py and test_fault_catalogue.py keep them in
step.
"""

from __future__ import annotations

import json
import typing
import uuid

DEFAULT_STATE = "/var/lib/nvidia-emu/state.json"
DRIVER_DIR = "/usr/lib/nvidia-emu"
CUDA_BY_BRANCH = {"595": "13.2", "590": "13.1", "580": "13.0", "575": "12.9", "570": "12.8", "550": "12.4"}

# The device nodes a GPU container was given (lab-internal; the lab's runc wrapper sets it in every GPU container):
# their paths, comma separated. What they reveal of the machine
# is package machine's rule (lab/silicon/machine/contain.go), which the mock NVML and CUDA and the tools apply.
CONTAINER_DEVICES = "GPUREADY_LAB_CONTAINER_DEVICES"
# /proc/driver/nvidia-caps/mig-minors: config 1, monitor 2, then per GPU 15 GPU instances, each with its access
# minor followed by 8 compute instances' (gpu0/gi1/access is 12, gpu0/gi1/ci0/access 13).
GIS_PER_GPU = 15
CIS_PER_GI = 8


def gi_minor(gpu_minor: int, gi: int) -> int:
    return 3 + (gpu_minor * GIS_PER_GPU + gi) * (1 + CIS_PER_GI)


def ci_minor(gpu_minor: int, gi: int, ci: int) -> int:
    return gi_minor(gpu_minor, gi) + 1 + ci


# How the effects of several faults on one GPU (or on the host) combine, and each effect's value without a fault:
# flags OR, counts add, the worst of a PCIe field or a bandwidth factor, the largest XID. The one table of the
# rules: gpuready.lab.faults.Effects (where each effect is documented) combines by it too; package machine's
# Effects.combine is its Go twin (tests/unit/test_fault_catalogue.py keeps the three in step).
COMBINE: dict[str, tuple[typing.Callable[[list], object], object]] = {
    "off_bus": (any, False),
    "xid": (max, 0),
    "ecc_uncorrected": (sum, 0),
    "dbe_remapped": (sum, 0),
    "row_remap_pending": (any, False),
    "retired_pages_pending": (any, False),
    "pcie_gen_drop": (max, 0),
    "pcie_width_divisor": (max, 1),
    "nvlink_down": (any, False),
    "bandwidth_factor": (min, 1.0),
    "dcgm_memory_fails": (any, False),
    "fabric_failed": (any, False),
    "driver_mismatch": (any, False),
}


def combine(effects: list[dict]) -> dict:
    """The effects of several faults together, by COMBINE's rules; every effect is in the result."""
    return {
        name: rule([none, *(e[name] for e in effects if name in e)]) for name, (rule, none) in COMBINE.items()
    }


class Effects:
    """The combined effects of the faults on one GPU (or the host), ``effects["name"]``: each hardware-file fault
    line carries its effects (gpuready.lab.faults.Effects, where every field is documented); the tools render
    these, never a fault's name."""

    def __init__(self, lines: list[dict]):
        self._values = combine([line.get("effects") or {} for line in lines])

    def __getitem__(self, name: str) -> typing.Any:
        return self._values[name]


# What the driver reports, derived from a GPU's hardware entry and its combined effects (Effects, or
# gpuready.lab.faults.Effects.as_dict()): the one Python derivation, which kernel_files' sysfs
# link and the lab's dcgm-exporter read. Package machine's View is its Go twin (the mock NVML and CUDA, the
# tools); tests/unit/test_mock_nvml.py checks these functions against what NVML reports.
def pcie_link(gpu: dict, effects: typing.Any) -> tuple[int, int]:
    """The trained PCIe link (generation, width): the maximum, at least gen 1 and x1 after the faults."""
    gen = max(1, gpu["max_pcie_gen"] - effects["pcie_gen_drop"])
    return gen, max(1, gpu["max_pcie_width"] // max(1, effects["pcie_width_divisor"]))


def remapped_rows(gpu: dict, effects: typing.Any) -> tuple[int, int, bool]:
    """Remapped rows (GPUs with row remapping): correctable, uncorrectable, a remap pending."""
    unc, pending = (1, True) if effects["row_remap_pending"] else (0, False)
    if gpu.get("row_remapping"):
        unc += effects["dbe_remapped"]
    return 0, unc, pending


def _fresh_gpu_state(mig_enabled: bool) -> dict:
    return {"mig_current": mig_enabled, "mig_pending": mig_enabled, "persistence": False, "gis": []}


class Driver:
    """The driver of one host as its state file says, read-only: ``Driver(hardware, state_text, boot)``.

    The kernel files are rendered from the same reading of the state the tools in the host use (package machine's
    loadState: a reboot resets it), without taking the host's lock or writing its state file. ``boot`` is the host's
    current boot id; None takes the state as this boot's.
    """

    def __init__(self, hw: dict, state_text: str | None, boot: str | None) -> None:
        self.hw = hw
        raw = json.loads(state_text) if state_text and state_text.strip() else {}
        self.state = self._state_from(raw, boot or raw.get("boot_id") or "unknown-boot")

    def _state_from(self, state: dict, current: str) -> dict:
        gpus = state.get("gpus", {})
        if state.get("boot_id") != current:
            # A reboot: pending MIG mode becomes current, instances, persistence and the loaded module
            # are gone, exactly as after a real reboot.
            new_gpus = {}
            for gpu in self.hw["gpus"]:
                old = gpus.get(gpu["uuid"])
                pending = bool(old["mig_pending"]) if old else False
                new_gpus[gpu["uuid"]] = _fresh_gpu_state(pending and gpu.get("mig_capable", False))
            state = {"boot_id": current, "kmod": None, "gpus": new_gpus}
        for gpu in self.hw["gpus"]:
            state["gpus"].setdefault(gpu["uuid"], _fresh_gpu_state(False))
        return state

    def gpu_effects(self, index: int) -> Effects:
        """The effects of the faults injected on GPU ``index``."""
        return Effects([f for f in self.hw.get("faults", []) if f.get("gpu") == index])

    def off_bus(self, index: int) -> bool:
        return self.gpu_effects(index)["off_bus"]

    def pcie_current(self, gpu: dict) -> tuple[int, int]:
        """The trained PCIe link (generation, width) of the GPU (pcie_link)."""
        return pcie_link(gpu, self.gpu_effects(gpu["index"]))

    def gpu_state(self, gpu: dict) -> dict:
        return self.state["gpus"][gpu["uuid"]]

    def mig_current(self, gpu: dict) -> bool:
        return bool(self.gpu_state(gpu)["mig_current"]) and gpu.get("mig_capable", False)


def mig_uuid(gpu_uuid: str, gi: int, ci: int) -> str:
    """A stable MIG device UUID (real ones are name-based UUIDs too, version 5)."""
    return "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_OID, f"{gpu_uuid}/{gi}/{ci}"))


def mig_devices(gpu: dict, gpu_state: dict) -> list[dict]:
    """The GPU's MIG devices (one per compute instance) from its driver state, in nvidia-smi's order (GPU instance
    id, then compute instance id): index, gi, ci, profile (the GPU instance's), name, start (the GPU instance's
    placement), full (the compute instance spans its GPU instance), sm, uuid. The caller checks MIG mode. Package
    machine's migDevices derives the same for the mock NVML and CUDA."""
    profiles = {p["profile_id"]: p for p in gpu.get("mig_profiles") or []}
    devices: list[dict] = []
    for gi in sorted(gpu_state.get("gis") or [], key=lambda g: g["id"]):
        prof = profiles.get(gi["profile_id"])
        if prof is None:
            continue
        for ci in sorted(gi.get("cis") or [], key=lambda c: c["id"]):
            full = ci["size"] >= prof["compute_slices"]
            devices.append(
                {
                    "index": len(devices),
                    "gi": gi["id"],
                    "ci": ci["id"],
                    "profile": prof,
                    "name": prof["name"],
                    "start": int(gi.get("start") or 0),
                    "full": full,
                    "sm": prof["sm_count"]
                    if full
                    else prof["sm_count"] * ci["size"] // max(prof["compute_slices"], 1),
                    "uuid": mig_uuid(gpu["uuid"], gi["id"], ci["id"]),
                }
            )
    return devices
