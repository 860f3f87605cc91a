"""What the NVIDIA kernel driver puts in /dev, /proc and /sys, rendered for a lab host from its emulated machine.

NVIDIA's own tools find GPUs through these files, not through NVML alone: ``nvidia-ctk cdi generate`` and the DRA
driver stat ``/dev/nvidia*`` and read the majors in ``/proc/devices``, MIG device nodes come from
``/proc/driver/nvidia/capabilities/gpuN/mig/giG[/ciC]/access``, and GFD / the device plugin / the DRA driver read
``/sys/bus/pci/devices/<bdf>/{vendor,class,numa_node}``. So each lab host gets them at the real paths:

- one source of truth: the host's hardware file (faults included) and the emulated driver's state file in the host,
  read through package machine's View (``nvemu.read_view``), which the mock NVML and nvidia-smi answer from too
  (a state left by an earlier boot counts as reset, MIG instances come from the state, a fault's PCIe effects
  lower the link as nvidia-smi reports it). No second fault model lives here.
- the driver is loaded when the host's state names a loaded module or a kernel module package is installed in the
  host (``/usr/lib/nvidia-emu/kmod-version``: on a real host udev / nvidia-modprobe loads it at boot or first use).
  Not loaded: no /dev/nvidia*, no /proc/driver/nvidia, no nvidia lines in /proc/devices. the ``driver_mismatch``
  effect keeps the module loaded (its version is the old one in /proc/driver/nvidia/version).
- a GPU off the bus (the ``off_bus`` effect) keeps its /dev node and its /proc/driver/nvidia/gpus entry (the
  module keeps the device bound; NVML is what reports it lost) and its sysfs directory with the values the kernel
  cached at enumeration (vendor, device, class, numa_node); the link registers read as all ones, which the
  kernel shows as ``Unknown`` speed and width 63.
- MIG: real drivers create ``giG/access`` and ``ciC/access`` when the instances are created, and nvidia-modprobe
  makes the matching /dev/nvidia-caps nodes; here the supervisor of each host watches the state file and renders
  again within a fraction of a second of ``nvidia-smi mig -cgi/-cci/-dci/-dgi`` (see ``watch``), and the change
  (any MIG change through the emulated machine: ``silicon/machine/capfiles.go``) returns only once the files show
  it, so a tool that looks right after (``nvidia-ctk cdi generate``, the device plugin's restart) finds them, as
  on a real host; /proc/driver/nvidia-caps/mig-minors lists every possible minor up front, as the real one does.

The tree is rendered into ``<machine dir>/kernel`` (outside the host; device nodes made here with ``os.mknod``) and
reaches the host as follows (``apply_to_host``): the sysfs view by nspawn ``--bind-ro`` over
/sys/bus/pci/devices (a directory: later renders show through); /proc/driver and /proc/devices by a bind mount made
inside the host's mount namespace once per boot (nspawn cannot bind under /proc: it mounts its own procfs after
pivoting, ``Failed to stat`` the source); /dev/nvidia* created in the host's own /dev (through
/proc/<pid 1 of the host>/root/dev) so that nodes appear and disappear with the driver as udev would make them.
The hosts run without a device cgroup (nspawn --register=no), so nothing else is needed for them to be opened:
opening one answers ENXIO, as no kernel driver owns major 195 on this machine; the tools only stat them.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuready.lab import hardware
from gpuready.lab.emulator import nvemu
from gpuready.lab.state import locked

KERNEL_DIR = "kernel"  # under the host's machine dir, so the host sees it at HOST_MACHINE_DIR/kernel too
HOST_KERNEL_DIR = f"{hardware.HOST_MACHINE_DIR}/{KERNEL_DIR}"
SYSFS_PCI = "/sys/bus/pci/devices"

# Char majors. 195 is the driver's fixed NV_MAJOR_DEVICE_NUMBER; the others are dynamic on a real machine (the
# kernel hands them out from 511 down), so tools look them up by name in /proc/devices, as they must here.
NVIDIA_MAJOR = 195
CTL_MINOR = 255
MODESET_MINOR = 254
DYNAMIC_MAJORS = {
    "nvidia-nvlink": 511,
    "nvidia-uvm": 510,
    "nvidia-caps": 509,
    "nvidia-caps-imex-channels": 508,
    "nvidia-nvswitch": 507,
}
MODE_ALL_READ = 0o444  # DeviceFileMode 292
# The MIG capabilities' minors (mig/config: MIG changes; mig/monitor: every instance visible), which NVIDIA's
# runtime hook hands out for NVIDIA_MIG_CONFIG_DEVICES and NVIDIA_MIG_MONITOR_DEVICES (realhost's runc wrapper)
MIG_CONFIG_MINOR, MIG_MONITOR_MINOR = 1, 2
IMEX_MGMT_MINOR = 4323  # /proc/driver/nvidia/capabilities/fabric-imex-mgmt of 580.159.04
MODE_OWNER_READ = 0o400  # DeviceFileMode 256 (the config capability: root only)

VERSION_BANNER = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  "
    "(dvs-builder@U22-I3-AE18-23-3)  Tue Sep 23 09:21:16 UTC 2025\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) \n"
)
LINK_SPEEDS = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe",
               6: "64.0 GT/s PCIe"}  # fmt: skip

# An entry of a rendered tree: ("dir",), ("file", text), ("char", major, minor, mode).
Entry = tuple[Any, ...]
Tree = dict[str, Entry]


# --- reading the machine ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reading:
    """One reading of a host's machine: its hardware file, package machine's view of it (``nvemu.read_view``:
    the faults' effects, the driver state as this boot leaves it, the MIG devices) and the loaded module's
    version (None: not loaded)."""

    hw: dict[str, Any]
    view: dict[str, Any]
    kmod: str | None

    def gpu(self, index: int) -> dict[str, Any]:
        """The view of GPU ``index``."""
        return next(g for g in self.view["gpus"] if g["index"] == index)


def read_machine(machine_dir: Path, host_root: Path | None, boot: str | None = None) -> Reading:
    """The machine of the host whose root filesystem is host_root, through the static tools in its machine dir.

    boot is the host's current boot id (None: take its state file as this boot's).
    """
    hardware_file = machine_dir / "hardware.json"
    state = host_root / nvemu.DEFAULT_STATE.lstrip("/") if host_root else None
    view = nvemu.read_view(machine_dir / nvemu.TOOLS, hardware_file, state, boot)
    kmod = view.get("kmod")
    if not kmod and host_root is not None:
        kmod = _read(host_root / nvemu.DRIVER_DIR.lstrip("/") / "kmod-version")
    return Reading(hardware.read_hardware(hardware_file), view, kmod.strip() if kmod else None)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


# --- rendering ----------------------------------------------------------------------------------------------------


def bdf(pci_bus_id: str) -> str:
    """nvidia-smi's 00000000:18:00.0 as the kernel names the device: 0000:18:00.0 (lower case)."""
    domain, bus, rest = pci_bus_id.split(":")
    slot, function = rest.split(".")
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(slot, 16):02x}.{int(function, 16):x}"


def _access(minor: int, mode: int) -> Entry:
    return ("file", f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n")


def render(machine: Reading, machine_devices: str) -> dict[str, Any]:
    """The files of a host: {"dev": Tree, "proc-driver": Tree, "sys-pci-devices": Tree, "proc-devices": text}.

    Trees map paths relative to /dev, /proc/driver and /sys/bus/pci/devices to entries; machine_devices is this
    machine's /proc/devices, to which the driver's lines are added as a loaded module adds them.
    """
    kmod = machine.kmod
    loaded = kmod is not None
    dev: Tree = {}
    proc: Tree = {}
    sysfs: Tree = {}
    for gpu in machine.hw["gpus"]:
        view = machine.gpu(gpu["index"])
        sysfs.update(_sysfs_entries(machine.hw, gpu, view))
        if not loaded:
            continue
        minor = gpu.get("minor_number", gpu["index"])
        dev[f"nvidia{minor}"] = ("char", NVIDIA_MAJOR, minor, 0o666)
        proc[f"nvidia/gpus/{bdf(gpu['pci_bus_id'])}/information"] = (
            "file",
            _information(gpu, minor, kmod or ""),
        )
        for cap in view["caps"]:  # the MIG instances' access capabilities, numbered by package machine
            proc[cap["proc"]] = _access(cap["minor"], MODE_ALL_READ)
            dev[f"nvidia-caps/nvidia-cap{cap['minor']}"] = _cap(cap["minor"], MODE_ALL_READ)
    devices = machine_devices
    if loaded:
        dev["nvidiactl"] = ("char", NVIDIA_MAJOR, CTL_MINOR, 0o666)
        dev["nvidia-modeset"] = ("char", NVIDIA_MAJOR, MODESET_MINOR, 0o666)
        dev["nvidia-uvm"] = ("char", DYNAMIC_MAJORS["nvidia-uvm"], 0, 0o666)
        dev["nvidia-uvm-tools"] = ("char", DYNAMIC_MAJORS["nvidia-uvm"], 1, 0o666)
        dev["nvidia-caps"] = ("dir",)
        dev[f"nvidia-caps/nvidia-cap{MIG_CONFIG_MINOR}"] = _cap(MIG_CONFIG_MINOR, MODE_OWNER_READ)
        dev[f"nvidia-caps/nvidia-cap{MIG_MONITOR_MINOR}"] = _cap(MIG_MONITOR_MINOR, MODE_ALL_READ)
        proc["nvidia/version"] = ("file", VERSION_BANNER.format(version=kmod))
        proc["nvidia/capabilities/mig/config"] = _access(MIG_CONFIG_MINOR, MODE_OWNER_READ)
        proc["nvidia/capabilities/mig/monitor"] = _access(MIG_MONITOR_MINOR, MODE_ALL_READ)
        # R580's IMEX management capability, with the minor a lent H200 showed (root only, like mig/config)
        proc["nvidia/capabilities/fabric-imex-mgmt"] = _access(IMEX_MGMT_MINOR, MODE_OWNER_READ)
        proc["nvidia-caps/mig-minors"] = ("file", machine.view["mig_minors"])
        devices = add_char_devices(machine_devices)
    return {"dev": dev, "proc-driver": proc, "sys-pci-devices": sysfs, "proc-devices": devices}


def _cap(minor: int, mode: int) -> Entry:
    return ("char", DYNAMIC_MAJORS["nvidia-caps"], minor, mode)


def _information(gpu: dict[str, Any], minor: int, firmware: str) -> str:
    """nv-procfs.c's per-GPU information file (tabs as the driver prints them); ``firmware``: the GSP firmware's
    version, the loaded module's (a lent H200 on the open module, 580.159.04)."""
    return (
        f"Model: \t\t {gpu['name']}\n"
        f"IRQ:   \t\t {160 + gpu['index']}\n"
        f"GPU UUID: \t {gpu['uuid']}\n"
        f"Video BIOS: \t {gpu.get('vbios_version', '??.??.??.??.??').lower()}\n"
        "Bus Type: \t PCIe\n"
        "DMA Size: \t 52 bits\n"
        "DMA Mask: \t 0xfffffffffffff\n"
        f"Bus Location: \t {bdf(gpu['pci_bus_id'])}\n"
        f"Device Minor: \t {minor}\n"
        f"GPU Firmware: \t {firmware}\n"
        "GPU Excluded:\t No\n"
    )


def _sysfs_entries(hw: dict[str, Any], gpu: dict[str, Any], view: dict[str, Any]) -> Tree:
    d = bdf(gpu["pci_bus_id"])
    ids = gpu.get("pci_device_id", "000010DE")
    sub = gpu.get("pci_sub_system_id", "000010DE")
    if view["off_bus"]:  # link status and capability registers read as all ones
        speed = max_speed = "Unknown"
        width = max_width = 63
    else:
        gen, width = view["pcie_gen"], view["pcie_width"]
        speed, max_speed = LINK_SPEEDS.get(gen, "Unknown"), LINK_SPEEDS.get(gpu["max_pcie_gen"], "Unknown")
        max_width = gpu["max_pcie_width"]
    # a one-node VM tells its kernel nothing about NUMA: -1 (a lent H200 VM; nvidia-smi topo -m still says 0)
    system = hw.get("system", {})
    no_numa = system.get("virtualization") == "Pass-Through" and system.get("numa_nodes", 1) == 1
    values = {
        "vendor": f"0x{ids[4:].lower()}",
        "device": f"0x{ids[:4].lower()}",
        "subsystem_vendor": f"0x{sub[4:].lower()}",
        "subsystem_device": f"0x{sub[:4].lower()}",
        "class": "0x030200",  # 3D controller: the data-centre GPUs
        "numa_node": "-1" if no_numa else str(gpu.get("numa_node", -1)),
        "local_cpulist": gpu.get("cpu_affinity", ""),
        "current_link_speed": speed,
        "current_link_width": str(width),
        "max_link_speed": max_speed,
        "max_link_width": str(max_width),
        "enable": "1",
    }
    tree: Tree = {d: ("dir",)}
    tree.update({f"{d}/{name}": ("file", value + "\n") for name, value in values.items()})
    return tree


def add_char_devices(devices: str) -> str:
    """/proc/devices with the driver's character devices, in major order within the "Character devices:" list.
    The module registers nvidia-nvswitch with or without NVSwitches (a lent H200 VM listed it:
    tests/fixtures/device/h200__580.159.04/proc-devices.txt)."""
    names = [(NVIDIA_MAJOR, "nvidia"), (NVIDIA_MAJOR, "nvidiactl")]
    names += [(major, name) for name, major in DYNAMIC_MAJORS.items()]
    head, sep, tail = devices.partition("\nBlock devices:")
    entries = []
    rest = []
    for line in head.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0].isdigit():
            entries.append((int(fields[0]), fields[1]))
        elif line.strip():
            rest.append(line)
    taken = {e for e in entries}
    entries += [n for n in names if n not in taken]
    lines = rest[:1] + [f"{major:3d} {name}" for major, name in sorted(entries, key=lambda e: e[0])]
    return "\n".join(lines) + "\n" + (sep + tail if sep else "")


# --- writing a tree -----------------------------------------------------------------------------------------------


def sync_tree(root: Path, wanted: Tree, managed: Callable[[str], bool] = lambda _top: True) -> None:
    """Make root hold exactly the wanted entries among those whose first path component is managed.

    Files are replaced atomically (a reader never sees half of one) and only when they change; directories keep
    their inodes, so a bind mount of root or of one of them shows every later sync.
    """
    dirs = {str(p) for rel in wanted for p in Path(rel).parents if str(p) != "."}
    dirs |= {rel for rel, entry in wanted.items() if entry[0] == "dir"}
    root.mkdir(parents=True, exist_ok=True)
    existing: list[Path] = []
    for top in sorted(os.listdir(root)):
        if not managed(top):
            continue
        if (root / top).is_dir() and not (root / top).is_symlink():
            for current, subdirs, files in os.walk(root / top, topdown=False):
                existing += [Path(current) / name for name in files + subdirs]
        existing.append(root / top)
    for path in existing:
        if not os.path.lexists(path):
            continue
        rel = str(path.relative_to(root))
        is_dir = path.is_dir() and not path.is_symlink()
        if (rel in dirs) != is_dir or (not is_dir and rel not in wanted):
            if is_dir:
                shutil.rmtree(path)
            else:
                path.unlink()
    for rel in sorted(dirs):
        (root / rel).mkdir(exist_ok=True)
    for rel, entry in sorted(wanted.items()):
        path = root / rel
        if entry[0] == "file":
            if _read(path) != entry[1]:
                tmp = path.with_name(f".{path.name}.new")
                tmp.write_text(entry[1], encoding="utf-8")
                os.replace(tmp, path)
        elif entry[0] == "char":
            _, major, minor, mode = entry
            try:
                st = path.lstat()
                same = stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(major, minor)
                if same and stat.S_IMODE(st.st_mode) == mode:
                    continue
                path.unlink()
            except FileNotFoundError:
                pass
            os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
            os.chmod(path, mode)  # mknod's mode is masked by the umask


def write_in_place(path: Path, text: str) -> None:
    """A file bound as itself (/proc/devices): a rename would leave the bind on the old inode."""
    if _read(path) == text:
        return
    with open(path, "a+", encoding="utf-8") as f:
        f.seek(0)
        f.truncate()
        f.write(text)


def write(kernel_dir: Path, files: dict[str, Any]) -> None:
    """Write render()'s result under kernel_dir: dev/, proc-driver/, sys-pci-devices/ and the proc-devices file."""
    for tree in ("dev", "proc-driver", "sys-pci-devices"):
        sync_tree(kernel_dir / tree, files[tree])
    write_in_place(kernel_dir / "proc-devices", files["proc-devices"])


# --- a running host -----------------------------------------------------------------------------------------------


def host_init_pid(nspawn_pid: int) -> int | None:
    """PID (in this machine's namespace) of the host's PID 1: nspawn's child whose own pid in its namespace is 1."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        nspid = fields.get("NSpid", "").split()
        if fields.get("PPid", "").strip() == str(nspawn_pid) and len(nspid) > 1 and nspid[-1] == "1":
            return int(entry)
    return None


def nspawn_pid_of(supervisor_pid: int) -> int | None:
    """The supervisor's child (nspawn; unshare execs it), if running."""
    try:
        children = Path(f"/proc/{supervisor_pid}/task/{supervisor_pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def _child_of(pid: int, parent: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return f"\nPPid:\t{parent}\n" in status


def host_started(nspawn_pid: int, init_pid: int) -> bool:
    """Whether the host's PID 1 runs its own init in its own root: until nspawn's inner child execs init, its
    root (and so /proc/<pid>/root/dev) may still be this machine's, which must never be written to."""
    try:
        same_exe = os.readlink(f"/proc/{init_pid}/exe") == os.readlink(f"/proc/{nspawn_pid}/exe")
        own_root = os.stat(f"/proc/{init_pid}/root") != os.stat("/")
    except OSError:
        return False
    return own_root and not same_exe


def host_boot_id(init_pid: int) -> str | None:
    """The boot id the host sees (nspawn gives each boot its own), read through its root."""
    return (_read(Path(f"/proc/{init_pid}/root/proc/sys/kernel/random/boot_id")) or "").strip() or None


def _mounted(init_pid: int, target: str) -> bool:
    try:
        lines = Path(f"/proc/{init_pid}/mountinfo").read_text().splitlines()
    except OSError:
        return False
    return any(line.split()[4] == target for line in lines)


def apply_to_host(init_pid: int, files: dict[str, Any]) -> None:
    """Show the rendered files inside the running host: /dev nodes in its /dev, /proc binds once per boot."""
    dev = Path(f"/proc/{init_pid}/root/dev")
    sync_tree(dev, files["dev"], managed=lambda top: top.startswith("nvidia"))
    for source, target in (("proc-driver", "/proc/driver"), ("proc-devices", "/proc/devices")):
        if not _mounted(init_pid, target):
            subprocess.run(
                [
                    "nsenter",
                    f"--target={init_pid}",
                    "--mount",
                    "--",
                    "mount",
                    "--bind",
                    f"{HOST_KERNEL_DIR}/{source}",
                    target,
                ],
                check=True,
                capture_output=True,
            )


def refresh(machine_dir: Path, host_root: Path | None, init_pid: int | None = None) -> dict[str, Any]:
    """Render the host's files from its machine and driver state, and show them inside it when it runs."""
    with locked(machine_dir / ".kernel.lock"):
        boot = host_boot_id(init_pid) if init_pid else None
        files = render(read_machine(machine_dir, host_root, boot), Path("/proc/devices").read_text())
        write(machine_dir / KERNEL_DIR, files)
        if init_pid is not None:
            apply_to_host(init_pid, files)
        return files


def refresh_running(machine_dir: Path, host_root: Path, supervisor_pid: int) -> bool:
    """refresh() for a host started by the lab (state's pid: its supervisor); False when it does not run."""
    nspawn = nspawn_pid_of(supervisor_pid)
    init = host_init_pid(nspawn) if nspawn else None
    if nspawn is None or init is None or not host_started(nspawn, init):
        init = None
    refresh(machine_dir, host_root, init)
    return init is not None


def _signature(machine_dir: Path, host_root: Path, init_pid: int | None) -> tuple[Any, ...]:
    paths = [
        machine_dir / "hardware.json",
        host_root / nvemu.DEFAULT_STATE.lstrip("/"),
        host_root / nvemu.DRIVER_DIR.lstrip("/") / "kmod-version",
    ]
    stamps: list[tuple[int, int, int] | None] = []
    for path in paths:
        try:
            st = path.stat()
            stamps.append((st.st_mtime_ns, st.st_ino, st.st_size))
        except OSError:
            stamps.append(None)
    return (init_pid, *stamps)


def watch(
    machine_dir: Path,
    host_root: Path,
    nspawn_pid: Callable[[], int | None],
    stop: threading.Event,
    log: Callable[[str], None],
    interval: float = 0.25,  # a MIG change waits for the render (capfiles.go); a check is 3 stat calls
) -> None:
    """Render again whenever the machine, the driver state or the installed module changes, or the host boots.

    Run by the host's supervisor (a thread): it is the one machine-side process that lives as long as the host and
    sees every reboot, and the driver state changes inside the host (nvidia-smi mig, a driver install) without the
    lab being told.
    """
    seen: tuple[Any, ...] | None = None
    init: int | None = None
    while not stop.wait(interval if seen is not None else 0.2):
        pid = nspawn_pid()
        if (
            pid is None or init is None or not _child_of(init, pid)
        ):  # scan /proc only when the host (re)starts
            init = host_init_pid(pid) if pid else None
        if pid is None or init is None or not host_started(pid, init):
            seen = None
            continue
        signature = _signature(machine_dir, host_root, init)
        if signature == seen:
            continue
        try:
            refresh(machine_dir, host_root, init)
            seen = signature
        except Exception as exc:  # the watcher must outlive one bad render; it logs why
            log(f"kernel files: {exc}")
            seen = signature  # try again on the next change, not in a loop
