"""One emulated lab machine for unit tests: a hardware file (with faults), driver state, daemons up or down.

The emulated NVIDIA tools run as on a lab host: the lab's static ``nvidia-emu-tools`` (built from
gpuready/lab/silicon/tools into the lab cache, the test skipped without Go) under the tool's name, with the hardware
file, driver state, boot id and the daemons' pid files named by environment.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from static_tools import static_tools

from gpuready.lab import faults, hardware


class Machine:
    """``Machine(tmp, "h100-sxm-8", ("slow-gpu", 1))``; ``persistence``/``fabric_up``: those daemons' pid files
    name a live process (this one) so the tools see them running."""

    def __init__(
        self,
        tmp: Path,
        profile: str,
        *fault: tuple[str, int | None],
        node: int = 0,
        driver: str = "580.178.04",
        persistence: bool = False,
        fabric_up: bool = False,
    ) -> None:
        self.tmp = tmp
        self.hw_path = tmp / "hardware.json"
        self.hw = hardware.make_hardware(profile, node)
        for name, gpu in fault:
            self.hw = faults.apply_fault(self.hw, name, gpu)
        hardware.write_hardware(self.hw_path, self.hw)
        pids = {"persistenced": (tmp / "persistenced.pid", persistence), "fm": (tmp / "fm.pid", fabric_up)}
        for path, up in pids.values():
            if up:
                path.write_text(f"{os.getpid()}\n")
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GPUREADY_LAB_HARDWARE": str(self.hw_path),
            "GPUREADY_LAB_STATE": str(tmp / "state" / "state.json"),
            "GPUREADY_LAB_BOOT_ID": "boot-1",
            "GPUREADY_LAB_DRIVER_VERSION": driver,
            "GPUREADY_LAB_PERSISTENCED_PID": str(pids["persistenced"][0]),
            "GPUREADY_LAB_FABRICMANAGER_PID": str(pids["fm"][0]),
        }

    def run(self, tool: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """Run the static tools' ``tool`` (``nvidia-smi``, ``dcgmi``, ...; gpuready/lab/silicon/tools/main.go) with
        ``args``."""
        return subprocess.run(
            [static_tools(), tool, *args],
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=30,
        )
