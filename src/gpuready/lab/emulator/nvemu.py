"""The emulated driver as the lab's Python side reads it: paths and the machine's view.

Every emulated NVIDIA tool and library on a lab host is Go over package machine (``lab/silicon``: the mock
libnvidia-ml.so.1 and libcuda.so.1, nvidia-smi, dcgmi, nvbandwidth, the daemons, nvidia-container-cli); none of this
module is installed in a host. What the lab shows of the machine outside them, the kernel's files (``kernel_files``:
/dev, /proc/driver/nvidia and sysfs) and the lab's dcgm-exporter (``lab/dcgm_exporter``), comes from the same
package: :func:`read_view` runs the static tools' ``lab-view``, which prints package machine's View of every GPU (the
faults' effects combined, the driver state as the host's boot leaves it, the MIG devices and their capability
minors). So each fault effect, the reset at reboot, the MIG device numbering and the capability minors are derived
once, in Go. The machine (GPUs, faults) is the read-only hardware file the lab writes; what a real driver keeps in
the kernel (MIG mode, GPU/compute instances, persistence mode, the loaded module version) lives in the host's state
file.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, cast

DEFAULT_STATE = "/var/lib/nvidia-emu/state.json"
DRIVER_DIR = "/usr/lib/nvidia-emu"

# The device nodes a GPU container was given (lab-internal; the lab's runc wrapper sets it in every GPU container):
# their paths, comma separated. What they reveal of the machine
# is package machine's rule (lab/silicon/machine/contain.go), which the mock NVML and CUDA and the tools apply.
CONTAINER_DEVICES = "GPUREADY_LAB_CONTAINER_DEVICES"
TOOLS = "nvidia-emu-tools"  # the static tools' copy in each host's machine directory (hosts._write_hardware)
VIEW = "lab-view"  # the tool that prints the machine's view (lab/silicon/tools/view.go)


def read_view(tools: Path, hardware: Path, state: Path | None, boot: str | None) -> dict[str, Any]:
    """The machine as package machine derives it, from ``nvidia-emu-tools lab-view``: ``boot_id``, ``kmod`` (the
    module loaded this boot, or None), ``host_effects`` (the host-wide faults' effects combined) and ``gpus`` in
    index order, each with its ``effects`` (its faults combined), ``off_bus``, the trained link (``pcie_gen``,
    ``pcie_width``), remapped rows (``remap_correctable``, ``remap_uncorrectable``, ``remap_pending``), ``xids``,
    ``mig_current`` and, with MIG on, its GPU instances (``gis``), MIG devices (``mig_devices``) and their access
    capabilities (``caps``: /proc/driver file and minor); and ``mig_minors``, the driver's table of every minor. The
    one derivation: the mock NVML and CUDA and the tools read the same View, so the kernel files and the exporter
    cannot disagree with nvidia-smi.

    ``boot`` is the host's current boot id: a state file from an earlier boot reads as reset, as a reboot resets
    the GPUs. None takes the state file as this boot's. The environment is the view's alone: a GPU container's
    device list (CONTAINER_DEVICES) would narrow it to that container's GPUs."""
    if boot is None and state is not None:
        try:
            boot = json.loads(state.read_text() or "{}").get("boot_id")
        except (OSError, ValueError):
            boot = None
    env = {
        "GPUREADY_LAB_HARDWARE": str(hardware),
        "GPUREADY_LAB_STATE": str(state) if state is not None else "/nonexistent",
        "GPUREADY_LAB_BOOT_ID": boot or "unknown-boot",
    }
    result = subprocess.run(
        [str(tools), VIEW], env=env, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
    )
    if result.returncode != 0:
        raise RuntimeError(f"{tools} {VIEW}: {result.stderr.strip() or f'exit status {result.returncode}'}")
    return cast(dict[str, Any], json.loads(result.stdout))
