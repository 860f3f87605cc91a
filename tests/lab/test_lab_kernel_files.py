"""Inside a lab host: the emulated GPUs' device nodes, /proc/driver/nvidia and PCI sysfs at the real paths, following
the driver (installed or not), MIG instances created in the host, faults injected by the lab, and a reboot.

One host of its own (an A100 x4, MIG capable; no control plane) in a state dir of its own, numbered 201 so that it
runs beside the session lab or another helper's lab on the same machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Lab, lab_skip_reason

from gpuready.lab import hosts, kernel_files
from gpuready.lab.state import LabPaths

pytestmark = pytest.mark.lab

NODE = "gpu-node-201"
STATE_DIR = Path(os.environ.get("GPUREADY_LAB_KFILES_DIR", "/var/lib/gpuready-lab-kfiles"))
BUSES = ["0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0"]


@pytest.fixture(scope="module")
def one_host() -> Iterator[Lab]:
    if reason := lab_skip_reason():
        pytest.skip(reason)
    shutil.rmtree(STATE_DIR, ignore_errors=True)
    paths = LabPaths(STATE_DIR)
    try:
        # no control plane, so no kubelet runs: the kubelet mode does not apply
        state = hosts.up(paths, nodes=1, profiles=["a100-80gb-4"], control_plane=False, first_index=201)
        yield Lab(paths, state)
    finally:
        with contextlib.suppress(Exception):
            hosts.down(paths, quiet=True, poweroff=False)  # thrown away: no orderly shutdown
        mounts = Path("/proc/mounts").read_text()
        assert str(STATE_DIR) not in mounts, "a mount of the lab is left"


def wait_for(lab: Lab, command: str, seconds: float = 10.0) -> subprocess.CompletedProcess[str]:
    """The watcher renders within a second of a change inside the host."""
    deadline = time.monotonic() + seconds
    while True:
        result = lab.ssh(NODE, command, check=False)
        if result.returncode == 0 or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


def sysfs(lab: Lab, bus: str, *names: str) -> str:
    """The GPU's sysfs attributes, one a line (the host's sh has no brace expansion)."""
    return lab.ssh(NODE, "cat " + " ".join(f"/sys/bus/pci/devices/{bus}/{name}" for name in names)).stdout


def install_driver(lab: Lab, version: str = "580.95.05") -> None:
    """What the kernel module package leaves for nvemu (check_loaded reads the same file)."""
    lab.ssh(NODE, f"mkdir -p /usr/lib/nvidia-emu && echo {version} > /usr/lib/nvidia-emu/kmod-version")


def test_without_a_driver_the_gpus_are_only_on_the_pci_bus(one_host: Lab) -> None:
    lab = one_host
    assert lab.ssh(NODE, "ls /dev/nvidia*", check=False).returncode != 0
    assert lab.ssh(NODE, "test -e /proc/driver/nvidia", check=False).returncode != 0
    assert "nvidia" not in lab.ssh(NODE, "cat /proc/devices").stdout
    out = lab.ssh(
        NODE, "cd /sys/bus/pci/devices && for d in *; do echo $d $(cat $d/vendor $d/class); done"
    ).stdout
    assert out.split("\n")[:4] == [f"{bus} 0x10de 0x030200" for bus in BUSES]


def test_with_the_driver_the_nodes_and_proc_files_appear(one_host: Lab) -> None:
    lab = one_host
    install_driver(lab)
    assert wait_for(lab, "test -c /dev/nvidiactl").returncode == 0
    nodes = lab.ssh(NODE, "stat -c '%n %F %t:%T %a' /dev/nvidia* /dev/nvidia-caps/*").stdout.splitlines()
    uvm = int(lab.ssh(NODE, "awk '$2==\"nvidia-uvm\"{print $1}' /proc/devices").stdout)
    caps = int(lab.ssh(NODE, "awk '$2==\"nvidia-caps\"{print $1}' /proc/devices").stdout)
    assert lab.ssh(NODE, "awk '$2==\"nvidia\"{print $1}' /proc/devices").stdout.strip() == "195"

    def line(name: str, major: int, minor: int, mode: str = "666") -> str:
        return f"{name} character special file {major:x}:{minor:x} {mode}"

    assert "/dev/nvidia-caps directory 0:0 755" in nodes
    assert sorted(n for n in nodes if " directory " not in n) == sorted(
        [line(f"/dev/nvidia{i}", 195, i) for i in range(4)]
        + [line("/dev/nvidiactl", 195, 255), line("/dev/nvidia-modeset", 195, 254)]
        + [line("/dev/nvidia-uvm", uvm, 0), line("/dev/nvidia-uvm-tools", uvm, 1)]
        + [
            line("/dev/nvidia-caps/nvidia-cap1", caps, 1, "400"),
            line("/dev/nvidia-caps/nvidia-cap2", caps, 2, "444"),
        ]
    )
    version = lab.ssh(NODE, "cat /proc/driver/nvidia/version").stdout
    assert version.startswith("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  ")
    info = lab.ssh(NODE, "cat /proc/driver/nvidia/gpus/*/information").stdout
    assert info.count("Model: \t\t NVIDIA A100-SXM4-80GB\n") == 4
    assert [ln.split()[-1] for ln in info.splitlines() if ln.startswith("Bus Location")] == BUSES
    assert "DeviceFileMinor: 2" in lab.ssh(NODE, "cat /proc/driver/nvidia/capabilities/mig/monitor").stdout
    links = sysfs(
        lab, "0000:07:00.0", "current_link_speed", "current_link_width", "max_link_speed", "max_link_width"
    )
    assert links.splitlines() == ["16.0 GT/s PCIe", "16", "16.0 GT/s PCIe", "16"]
    # the emulated driver in the host reads the same machine: its nvidia-smi (when installed) finds the module
    assert lab.ssh(NODE, "cat /opt/gpuready-lab/machine/kernel/proc-driver/nvidia/version").stdout == version


def test_mig_instances_created_in_the_host_get_access_files_and_caps(one_host: Lab) -> None:
    lab = one_host
    hw = json.loads(lab.ssh(NODE, "cat /opt/gpuready-lab/machine/hardware.json").stdout)
    boot = lab.ssh(NODE, "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    gpus: dict[str, Any] = {
        g["uuid"]: {"mig_current": False, "mig_pending": False, "persistence": False, "gis": []}
        for g in hw["gpus"]
    }
    gi = {
        "id": 2,
        "profile_id": 14,
        "start": 2,
        "size": 2,
        "cis": [{"id": 0, "profile_id": 1, "start": 0, "size": 2}],
    }
    gpus[hw["gpus"][0]["uuid"]] = {
        "mig_current": True,
        "mig_pending": True,
        "persistence": False,
        "gis": [gi],
    }
    state = json.dumps({"boot_id": boot, "kmod": "580.95.05", "gpus": gpus})
    # what `nvidia-smi mig -cgi 14 -C` leaves in the emulated driver's state (written atomically, as nvemu does)
    lab.ssh(NODE, f"mkdir -p /var/lib/nvidia-emu && echo '{state}' > /var/lib/nvidia-emu/.s && "
                  "mv /var/lib/nvidia-emu/.s /var/lib/nvidia-emu/state.json")  # fmt: skip
    gi_minor, ci_minor = 3 + 2 * 9, 3 + 2 * 9 + 1
    assert wait_for(lab, f"test -c /dev/nvidia-caps/nvidia-cap{ci_minor}").returncode == 0
    access = lab.ssh(NODE, "cat /proc/driver/nvidia/capabilities/gpu0/mig/gi2/access").stdout
    assert access.startswith(f"DeviceFileMinor: {gi_minor}\nDeviceFileMode: 292\n")
    ci = lab.ssh(NODE, "cat /proc/driver/nvidia/capabilities/gpu0/mig/gi2/ci0/access").stdout
    assert ci.startswith(f"DeviceFileMinor: {ci_minor}\n")
    assert lab.ssh(NODE, f"stat -c %a /dev/nvidia-caps/nvidia-cap{gi_minor}").stdout.strip() == "444"
    # destroyed again: the files go
    lab.ssh(NODE, f"echo '{state.replace(json.dumps([gi]), '[]')}' > /var/lib/nvidia-emu/.s && "
                  "mv /var/lib/nvidia-emu/.s /var/lib/nvidia-emu/state.json")  # fmt: skip
    gone = wait_for(lab, f"! test -e /dev/nvidia-caps/nvidia-cap{ci_minor}")
    assert gone.returncode == 0
    assert lab.ssh(NODE, "test -e /proc/driver/nvidia/capabilities/gpu0", check=False).returncode != 0


def test_faults_show_in_sysfs_at_once(one_host: Lab) -> None:
    lab = one_host
    hosts.inject_fault(lab.paths, NODE, "pcie-downgrade", 1)
    out = sysfs(lab, "0000:0f:00.0", "current_link_speed", "current_link_width")
    assert out.splitlines() == ["5.0 GT/s PCIe", "8"]  # gen 4 -> 2, x16 -> x8
    hosts.inject_fault(lab.paths, NODE, "off-bus", 2)
    out = sysfs(lab, "0000:47:00.0", "vendor", "current_link_speed", "current_link_width")
    assert out.splitlines() == ["0x10de", "Unknown", "63"]
    assert (
        lab.ssh(NODE, "test -c /dev/nvidia2 && test -d /proc/driver/nvidia/gpus/0000:47:00.0").returncode == 0
    )
    hosts.inject_fault(lab.paths, NODE, None)
    out = sysfs(lab, "0000:0f:00.0", "current_link_width") + sysfs(lab, "0000:47:00.0", "current_link_width")
    assert out.splitlines() == ["16", "16"]


def test_the_files_come_back_after_a_reboot(one_host: Lab) -> None:
    lab = one_host
    before = lab.ssh(NODE, "cat /proc/sys/kernel/random/boot_id").stdout
    lab.ssh(NODE, "systemctl reboot", check=False)
    deadline = time.monotonic() + hosts.BOOT_TIMEOUT_S
    while time.monotonic() < deadline:
        result = lab.ssh(NODE, "cat /proc/sys/kernel/random/boot_id", check=False)
        if result.returncode == 0 and result.stdout != before:
            break
        time.sleep(2)
    else:
        pytest.fail("the host did not come back from its reboot")
    assert wait_for(lab, "test -c /dev/nvidia3 && test -f /proc/driver/nvidia/version").returncode == 0
    assert "nvidia-uvm" in lab.ssh(NODE, "cat /proc/devices").stdout
    assert lab.ssh(NODE, "cat /sys/bus/pci/devices/0000:07:00.0/vendor").stdout == "0x10de\n"


def test_driver_removed_before_any_tool_loaded_it_means_no_nodes(one_host: Lab) -> None:
    lab = one_host
    lab.ssh(NODE, "rm /usr/lib/nvidia-emu/kmod-version")
    # the module stays loaded until the next boot (state names it only once a tool has loaded it): with no tool run
    # in this boot the state names none, so the nodes go at once
    assert wait_for(lab, "! ls /dev/nvidia* >/dev/null 2>&1").returncode == 0
    assert lab.ssh(NODE, "test -e /proc/driver/nvidia", check=False).returncode != 0
    assert kernel_files.DYNAMIC_MAJORS["nvidia-uvm"] not in [
        int(ln.split()[0]) for ln in lab.ssh(NODE, "cat /proc/devices").stdout.splitlines() if "nvidia" in ln
    ]
