"""What the node agent can see of a GPU host: read from the host's own files, never from the spec.

A lab host is a directory tree (its overlay root, as seen from this machine) plus its hardware file. Everything
the device plugin, GFD, dcgm-exporter and the container runtime would find on a real node is read from there each
time it is asked: the driver packages on disk (``/usr/bin/nvidia-smi``, the emulated NVML's version files), the
emulated driver's state file (MIG mode and instances), containerd's runtime handlers (the main config plus its
``imports`` drop-ins, merged per plugin key as containerd < 2.1 does) and the hardware file (GPUs, faults).
Reads are cached by file mtime only, so a `lab fault` or a deploy is seen on the next sync.

`VirtualGpuView` gives virtual nodes the same shape from a hardware dict alone (driver installed, ``nvidia``
handler configured), so the 1000-node benchmarks exercise the same GPU code.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import tempfile
import threading
import time
import tomllib
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from gpuready.lab.emulator import nvemu
from gpuready.lab.emulator.nvemu import CUDA_BY_BRANCH
from gpuready.lab.faults import Effects, combined_effects
from gpuready.nvidia.containerd_config import CRI_PLUGIN, NVIDIA_RUNTIME_BINARY, RUNC_TYPE

DRIVER_LIB = "usr/lib/nvidia-emu"
NVML_LIB = "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
EMU_STATE = "var/lib/nvidia-emu/state.json"
CONTAINERD_CONFIG = "etc/containerd/config.toml"
# XIDs the device plugin's health checker ignores (application errors); any other marks the device unhealthy.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})


@dataclass(frozen=True)
class MigDevice:
    gpu_index: int
    gi: int
    ci: int
    profile: dict[str, Any]
    uuid: str
    full: bool  # the compute instance spans its whole GPU instance (the only kind the plugin exposes)
    start: int = 0  # the GPU instance's placement start (memory slice): part of the DRA driver's device name

    @property
    def name(self) -> str:
        return str(self.profile["name"])


@dataclass(frozen=True)
class Gpu:
    hw: dict[str, Any]
    effects: Effects  # of the faults on this GPU (gpuready.lab.faults)
    mig_enabled: bool
    mig_devices: tuple[MigDevice, ...]

    @property
    def index(self) -> int:
        return int(self.hw["index"])

    @property
    def uuid(self) -> str:
        return str(self.hw["uuid"])

    @property
    def name(self) -> str:
        return str(self.hw["name"])

    @property
    def off_bus(self) -> bool:
        return self.effects.off_bus

    @property
    def xid(self) -> int:
        return self.effects.xid  # the largest XID raised: dcgm-exporter reports one

    @property
    def unhealthy(self) -> bool:
        """What the plugin's XID health check concludes (GPUs off the bus are not enumerated at all)."""
        return self.xid != 0 and self.xid not in APPLICATION_XIDS


@dataclass(frozen=True)
class Runtime:
    """One containerd runtime handler: its runtime type and the binary it starts."""

    name: str
    runtime_type: str
    binary: str

    @property
    def nvidia(self) -> bool:
        return "nvidia-container-runtime" in self.binary or "nvidia" in self.runtime_type


@dataclass(frozen=True)
class HostState:
    name: str
    nvml_present: bool  # libnvidia-ml.so.1 on disk: what the nvidia runtime injects into containers
    driver_version: str | None
    nvml_error: str | None  # NVML init failure text, e.g. "Driver/library version mismatch"
    runtimes: dict[str, Runtime]
    default_runtime: str
    binaries: frozenset[str]  # runtime binaries that exist on the host
    gpus: tuple[Gpu, ...]
    host_effects: Effects = field(default_factory=Effects)  # of the host-wide faults
    machine: str = "unknown"
    hostname: str = ""
    cdi_enabled: bool = False  # containerd's CRI plugin injects CDI devices (enable_cdi)
    cdi_devices: frozenset[str] = frozenset()  # "kind=name" of every device in the host's CDI spec dirs

    @property
    def cuda_version(self) -> str:
        return CUDA_BY_BRANCH.get((self.driver_version or "").split(".")[0], "13.0")

    @property
    def visible_gpus(self) -> list[Gpu]:
        return [g for g in self.gpus if not g.off_bus]


class GpuView(Protocol):
    def snapshot(self) -> HostState: ...

    def emulator_env(self) -> dict[str, str]:
        """The environment in which the emulated driver's tools, run on this machine, read this node's machine and
        driver state: for a node with no running host behind it (nvemu's GPUREADY_LAB_* variables)."""
        ...


# containerd ------------------------------------------------------------------------------------------------------


def _read_toml(path: Path) -> tuple[dict[str, Any], str]:
    text = path.read_text()
    return tomllib.loads(text), text


def containerd_cdi(root: Path) -> bool:
    """Whether containerd on this host injects CDI devices: ``enable_cdi`` in its merged CRI plugin, else its
    built-in default (on from containerd 2.0, off in 1.7; 1.6 has no CDI at all)."""
    major = _containerd_major(root)
    if major is None or major < 1:
        return False
    cri = _merged_cri(root)
    if cri is None:
        return major >= 2
    if major == 1 and _containerd_minor(root) < 7:
        return False
    return bool(cri.get("enable_cdi", major >= 2))


def _containerd_version(root: Path) -> str | None:
    """The installed containerd package's upstream version, from dpkg's database on the host."""
    try:
        text = (root / "var/lib/dpkg/status").read_text(errors="replace")
    except OSError:
        return None
    for stanza in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[0] != " ")
        if fields.get("Package") in ("containerd", "containerd.io") and "installed" in fields.get(
            "Status", ""
        ):
            return fields.get("Version", "").split(":", 1)[-1].split("~", 1)[0].split("-", 1)[0]
    return None


def _containerd_major(root: Path) -> int | None:
    version = _containerd_version(root)
    return int(version.split(".")[0]) if version and version.split(".")[0].isdigit() else None


def _containerd_minor(root: Path) -> int:
    parts = (_containerd_version(root) or "0.0").split(".")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def _merged_cri(root: Path) -> dict[str, Any] | None:
    """The CRI plugin table of the merged config (None without a readable config.toml)."""
    main = root / CONTAINERD_CONFIG
    try:
        doc, text = _read_toml(main)
    except (OSError, tomllib.TOMLDecodeError):
        return None
    version = doc.get("version", 1) if text.strip() else 2
    plugins = dict(doc.get("plugins") or {})
    for pattern in doc.get("imports") or []:
        full = pattern if os.path.isabs(pattern) else str(Path("/etc/containerd") / pattern)
        for path in sorted(glob.glob(str(root / full.lstrip("/")))):
            try:
                imported, _ = _read_toml(Path(path))
            except (OSError, tomllib.TOMLDecodeError):
                continue
            for key, value in (imported.get("plugins") or {}).items():
                plugins[key] = value
    return dict(plugins.get(CRI_PLUGIN.get(version, CRI_PLUGIN[2])) or {})


def cdi_device_names(spec_dirs: list[Path]) -> frozenset[str]:
    """``kind=name`` of every device in the CDI specs (YAML or JSON) of these directories."""
    names: set[str] = set()
    for directory in spec_dirs:
        for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.json")]):
            names |= _spec_names(path)
    return frozenset(names)


_SPECS: dict[
    str, tuple[float, frozenset[str]]
] = {}  # path -> (mtime, names): the agent asks on every decision


def _spec_names(path: Path) -> frozenset[str]:
    try:
        mtime = path.stat().st_mtime
        cached = _SPECS.get(str(path))
        if cached and cached[0] == mtime:
            return cached[1]
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return frozenset()  # containerd skips a spec it cannot read
    names: frozenset[str] = frozenset()
    if isinstance(doc, dict) and isinstance(doc.get("devices"), list):
        kind = doc.get("kind", "")
        names = frozenset(
            f"{kind}={d['name']}" for d in doc["devices"] if isinstance(d, dict) and "name" in d
        )
    _SPECS[str(path)] = (mtime, names)
    return names


def containerd_runtimes(root: Path) -> tuple[dict[str, Runtime], str]:
    """The CRI runtime handlers containerd on this host would serve, and its default runtime name.

    containerd < 2.1 merges ``imports`` per plugin key: an imported file's ``plugins."io.containerd.grpc.v1.cri"``
    replaces the main file's whole table (containerd#5837), which is why a drop-in that only names ``nvidia``
    loses ``runc``'s options; this reproduces that instead of deep-merging.
    """
    runtimes: dict[str, Runtime] = {"runc": Runtime("runc", RUNC_TYPE, "runc")}
    cri = _merged_cri(root)
    if cri is None:
        return runtimes, "runc"  # no or unreadable config: containerd's built-in defaults
    containerd = cri.get("containerd") or {}
    for name, table in (containerd.get("runtimes") or {}).items():
        options = table.get("options") or {}
        runtimes[name] = Runtime(
            name, str(table.get("runtime_type", RUNC_TYPE)), str(options.get("BinaryName", "runc"))
        )
    return runtimes, str(containerd.get("default_runtime_name") or "runc")


def _cgroup_pids(cgroup: Path) -> list[int]:
    pids: list[int] = []
    for dirpath, _, _ in os.walk(cgroup):
        try:
            pids += [int(p) for p in Path(dirpath, "cgroup.procs").read_text().split()]
        except OSError:
            continue
    return pids


class _RootScan:
    """Which process of this machine has which root directory: one walk of /proc a second for every host view
    at once (1000 stand-in hosts each walking /proc every second was the agent's costliest work)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.at = -1e9
        self.pids: dict[tuple[int, int], int] = {}

    def pid_of(self, root: Path) -> int | None:
        try:
            st = os.stat(root)
        except OSError:
            return None
        with self.lock:
            now = time.monotonic()
            if now - self.at >= 1.0:
                self.at = now
                self.pids = {}
                for p in os.listdir("/proc"):
                    if p.isdigit():
                        try:
                            mine = os.stat(f"/proc/{p}/root")
                        except OSError:
                            continue
                        self.pids.setdefault((mine.st_dev, mine.st_ino), int(p))
            return self.pids.get((st.st_dev, st.st_ino))


_ROOTS = _RootScan()


def _root_of(pid: int, root: Path) -> bool:
    """Whether process ``pid`` has ``root`` (the host's overlay) as its root directory."""
    try:
        mine, theirs = os.stat(f"/proc/{pid}/root"), os.stat(root)
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)


# MIG state ------------------------------------------------------------------------------------------------------


def mig_devices(gpu: dict[str, Any], state: dict[str, Any]) -> tuple[MigDevice, ...]:
    """MIG devices (one per compute instance) in nvidia-smi's order, from the emulated driver's state."""
    return tuple(
        MigDevice(gpu["index"], d["gi"], d["ci"], d["profile"], d["uuid"], d["full"], d["start"])
        for d in nvemu.mig_devices(gpu, state)
    )


def build_gpus(hw: dict[str, Any], emu_state: dict[str, Any]) -> tuple[Gpu, ...]:
    gpus = []
    for g in hw.get("gpus") or []:
        st = (emu_state.get("gpus") or {}).get(g["uuid"]) or {}
        enabled = bool(st.get("mig_current")) and bool(g.get("mig_capable"))
        gpus.append(Gpu(g, combined_effects(hw, g["index"]), enabled, mig_devices(g, st) if enabled else ()))
    return tuple(gpus)


def _machine_name() -> str:
    """GFD reads the DMI product name from /sys, which lab hosts share with this machine."""
    try:
        return Path("/sys/class/dmi/id/product_name").read_text().strip() or "unknown"
    except OSError:
        return "unknown"


# views ----------------------------------------------------------------------------------------------------------


@dataclass
class _Cached:
    mtime: float = -1.0
    value: Any = None


@dataclass
class HostView:
    """A lab host: `root` is its root filesystem as seen from here (the merged overlay), `hardware` its file."""

    name: str
    root: Path
    hardware: Path
    cgroups: tuple[Path, ...] = ()  # the host's cgroups: where its processes (and so its live /run) are found
    _cache: dict[str, _Cached] = field(default_factory=dict, repr=False)
    _root_pid: int | None = field(default=None, repr=False)

    def _cached_json(self, path: Path) -> Any:
        entry = self._cache.setdefault(str(path), _Cached())
        try:
            mtime = path.stat().st_mtime
        except OSError:
            return None
        if mtime != entry.mtime:
            try:
                entry.value, entry.mtime = json.loads(path.read_text()), mtime
            except (OSError, ValueError):
                return entry.value
        return entry.value

    def _text(self, rel: str) -> str | None:
        try:
            return (self.root / rel).read_text().strip() or None
        except OSError:
            return None

    def live_root(self) -> Path | None:
        """The host's root as its own processes see it (its /run included), through one of them; None when the
        host is not running or its cgroups are not known."""
        if self._root_pid and _root_of(self._root_pid, self.root):
            return Path(f"/proc/{self._root_pid}/root")
        # the host's cgroups first; the agent may run in a mount namespace that shows no cgroup tree, so else any
        # process of this machine whose root is the host's overlay (at most one scan a second while none is)
        candidates: list[int] = [pid for cgroup in self.cgroups for pid in _cgroup_pids(cgroup)]
        for pid in candidates:
            if _root_of(pid, self.root):
                self._root_pid = pid
                return Path(f"/proc/{pid}/root")
        if not candidates and (found := _ROOTS.pid_of(self.root)) is not None and _root_of(found, self.root):
            self._root_pid = found
            return Path(f"/proc/{found}/root")
        return None

    def emulator_env(self) -> dict[str, str]:
        state = self._cached_json(self.root / EMU_STATE) or {}
        return _emulator_env(
            self.hardware,
            self.root / EMU_STATE,
            state.get("boot_id"),
            self._text(f"{DRIVER_LIB}/driver-version"),
        )

    def snapshot(self) -> HostState:
        hw = self._cached_json(self.hardware) or {"gpus": [], "faults": []}
        emu = self._cached_json(self.root / EMU_STATE) or {}
        driver = self._text(f"{DRIVER_LIB}/driver-version")
        kmod_installed = self._text(f"{DRIVER_LIB}/kmod-version")
        host_effects = combined_effects(hw, None)
        nvml_error = None
        loaded = emu.get("kmod") or kmod_installed
        if host_effects.driver_mismatch or (driver and loaded and loaded != driver):
            nvml_error = "Driver/library version mismatch"
        elif driver and not loaded:
            nvml_error = "Driver Not Loaded"
        runtimes, default = containerd_runtimes(self.root)
        binaries = frozenset(
            r.binary
            for r in runtimes.values()
            if r.binary.startswith("/") and (self.root / r.binary.lstrip("/")).exists()
        )
        live = self.live_root()
        return HostState(
            cdi_enabled=containerd_cdi(self.root),
            # /var/run is the host's own tmpfs (/run): only its processes see it, through /proc/<pid>/root
            cdi_devices=cdi_device_names([self.root / "etc/cdi", *([live / "run/cdi"] if live else [])]),
            name=self.name,
            nvml_present=(self.root / NVML_LIB).exists() or driver is not None,
            driver_version=driver,
            nvml_error=nvml_error,
            runtimes=runtimes,
            default_runtime=default,
            binaries=binaries | {"runc"},
            gpus=build_gpus(hw, emu),
            host_effects=host_effects,
            machine=_machine_name(),
            hostname=self.name,
        )


@dataclass
class VirtualGpuView:
    """A node with no host behind it: a ready GPU node (driver and ``nvidia`` handler) with this hardware."""

    name: str
    hardware: dict[str, Any]
    driver_version: str = "580.178.04"
    mig_state: dict[str, Any] = field(default_factory=dict)  # the emulated driver's state.json shape
    _files: Path | None = field(default=None, repr=False)

    def emulator_env(self) -> dict[str, str]:
        if self._files is None:  # written once: a virtual node's hardware and state never change
            self._files = Path(tempfile.mkdtemp(prefix=f"gpuready-{self.name}-"))
            # removed with the view (a removed virtual node) or when the agent exits: nothing left in /tmp
            weakref.finalize(self, shutil.rmtree, self._files, True)
            (self._files / "hardware.json").write_text(json.dumps(self.hardware))
            state = {"gpus": {}, **self.mig_state, "boot_id": "virtual", "kmod": self.driver_version}
            (self._files / "state.json").write_text(json.dumps(state))
        return _emulator_env(
            self._files / "hardware.json", self._files / "state.json", "virtual", self.driver_version
        )

    def snapshot(self) -> HostState:
        nvidia = Runtime("nvidia", RUNC_TYPE, NVIDIA_RUNTIME_BINARY)
        host_effects = combined_effects(self.hardware, None)
        return HostState(
            name=self.name,
            nvml_present=True,
            driver_version=self.driver_version,
            nvml_error="Driver/library version mismatch" if host_effects.driver_mismatch else None,
            runtimes={"runc": Runtime("runc", RUNC_TYPE, "runc"), "nvidia": nvidia},
            default_runtime="runc",
            binaries=frozenset({"runc", NVIDIA_RUNTIME_BINARY}),
            gpus=(gpus := build_gpus(self.hardware, self.mig_state)),
            host_effects=host_effects,
            hostname=self.name,
            cdi_enabled=True,
            cdi_devices=frozenset(f"nvidia.com/gpu={name}" for name in cdi_names(gpus)),
        )


def _emulator_env(hardware: Path, state: Path, boot: str | None, driver: str | None) -> dict[str, str]:
    # the state's own boot id, so that it is not reset as after a reboot
    env = {
        "GPUREADY_LAB_HARDWARE": str(hardware),
        "GPUREADY_LAB_STATE": str(state),
        "GPUREADY_LAB_BOOT_ID": boot or "-",
    }
    return {**env, "GPUREADY_LAB_DRIVER_VERSION": driver} if driver else env


def cdi_names(gpus: tuple[Gpu, ...]) -> list[str]:
    """The device names ``nvidia-ctk cdi generate`` gives these GPUs (a virtual node's spec is always current)."""
    names = ["all"]
    for g in gpus:
        if g.off_bus:
            continue
        names += [str(g.index), g.uuid]
        names += [n for i, d in enumerate(g.mig_devices) for n in (f"{g.index}:{i}", d.uuid)]
    return names
