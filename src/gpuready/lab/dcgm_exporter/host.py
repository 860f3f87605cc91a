"""What the exporter sees of its GPU host: the emulated machine's files, read on every scrape.

The runc wrapper of a lab host bind-mounts the machine's hardware file and the emulated driver's files read-only
into the exporter's container (:data:`gpuready.lab.realhost.MACHINE_DIRS`), so the container's own root holds what
NVIDIA's exporter would reach through DCGM: the GPUs and their faults (the hardware file), MIG mode and instances
(the emulated driver's state), and the installed driver's version. Reads are cached by file mtime, so a
``lab fault`` shows in the next scrape. The state is read as the host's own tools read it (``nvemu.Driver``, package
machine's loadState in Go): one left by an earlier boot counts as reset, so after a reboot the exporter shows no MIG
instance the driver has not created again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuready.lab.emulator import nvemu
from gpuready.lab.faults import Effects, combined_effects

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


@dataclass(frozen=True)
class HostState:
    """One reading of the host: its name, the installed driver's version and its GPUs."""

    name: str
    driver_version: str | None
    gpus: tuple[Gpu, ...]

    @property
    def visible_gpus(self) -> list[Gpu]:
        return [g for g in self.gpus if not g.off_bus]


def mig_devices(gpu: dict[str, Any], state: dict[str, Any]) -> tuple[MigDevice, ...]:
    """MIG devices (one per compute instance) in nvidia-smi's order, from the emulated driver's state."""
    return tuple(
        MigDevice(gpu["index"], d["gi"], d["ci"], d["profile"], d["uuid"], d["full"], d["start"])
        for d in nvemu.mig_devices(gpu, state)
    )


def build_gpus(drv: nvemu.Driver) -> tuple[Gpu, ...]:
    gpus = []
    for g in drv.hw.get("gpus") or []:
        enabled = drv.mig_current(g)
        devices = mig_devices(g, drv.gpu_state(g)) if enabled else ()
        gpus.append(Gpu(g, combined_effects(drv.hw, g["index"]), enabled, devices))
    return tuple(gpus)


@dataclass
class HostView:
    """A host's machine files under `root` (the exporter's own ``/``), its hardware file, and the host's boot id
    (the runc wrapper's ``GPUREADY_LAB_BOOT_ID``; None takes the state file as this boot's)."""

    name: str
    root: Path
    hardware: Path
    boot: str | None = None
    _cache: dict[str, tuple[float, Any]] = field(default_factory=dict, repr=False)

    def _read(self, path: Path, parse: Callable[[str], Any]) -> Any:
        try:
            mtime = path.stat().st_mtime
        except OSError:
            return None
        cached = self._cache.get(str(path))
        if cached is None or cached[0] != mtime:
            try:
                cached = (mtime, parse(path.read_text()))
            except (OSError, ValueError):
                return cached[1] if cached else None  # a file being rewritten: the last good reading
            self._cache[str(path)] = cached
        return cached[1]

    def snapshot(self) -> HostState:
        hw = self._read(self.hardware, json.loads) or {"gpus": [], "faults": []}
        state_text = self._read(self.root / nvemu.DEFAULT_STATE.lstrip("/"), _json_text)
        drv = nvemu.Driver(hw, state_text, self.boot)
        try:
            driver = (self.root / DRIVER_VERSION).read_text().strip() or None
        except OSError:
            driver = None
        return HostState(self.name, driver, build_gpus(drv))


def _json_text(text: str) -> str:
    """The state file's text once it parses (a file being rewritten does not: the last good reading stays)."""
    json.loads(text or "{}")
    return text
