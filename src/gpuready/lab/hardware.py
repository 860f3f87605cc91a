"""Lab hardware profiles: the machine a lab host pretends to be, written to a file the emulated driver reads.

The hardware file is the machine, not the software: the lab writes it outside any package and bind-mounts it
read-only into the host at ``HOST_MACHINE_DIR``; the emulated driver's tools and libraries (no gpuready inside
the host: all of them are the Go of silicon/) read everything they need from it. That is why ``make_hardware``
copies the catalogue's model facts and the model's MIG profile table into the file instead of naming the model.

GPU model facts come from :mod:`gpuready.nvidia.catalogue`. What the catalogue does not hold and only the
emulator needs (board part numbers, VBIOS, idle clocks, BAR1 size, sub-system ids, PCI bus ids of real boards)
is in ``_BOARD`` below, taken from the real captures in /work/shared/fixtures (file named per entry).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from gpuready import atomic
from gpuready.nvidia.catalogue import lookup_model, mig_profiles, mig_slices

HOST_MACHINE_DIR = "/opt/gpuready-lab/machine"
HARDWARE_SCHEMA = 1


@dataclass(frozen=True)
class Profile:
    """One lab machine type: which GPUs, how many, how they are wired."""

    name: str
    model: str
    gpu_count: int
    nvswitch: bool
    bus_ids: tuple[str, ...]  # PCI bus ids of the GPUs, as real boards of this kind enumerate them
    numa_nodes: int
    cpus: int
    description: str
    # a cloud VM with its GPUs passed through: NVML says virtualization mode PASSTHROUGH and answers NOT_SUPPORTED
    # for every NVLink (as a lent H200 VM did: tests/fixtures/device/h200__580.159.04), nvidia-smi "Pass-Through"
    passthrough: bool = False


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            "h100-sxm-8", "NVIDIA H100 80GB HBM3", 8, True,
            ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"), 2, 112,
            "HGX H100 8-GPU: 8x H100 SXM5 80GB, 4 NVSwitches, Fabric Manager",
        ),
        Profile(
            "a100-80gb-4", "NVIDIA A100-SXM4-80GB", 4, False, ("07", "0F", "47", "4E"), 2, 64,
            "HGX A100 4-GPU: 4x A100 SXM4 80GB, NVLink between every pair, MIG capable",
        ),
        Profile(
            "l4-1", "NVIDIA L4", 1, False, ("00:03",), 1, 8, "1x L4 24GB (cloud VM, e.g. GCP g2-standard-8)", True,
        ),
        Profile("l40s-2", "NVIDIA L40S", 2, False, ("4A", "61"), 1, 32, "2x L40S 48GB PCIe"),
        Profile(
            "t4-1", "Tesla T4", 1, False, ("00:1E",), 1, 4, "1x Tesla T4 16GB (cloud VM, e.g. AWS g4dn.xlarge)", True,
        ),
        Profile(
            "h200-1", "NVIDIA H200", 1, False, ("00:06",), 1, 16,
            "1x H200 141GB passed through to a VM (the lent machine of tests/fixtures/device/h200__580.159.04)", True,
        ),
    )
}  # fmt: skip

# Per-model board facts not in the catalogue (source capture per entry). Keys are catalogue model names.
_BOARD: dict[str, dict] = {
    # captures/*nvidia-h100-80gb-hbm3__590.48.01.txt
    "NVIDIA H100 80GB HBM3": {
        "architecture": "Hopper",
        "sub_system": "16C110DE",
        "vbios": "96.00.A5.00.01",
        "board_part": "692-2G520-0200-000",
        "gpu_part": "2330-885-A1",
        "inforom": "G520.0200.00.05",
        "reserved_mib": 479,
        "bar1_mib": 131072,
        "min_power_w": 200,
        "idle_power_w": 69.85,
        "temp_c": 41,
        "mem_temp_c": 48,
        "clocks": {
            "graphics_idle": 345,
            "memory": 2619,
            "video_idle": 765,
            "max_graphics": 1980,
            "max_video": 1545,
        },
        "nvlink_gbps": 26.562,
        "row_banks": 2560,
        "ecc": True,
        "row_remapping": True,
        "page_retirement": False,
    },
    # device/h200__580.159.04 (nvidia-smi -q, nvml-probe.json of a lent H200, driver 580.159.04)
    "NVIDIA H200": {
        "architecture": "Hopper",
        "sub_system": "18BF10DE",
        "vbios": "96.00.A5.00.1A",
        "board_part": "692-2G520-0282-000",
        "gpu_part": "2335-895-A1",
        "inforom": "G520.0282.02.02",
        "reserved_mib": 616,
        "bar1_mib": 262144,
        "min_power_w": 200,
        "idle_power_w": 79.74,
        "temp_c": 38,
        "mem_temp_c": 38,
        "clocks": {
            "graphics_idle": 345,
            "memory": 3201,
            "video_idle": 765,
            "max_graphics": 1980,
            "max_video": 1545,
        },
        "nvlink_gbps": 26.562,  # as the H100 (NVLink 4); the lent VM showed no NVLink
        "row_banks": 3072,
        "ecc": True,
        "row_remapping": True,
        "page_retirement": False,
        "inactive_remap_rows_text": True,  # its nvidia-smi -q text lists "Inactive ... Error" rows
    },
    # nvidia-smi-xml/telegraf__a100-sxm4-v12.xml, nvidia-smi-text/gpud__nvidia-smi.nvlink.status.a100
    "NVIDIA A100-SXM4-80GB": {
        "architecture": "Ampere",
        "sub_system": "147F10DE",
        "vbios": "92.00.36.00.02",
        "board_part": "692-2G506-0212-002",
        "gpu_part": "20B2-895-A1",
        "inforom": "G506.0212.00.01",
        "reserved_mib": 869,
        "bar1_mib": 131072,
        "min_power_w": 100,
        "idle_power_w": 67.03,
        "temp_c": 27,
        "mem_temp_c": 44,
        "clocks": {
            "graphics_idle": 1275,
            "memory": 1593,
            "video_idle": 1275,
            "max_graphics": 1410,
            "max_video": 1290,
        },
        "nvlink_gbps": 25,
        "row_banks": 640,
        "ecc": True,
        "row_remapping": True,
        "page_retirement": False,
    },
    # public L4 nvidia-smi -q (GCP g2); values where no capture exists follow the L40S (same family)
    "NVIDIA L4": {
        "architecture": "Ada Lovelace",
        "sub_system": "16CA10DE",
        "vbios": "95.04.29.00.06",
        "board_part": "900-2G193-0000-001",
        "gpu_part": "27B8-895-A1",
        "inforom": "G193.0200.00.01",
        "reserved_mib": 434,
        "bar1_mib": 32768,
        "min_power_w": 40,
        "idle_power_w": 16.31,
        "temp_c": 36,
        "mem_temp_c": None,
        "clocks": {
            "graphics_idle": 210,
            "memory": 405,
            "video_idle": 795,
            "max_graphics": 2040,
            "max_video": 1770,
        },
        "nvlink_gbps": 0,
        "row_banks": 96,
        "ecc": True,
        "row_remapping": True,
        "page_retirement": False,
    },
    # captures/*nvidia-l40s__595.80.txt
    "NVIDIA L40S": {
        "architecture": "Ada Lovelace",
        "sub_system": "185110DE",
        "vbios": "95.02.66.00.02",
        "board_part": "900-2G133-0080-000",
        "gpu_part": "26B9-896-A1",
        "inforom": "G133.0500.00.05",
        "reserved_mib": 609,
        "bar1_mib": 65536,
        "min_power_w": 100,
        "idle_power_w": 35.52,
        "temp_c": 31,
        "mem_temp_c": None,
        "clocks": {
            "graphics_idle": 210,
            "memory": 405,
            "video_idle": 1965,
            "max_graphics": 2520,
            "max_video": 1965,
        },
        "nvlink_gbps": 0,
        "row_banks": 192,
        "ecc": True,
        "row_remapping": True,
        "page_retirement": False,
        "inactive_remap_rows_text": True,  # its nvidia-smi -q text lists "Inactive ... Error" rows
    },
    # nvidia-smi-xml/telegraf__tesla-t4.xml
    "Tesla T4": {
        "architecture": "Turing",
        "sub_system": "12A210DE",
        "vbios": "90.04.84.00.06",
        "board_part": "900-2G183-0000-001",
        "gpu_part": "1EB8-895-A1",
        "inforom": "G183.0200.00.02",
        "reserved_mib": 388,
        "bar1_mib": 256,
        "min_power_w": 60,
        "idle_power_w": 13.92,
        "temp_c": 29,
        "mem_temp_c": None,
        "clocks": {
            "graphics_idle": 300,
            "memory": 405,
            "video_idle": 540,
            "max_graphics": 1590,
            "max_video": 1470,
        },
        "nvlink_gbps": 0,
        "row_banks": 0,
        "ecc": True,
        "row_remapping": False,
        "page_retirement": True,
    },
}


def _digest(*parts: object) -> str:
    return hashlib.sha256("/".join(str(p) for p in parts).encode()).hexdigest()


def _gpu_uuid(profile: str, node: int, index: int) -> str:
    h = _digest("uuid", profile, node, index)
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _serial(profile: str, node: int, index: int) -> str:
    return "1654" + str(int(_digest("serial", profile, node, index)[:12], 16))[-9:].rjust(9, "0")


def _bus_id(short: str) -> str:
    """'18' -> '00000000:18:00.0' (bus 0x18, device 0); '00:1E' -> '00000000:00:1E.0' (a VM's slot)."""
    bus, dev = [*short.split(":"), "00"][:2]
    return f"00000000:{bus.upper()}:{dev.upper()}.0"


def _mig_table(model_name: str) -> list[dict]:
    table = []
    for prof in mig_profiles(model_name).values():
        entry = asdict(prof)
        entry["placements"] = list(prof.placements)
        table.append(entry)
    return table


def make_hardware(profile: str, node_index: int) -> dict:
    """The hardware file for lab host ``node_index`` of ``profile``: same inputs, same machine."""
    if profile not in PROFILES:
        raise ValueError(f"unknown lab hardware profile {profile!r}; known: {', '.join(sorted(PROFILES))}")
    if node_index < 0:
        raise ValueError(f"node index must be >= 0, got {node_index}")
    prof = PROFILES[profile]
    model = lookup_model(prof.model)
    board = _BOARD[model.name]
    mig_table = _mig_table(model.name) if model.mig_capable else []
    mig_compute, mig_memory = mig_slices(model.name) if model.mig_capable else (0, 0)
    per_node = max(prof.cpus // prof.numa_nodes, 1)
    gpus = []
    for index in range(prof.gpu_count):
        numa = index * prof.numa_nodes // prof.gpu_count
        gpus.append(
            {
                "index": index,
                "minor_number": index,
                "name": model.name,
                "brand": "NVIDIA",
                "architecture": board["architecture"],
                "family": model.family,
                "uuid": _gpu_uuid(profile, node_index, index),
                "serial": _serial(profile, node_index, index),
                "pci_bus_id": _bus_id(prof.bus_ids[index]),
                "pci_device_id": model.pci_device_id.removeprefix("0x").upper(),
                "pci_sub_system_id": board["sub_system"],
                "memory_mib": model.memory_mib,
                "reserved_mib": board["reserved_mib"],
                "bar1_mib": board["bar1_mib"],
                "power_limit_w": model.power_limit_w,
                "min_power_limit_w": board["min_power_w"],
                "power_idle_w": board["idle_power_w"],
                "temperature_c": board["temp_c"] + index % 3,
                "memory_temperature_c": board["mem_temp_c"],
                "max_pcie_gen": model.max_pcie_gen,
                "max_pcie_width": model.max_pcie_width,
                "nvlink_links": 0 if prof.passthrough else model.nvlink_links,
                "nvlink_gbps": board["nvlink_gbps"],
                "mig_capable": model.mig_capable,
                "mig_compute_slices": mig_compute,
                "mig_memory_slices": mig_memory,
                "mig_profiles": mig_table,
                "compute_capability": "{}.{}".format(*model.compute_capability),
                "sm_count": model.sm_count,
                "vbios_version": board["vbios"],
                "board_part_number": board["board_part"],
                "gpu_part_number": board["gpu_part"],
                "inforom_image": board["inforom"],
                "module_id": index + 1,
                "numa_node": numa,
                "cpu_affinity": f"{numa * per_node}-{(numa + 1) * per_node - 1}",
                "clocks": dict(board["clocks"]),
                "ecc_supported": board["ecc"],
                "row_remapping": board["row_remapping"],
                "row_remap_banks": board["row_banks"],
                "page_retirement": board["page_retirement"],
                "inactive_remap_rows_text": board.get("inactive_remap_rows_text", False),
            }
        )
    return {
        "schema": HARDWARE_SCHEMA,
        "profile": profile,
        "node_index": node_index,
        "system": {
            "description": prof.description,
            "nvswitch": prof.nvswitch,
            "nvswitch_count": 4 if prof.nvswitch else 0,
            "numa_nodes": prof.numa_nodes,
            "cpus": prof.cpus,
            "virtualization": "Pass-Through" if prof.passthrough else "None",
        },
        "gpus": gpus,
        "faults": [],
    }


def write_hardware(path: Path, hw: dict) -> None:
    """Write atomically (temp file + rename) so a running emulator never reads half a machine."""
    atomic.write_text(path, json.dumps(hw, indent=1, sort_keys=True) + "\n")


def read_hardware(path: Path) -> dict:
    hw = json.loads(Path(path).read_text(encoding="utf-8"))
    if hw.get("schema") != HARDWARE_SCHEMA:
        raise ValueError(f"{path}: hardware file schema {hw.get('schema')!r}, expected {HARDWARE_SCHEMA}")
    return hw
