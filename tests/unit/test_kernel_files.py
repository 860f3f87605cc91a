"""The NVIDIA kernel files a lab host gets (gpuready.lab.kernel_files), rendered from a machine and driver state."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from static_tools import static_tools

from gpuready.lab import faults, hardware, kernel_files
from gpuready.lab.emulator import nvemu

MACHINE_DEVICES = (
    "Character devices:\n  1 mem\n  4 /dev/vc/0\n136 pts\n\nBlock devices:\n  7 loop\n254 virtblk\n"
)


def host(
    tmp_path: Path,
    profile: str,
    *fault: tuple[str, int | None],
    kmod: str | None = "580.95.05",
    state: dict[str, Any] | None = None,
) -> tuple[Path, Path]:
    """A machine dir (hardware file, the static tools that read it) and a host root (installed module version,
    driver state)."""
    machine, root = tmp_path / "machine", tmp_path / "root"
    machine.mkdir()
    (machine / nvemu.TOOLS).symlink_to(static_tools())
    hw = hardware.make_hardware(profile, 1)
    for name, gpu in fault:
        hw = faults.apply_fault(hw, name, gpu)
    hardware.write_hardware(machine / "hardware.json", hw)
    emu = root / "usr/lib/nvidia-emu"
    emu.mkdir(parents=True)
    if kmod:
        (emu / "kmod-version").write_text(kmod + "\n")
    if state is not None:
        (root / "var/lib/nvidia-emu").mkdir(parents=True)
        (root / "var/lib/nvidia-emu/state.json").write_text(json.dumps(state))
    return machine, root


def rendered(machine: Path, root: Path, boot: str | None = None) -> dict[str, Any]:
    return kernel_files.render(kernel_files.read_machine(machine, root, boot), MACHINE_DEVICES)


def mig_state(machine: Path, boot: str = "boot-1") -> dict[str, Any]:
    """GPU 0 in MIG mode with GPU instance 1 (3g.40gb) holding compute instance 0, as nvidia-smi mig leaves it."""
    hw = hardware.read_hardware(machine / "hardware.json")
    gi = {
        "id": 1,
        "profile_id": 9,
        "start": 4,
        "size": 4,
        "cis": [{"id": 0, "profile_id": 2, "start": 0, "size": 3}],
    }
    gpus = {
        g["uuid"]: {"mig_current": False, "mig_pending": False, "persistence": False, "gis": []}
        for g in hw["gpus"]
    }
    gpus[hw["gpus"][0]["uuid"]] = {
        "mig_current": True,
        "mig_pending": True,
        "persistence": False,
        "gis": [gi],
    }
    return {"boot_id": boot, "kmod": None, "gpus": gpus}


def test_healthy_h100_has_every_node_and_file(tmp_path: Path) -> None:
    files = rendered(*host(tmp_path, "h100-sxm-8"))
    dev = files["dev"]
    assert {f"nvidia{i}": ("char", 195, i, 0o666) for i in range(8)}.items() <= dev.items()
    assert dev["nvidiactl"] == ("char", 195, 255, 0o666)
    assert dev["nvidia-modeset"] == ("char", 195, 254, 0o666)
    assert dev["nvidia-uvm"][1:3] == (510, 0) and dev["nvidia-uvm-tools"][1:3] == (510, 1)
    assert dev["nvidia-caps/nvidia-cap1"] == ("char", 509, 1, 0o400)
    assert dev["nvidia-caps/nvidia-cap2"] == ("char", 509, 2, 0o444)
    proc = files["proc-driver"]
    assert proc["nvidia/version"][1].startswith(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  "
    )
    info = proc["nvidia/gpus/0000:18:00.0/information"][1]
    assert info.splitlines()[0] == "Model: \t\t NVIDIA H100 80GB HBM3"
    assert "Bus Location: \t 0000:18:00.0\n" in info and "Device Minor: \t 0\n" in info
    assert len([p for p in proc if p.startswith("nvidia/gpus/")]) == 8
    assert (
        proc["nvidia/capabilities/mig/config"][1]
        == "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n"
    )
    assert proc["nvidia/capabilities/mig/monitor"][1].startswith("DeviceFileMinor: 2\nDeviceFileMode: 292\n")
    assert not [p for p in proc if "/mig/gi" in p]  # no MIG instances
    sysfs = files["sys-pci-devices"]
    assert sysfs["0000:18:00.0/vendor"] == ("file", "0x10de\n")
    assert sysfs["0000:18:00.0/device"] == ("file", "0x2330\n")
    assert sysfs["0000:18:00.0/class"] == ("file", "0x030200\n")
    assert sysfs["0000:18:00.0/current_link_speed"] == ("file", "32.0 GT/s PCIe\n")
    assert sysfs["0000:18:00.0/current_link_width"] == ("file", "16\n")
    assert {sysfs[f"{d}/numa_node"][1] for d in (kernel_files.bdf(g) for g in _bus_ids(tmp_path))} == {
        "0\n",
        "1\n",
    }
    devices = files["proc-devices"]
    assert "195 nvidia\n195 nvidiactl\n" in devices and "509 nvidia-caps\n510 nvidia-uvm\n" in devices
    assert "507 nvidia-nvswitch\n" in devices  # an NVSwitch system
    assert devices.startswith("Character devices:\n  1 mem\n") and devices.endswith(
        "\nBlock devices:\n  7 loop\n254 virtblk\n"
    )


def _bus_ids(tmp_path: Path) -> list[str]:
    return [g["pci_bus_id"] for g in hardware.read_hardware(tmp_path / "machine/hardware.json")["gpus"]]


def test_a100_mig_instances_get_access_files_and_cap_nodes(tmp_path: Path) -> None:
    machine, root = host(tmp_path, "a100-80gb-4")
    (root / "var/lib/nvidia-emu").mkdir(parents=True)
    (root / "var/lib/nvidia-emu/state.json").write_text(json.dumps(mig_state(machine)))
    files = rendered(machine, root, boot="boot-1")
    proc, dev = files["proc-driver"], files["dev"]
    assert proc["nvidia/capabilities/gpu0/mig/gi1/access"][1].startswith(
        "DeviceFileMinor: 12\nDeviceFileMode: 292\n"
    )
    assert proc["nvidia/capabilities/gpu0/mig/gi1/ci0/access"][1].startswith("DeviceFileMinor: 13\n")
    assert dev["nvidia-caps/nvidia-cap12"] == ("char", 509, 12, 0o444)
    assert dev["nvidia-caps/nvidia-cap13"] == ("char", 509, 13, 0o444)
    assert not [p for p in proc if p.startswith("nvidia/capabilities/gpu1")]
    minors = proc["nvidia-caps/mig-minors"][1].splitlines()
    assert minors[:4] == ["config 1", "monitor 2", "gpu0/gi0/access 3", "gpu0/gi0/ci0/access 4"]
    assert "gpu0/gi1/access 12" in minors and "gpu1/gi0/access 138" in minors
    # registered by the module with no NVSwitch too, as on a lent H200 VM (tests/fixtures/device/)
    assert "507 nvidia-nvswitch" in files["proc-devices"]


def test_a_state_from_an_earlier_boot_has_no_instances(tmp_path: Path) -> None:
    """The host rebooted since nvidia-smi wrote the state: instances are gone, as nvemu reads it."""
    machine, root = host(tmp_path, "a100-80gb-4")
    (root / "var/lib/nvidia-emu").mkdir(parents=True)
    (root / "var/lib/nvidia-emu/state.json").write_text(json.dumps(mig_state(machine, boot="boot-1")))
    files = rendered(machine, root, boot="boot-2")
    assert not [p for p in files["proc-driver"] if "/mig/gi" in p]
    assert not [p for p in files["dev"] if p.startswith("nvidia-caps/") and p[-1] not in "12"]


def test_no_driver_installed_means_no_nodes_and_no_proc_driver(tmp_path: Path) -> None:
    files = rendered(*host(tmp_path, "h100-sxm-8", kmod=None))
    assert files["dev"] == {} and files["proc-driver"] == {}
    assert files["proc-devices"] == MACHINE_DEVICES
    assert "nvidia" not in files["proc-devices"]
    assert "0000:18:00.0/vendor" in files["sys-pci-devices"]  # the GPUs are on the bus without a driver


def test_a_loaded_module_stays_after_its_package_is_removed(tmp_path: Path) -> None:
    machine, root = host(tmp_path, "l4-1", kmod=None, state={"boot_id": "b", "kmod": "570.1.2", "gpus": {}})
    files = rendered(machine, root, boot="b")
    assert "570.1.2" in files["proc-driver"]["nvidia/version"][1]


def test_driver_mismatch_keeps_the_old_module_loaded(tmp_path: Path) -> None:
    machine, root = host(
        tmp_path, "l4-1", ("driver-mismatch", None), state={"boot_id": "b", "kmod": "570.1.2", "gpus": {}}
    )
    files = rendered(machine, root, boot="b")
    assert "  570.1.2  " in files["proc-driver"]["nvidia/version"][1]
    assert "nvidia0" in files["dev"]


def test_pcie_downgrade_lowers_the_current_link_only(tmp_path: Path) -> None:
    files = rendered(*host(tmp_path, "h100-sxm-8", ("pcie-downgrade", 1)))
    sysfs = files["sys-pci-devices"]
    d = kernel_files.bdf(_bus_ids(tmp_path)[1])
    assert sysfs[f"{d}/current_link_speed"][1] == "8.0 GT/s PCIe\n"  # gen 5 -> 3, as nvidia-smi reports it
    assert sysfs[f"{d}/current_link_width"][1] == "8\n"
    assert sysfs[f"{d}/max_link_speed"][1] == "32.0 GT/s PCIe\n" and sysfs[f"{d}/max_link_width"][1] == "16\n"
    other = kernel_files.bdf(_bus_ids(tmp_path)[0])
    assert sysfs[f"{other}/current_link_width"][1] == "16\n"


@pytest.mark.parametrize("fault", ["off-bus", "xid-79"])
def test_a_gpu_off_the_bus_keeps_its_node_and_entries_with_dead_link_registers(
    tmp_path: Path, fault: str
) -> None:
    files = rendered(*host(tmp_path, "a100-80gb-4", (fault, 2)))
    d = kernel_files.bdf(_bus_ids(tmp_path)[2])
    assert files["dev"]["nvidia2"] == ("char", 195, 2, 0o666)
    assert f"nvidia/gpus/{d}/information" in files["proc-driver"]
    sysfs = files["sys-pci-devices"]
    assert sysfs[f"{d}/vendor"][1] == "0x10de\n"  # cached at enumeration
    assert sysfs[f"{d}/current_link_speed"][1] == "Unknown\n"
    assert sysfs[f"{d}/current_link_width"][1] == "63\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_write_makes_nodes_and_a_second_render_removes_what_went(tmp_path: Path) -> None:
    machine, root = host(tmp_path, "a100-80gb-4")
    (root / "var/lib/nvidia-emu").mkdir(parents=True)
    state_file = root / "var/lib/nvidia-emu/state.json"
    state_file.write_text(json.dumps(mig_state(machine)))
    kernel_files.refresh(machine, root)
    kdir = machine / "kernel"
    node = (kdir / "dev/nvidia-caps/nvidia-cap13").stat()
    assert stat.S_ISCHR(node.st_mode) and (os.major(node.st_rdev), os.minor(node.st_rdev)) == (509, 13)
    assert stat.S_IMODE(node.st_mode) == 0o444
    proc_inode = (kdir / "proc-driver").stat().st_ino
    state = mig_state(machine)
    next(iter(state["gpus"].values()))["gis"] = []  # nvidia-smi mig -dci -dgi
    state_file.write_text(json.dumps(state))
    kernel_files.refresh(machine, root)
    assert not (kdir / "dev/nvidia-caps/nvidia-cap13").exists()
    assert not (kdir / "proc-driver/nvidia/capabilities/gpu0").exists()
    assert (kdir / "proc-driver").stat().st_ino == proc_inode  # a bind of the directory sees the change
    (root / "usr/lib/nvidia-emu/kmod-version").unlink()
    devices = kdir / "proc-devices"
    devices_inode = devices.stat().st_ino
    kernel_files.refresh(machine, root)
    assert sorted(os.listdir(kdir / "dev")) == [] and sorted(os.listdir(kdir / "proc-driver")) == []
    assert devices.stat().st_ino == devices_inode and "nvidia" not in devices.read_text()


def test_sync_tree_leaves_what_it_does_not_manage(tmp_path: Path) -> None:
    (tmp_path / "null").write_text("")
    (tmp_path / "nvidia9").write_text("stale")
    kernel_files.sync_tree(tmp_path, {"nvidia-caps": ("dir",)}, managed=lambda top: top.startswith("nvidia"))
    assert sorted(os.listdir(tmp_path)) == ["null", "nvidia-caps"]
