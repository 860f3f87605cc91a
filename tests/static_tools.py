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
