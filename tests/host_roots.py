"""Fake GPU host roots for the node agent: the files a lab host has after the gpu_node deploy, without booting one.

The agent reads a host's GPUs, driver, MIG state and containerd runtimes from files (gpuready.lab.agent.gpu_host);
tests that need a particular host (a model, a MIG layout, a fault, no driver, no nvidia drop-in) write one here
and attach it to a virtual node (the agent's ``attach_host`` control request).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from gpuready.lab.agent.gpu_host import build_gpus, cdi_names
from gpuready.lab.hardware import make_hardware, write_hardware
from gpuready.nvidia.containerd_config import RuntimeSettings, render_drop_in, render_main

DRIVER = "580.178.04"
CONTAINERD_MAIN = """\
version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
"""


def make_host(
    base: Path,
    name: str,
    profile: str,
    index: int = 0,
    *,
    nvidia_dropin: bool = True,
    mig: dict[int, list[str]] | None = None,
    faults: list[dict[str, Any]] | None = None,
    driver: str | None = DRIVER,
    persistence: bool = False,
    cdi: bool = True,
) -> tuple[Path, Path]:
    """A host root as the gpu_node deploy leaves it; `mig` maps GPU index -> MIG profiles to create; `cdi`: CDI
    mode (containerd 1.7 with enable_cdi in the drop-in, the toolkit's spec in /etc/cdi; a fake root has no live
    /var/run). Returns (root, hardware file)."""
    root = base / name / "merged"
    hardware = base / name / "machine" / "hardware.json"
    hw = make_hardware(profile, index)
    hw["faults"] = list(faults or [])
    write_hardware(hardware, hw)
    for d in (
        "usr/bin",
        "usr/lib/nvidia-emu",
        "usr/lib/x86_64-linux-gnu",
        "etc/containerd/conf.d",
        "var/lib/nvidia-emu",
        "var/lib/dpkg",
    ):
        (root / d).mkdir(parents=True, exist_ok=True)
    if driver:
        (root / "usr/bin/nvidia-smi").write_text("#!/usr/bin/python3\n")
        (root / "usr/lib/nvidia-emu/driver-version").write_text(driver + "\n")
        (root / "usr/lib/nvidia-emu/kmod-version").write_text(driver + "\n")
        (root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").write_text("emulated NVML\n")
    (root / "usr/bin/nvidia-container-runtime").write_text("#!/usr/bin/python3\n")
    (root / "var/lib/dpkg/status").write_text(
        "Package: containerd\nStatus: install ok installed\nVersion: 1.7.24~ds1-6+b4\n\n"
    )
    settings = RuntimeSettings(enable_cdi=cdi)
    main = render_main(CONTAINERD_MAIN, settings)
    (root / "etc/containerd/config.toml").write_text(main)
    if nvidia_dropin:
        (root / "etc/containerd/conf.d/99-nvidia.toml").write_text(render_drop_in(main, settings))
    gpus = {}
    for g in hw["gpus"]:
        gis = []
        by_name = {p["name"]: p for p in g["mig_profiles"]}
        start = 0
        for gi_id, prof_name in enumerate((mig or {}).get(g["index"], []), start=1):
            p = by_name[prof_name]
            gis.append(
                {
                    "id": gi_id,
                    "profile_id": p["profile_id"],
                    "start": start,
                    "size": p["placement_size"],
                    "cis": [{"id": 0, "profile_id": 0, "start": 0, "size": p["compute_slices"]}],
                }
            )
            start += p["placement_size"]
        on = g["index"] in (mig or {})
        gpus[g["uuid"]] = {"mig_current": on, "mig_pending": on, "persistence": persistence, "gis": gis}
    state = {"boot_id": "b", "kmod": driver, "gpus": gpus}
    (root / "var/lib/nvidia-emu/state.json").write_text(json.dumps(state))
    if cdi and driver:
        write_cdi_spec(root, hw, state)
    return root, hardware


def write_cdi_spec(
    root: Path, hw: dict[str, Any], state: dict[str, Any], leave_out: tuple[str, ...] = ()
) -> None:
    """The toolkit's spec for these GPUs and MIG devices (names as ``nvidia-ctk cdi generate`` gives them), less
    the names in ``leave_out`` (a stale spec)."""
    names = [n for n in cdi_names(build_gpus(hw, state)) if n not in leave_out]
    devices = [{"name": n, "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}} for n in names]
    spec = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": devices, "containerEdits": {}}
    (root / "etc/cdi").mkdir(parents=True, exist_ok=True)
    (root / "etc/cdi/nvidia.yaml").write_text(yaml.safe_dump(spec))
