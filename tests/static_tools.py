"""The lab's static ``nvidia-emu-tools`` for tests that run the emulated NVIDIA tools outside a lab host.

On a lab host the NVIDIA packages install the build under each tool's name (``/usr/bin/nvidia-smi``, ``dcgmi``, the
daemons, ...; gpuready/lab/silicon/tools). Tests run it by its first argument instead, built once per source into the
lab cache.
"""

from __future__ import annotations

import functools

import pytest


@functools.cache
def _build() -> str:
    from gpuready.lab.silicon import build

    return str(build.static_tools())


def static_tools() -> str:
    """The path of ``nvidia-emu-tools``; skips the test where Go is missing."""
    from gpuready.lab.gobuild import PrerequisiteError

    try:
        return _build()
    except PrerequisiteError as exc:
        pytest.skip(f"the lab's Go tools cannot be built here: {exc}")


def cap_minor(env: dict[str, str], gpu_minor: int, gi: int, ci: int | None = None) -> int:
    """The /dev/nvidia-caps minor of a MIG instance's access capability (GPU instance ``gi`` of the GPU with minor
    number ``gpu_minor``, or its compute instance ``ci``) on the machine ``env`` names, as the lab's ``lab-view``
    numbers it: package machine's numbering, the one the mock NVML, CUDA and the kernel files use."""
    from pathlib import Path

    from gpuready.lab.emulator import nvemu

    view = nvemu.read_view(
        Path(static_tools()),
        Path(env["GPUREADY_LAB_HARDWARE"]),
        Path(env["GPUREADY_LAB_STATE"]),
        env.get("GPUREADY_LAB_BOOT_ID"),
    )
    proc = (
        f"nvidia/capabilities/gpu{gpu_minor}/mig/gi{gi}" + (f"/ci{ci}" if ci is not None else "") + "/access"
    )
    return next(c["minor"] for g in view["gpus"] for c in g["caps"] if c["proc"] == proc)
