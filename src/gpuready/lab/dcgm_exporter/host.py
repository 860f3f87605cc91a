"""What the exporter sees of its GPU host: the emulated machine, read on every scrape that follows a change.

The runc wrapper of a lab host bind-mounts the machine's directory and the emulated driver's files read-only into the
exporter's container (:data:`gpuready.lab.realhost.MACHINE_DIRS`), so the container's own root holds what NVIDIA's
exporter would reach through DCGM: the GPUs (the hardware file), MIG mode and instances (the emulated driver's
state), the installed driver's version, and the static tools that derive the machine's view. The GPUs' faults, MIG
devices and the state as this boot leaves it come from that view (``nvemu.read_view``: package machine's View,
which the host's own tools read too), so after a reboot the exporter shows no MIG instance the driver has not
created again, and a ``lab fault`` shows in the next scrape: the view is read again when the hardware or the state
file changes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuready.lab.emulator import nvemu

DRIVER_VERSION = f"{nvemu.DRIVER_DIR.lstrip('/')}/driver-version"  # under the container's root


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
    """One GPU: its hardware entry, and from the machine's view its faults' effects and its MIG devices."""

    hw: dict[str, Any]
    off_bus: bool
    xid: int  # the largest XID raised: dcgm-exporter reports one
    remapped_rows: tuple[int, int]  # correctable, uncorrectable (NVML's, as DCGM reads them)
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


@dataclass(frozen=True)
class HostState:
    """One reading of the host: its name, the installed driver's version and its GPUs."""

    name: str
    driver_version: str | None
    gpus: tuple[Gpu, ...]

    @property
    def visible_gpus(self) -> list[Gpu]:
        return [g for g in self.gpus if not g.off_bus]


def build_gpus(hw: dict[str, Any], view: dict[str, Any]) -> tuple[Gpu, ...]:
    """The GPUs of the hardware file with their view (``nvemu.read_view``)."""
    views = {v["index"]: v for v in view["gpus"]}
    gpus = []
    for g in hw.get("gpus") or []:
        v = views[g["index"]]
        profiles = {p["profile_id"]: p for p in g.get("mig_profiles") or []}
        devices = tuple(
            MigDevice(
                g["index"], d["gi"], d["ci"], profiles[d["profile_id"]], d["uuid"], d["full"], d["start"]
            )
            for d in v["mig_devices"]
        )
        remapped = (int(v["remap_correctable"]), int(v["remap_uncorrectable"]))
        gpus.append(Gpu(g, v["off_bus"], max(v["xids"], default=0), remapped, v["mig_current"], devices))
    return tuple(gpus)


@dataclass
class HostView:
    """A host's machine files under `root` (the exporter's own ``/``), its hardware file (the static tools beside
    it), and the host's boot id (the runc wrapper's ``GPUREADY_LAB_BOOT_ID``; None takes the state file as this
    boot's)."""

    name: str
    root: Path
    hardware: Path
    boot: str | None = None
    _cache: tuple[Any, HostState] | None = field(default=None, repr=False)

    def snapshot(self) -> HostState:
        state = self.root / nvemu.DEFAULT_STATE.lstrip("/")
        key = (_stamp(self.hardware), _stamp(state), _stamp(self.root / DRIVER_VERSION), self.boot)
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        try:
            hw = json.loads(self.hardware.read_text())
            view = nvemu.read_view(self.hardware.parent / nvemu.TOOLS, self.hardware, state, self.boot)
        except (OSError, ValueError, RuntimeError):  # a file being rewritten: the last good reading stays
            if self._cache is not None:
                return self._cache[1]
            hw, view = {"gpus": []}, {"gpus": []}
        try:
            driver = (self.root / DRIVER_VERSION).read_text().strip() or None
        except OSError:
            driver = None
        reading = HostState(self.name, driver, build_gpus(hw, view))
        self._cache = (key, reading)
        return reading


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_ino, st.st_size)
