"""Emulated ``nvidia-container-cli``, libnvidia-container's command-line tool: the one toolkit part the lab emulates.

``nvidia-ctk``, ``nvidia-container-runtime``, ``nvidia-cdi-hook`` and ``nvidia-container-runtime-hook`` are NVIDIA's
real binaries (:mod:`gpuready.lab.nvidia_tools`). libnvidia-container is C that loads the real driver's files and
the lab does not build it; only the legacy runtime mode needs it (the real hook runs ``nvidia-container-cli
configure``; toolkit >= 1.18 defaults to jit-cdi mode, which does not), so its CLI stays emulated.

Stdlib only (installed into lab hosts under /usr/lib/nvidia-container-emu by ``libnvidia-container-tools``). It
talks to the driver through NVML, so it imports the driver emulator (nvemu, shipped by the driver's libnvidia-ml1
package) from /usr/lib/nvidia-emu and fails as the real one does when it is missing. Output shapes follow the real
tool: ``--version``, ``info``, ``list``; ``configure`` checks what the real one checks before it mounts anything
(the driver, the devices asked for) and mounts nothing.
"""

from __future__ import annotations

import hashlib
import os
import sys

TOOLKIT_DIR = "/usr/lib/nvidia-container-emu"
DRIVER_DIR = "/usr/lib/nvidia-emu"
DEFAULT_TOOLKIT_VERSION = "1.20.0"


def toolkit_version() -> str:
    env = os.environ.get("GPUREADY_LAB_TOOLKIT_VERSION")
    if env:
        return env
    try:
        with open(os.path.join(TOOLKIT_DIR, "version"), encoding="ascii") as f:
            return f.read().strip() or DEFAULT_TOOLKIT_VERSION
    except OSError:
        return DEFAULT_TOOLKIT_VERSION


def commit() -> str:
    return hashlib.sha1(f"nvidia-container-toolkit {toolkit_version()}".encode()).hexdigest()


def load_nvml():
    """The driver emulator module, or None when no driver is installed (libnvidia-ml.so.1 missing)."""
    if DRIVER_DIR not in sys.path and os.path.isdir(DRIVER_DIR):
        sys.path.insert(0, DRIVER_DIR)
    try:
        import nvemu
    except ImportError:
        return None
    return nvemu


def _driver():
    """(nvemu module, Driver) after NVML init, or raise RuntimeError with the toolkit's error wording."""
    nvemu = load_nvml()
    if nvemu is None:
        raise RuntimeError(
            "load library failed: libnvidia-ml.so.1: cannot open shared object file: no such file or directory"
        )
    try:
        drv = nvemu.Driver()
        drv.check_loaded()
    except nvemu.NvmlError as exc:
        if exc.code == nvemu.EXIT_MISMATCH:
            raise RuntimeError("nvml error: driver/library version mismatch") from None
        raise RuntimeError("nvml error: driver not loaded") from None
    except OSError as exc:
        raise RuntimeError(f"nvml error: {exc}") from None
    return nvemu, drv


# ---- nvidia-container-cli --------------------------------------------------------------------------
def _command(argv: list[str]) -> tuple[str, list[str]]:
    """(command, its arguments): global options (``--load-kmods``, ``--ldcache=``, ``--user=``, ``--debug=``,
    ``--root=``, ``--no-pivot``, ...) come before the command, as the real hook passes them."""
    for i, arg in enumerate(argv):
        if arg in ("-V", "--version"):
            return "--version", []
        if not arg.startswith("-"):
            return arg, argv[i + 1 :]
    return "", []


def _unknown_devices(drv, wanted: str) -> list[str]:
    """The ``--device=`` ids (indexes, UUIDs, ``all``) that name no GPU or MIG device of this machine."""
    known = {"all"}
    for gpu in drv.visible_gpus():
        known |= {str(gpu["index"]), gpu["uuid"]}
        for dev in drv.mig_devices(gpu):
            known |= {f"{gpu['index']}:{dev['index']}", dev["uuid"]}
    return [d for d in wanted.split(",") if d and d not in known]


def cli_main(argv: list[str]) -> int:
    command, args = _command(argv)
    if command == "--version":
        v = toolkit_version()
        print(
            f"cli-version: {v}\nlib-version: {v}\nbuild date: 2025-10-10T12:00+00:00\n"
            f"build revision: {commit()}\nbuild compiler: x86_64-linux-gnu-gcc-7 7.5.0\n"
            "build platform: x86_64\nbuild flags: -D_GNU_SOURCE -D_FORTIFY_SOURCE=2 -DNDEBUG -std=gnu11 -O2 -g"
        )
        return 0
    if command in ("info", "list", "configure"):
        try:
            nvemu, drv = _driver()
        except RuntimeError as exc:
            print(f"nvidia-container-cli: initialization error: {exc}", file=sys.stderr)
            return 1
        if command == "configure":
            devices = next((a.split("=", 1)[1] for a in args if a.startswith("--device=")), "")
            unknown = _unknown_devices(drv, devices)
            if unknown:
                print(f"nvidia-container-cli: device error: {unknown[0]}: unknown device", file=sys.stderr)
                return 1
            if not [a for a in args if not a.startswith("-")]:
                print("nvidia-container-cli: configure: missing container root file system", file=sys.stderr)
                return 64
            return 0  # the real one mounts the driver into the container here: the lab has no driver files
        if command == "list":
            print("/dev/nvidiactl\n/dev/nvidia-uvm\n/dev/nvidia-uvm-tools\n/dev/nvidia-modeset")
            for gpu in drv.visible_gpus():
                print(f"/dev/nvidia{gpu.get('minor_number', gpu['index'])}")
            print("/usr/bin/nvidia-smi")
            return 0
        print(f"NVRM version:   {drv.version}\nCUDA version:   {nvemu.cuda_version(drv.version)}\n")
        for gpu in drv.visible_gpus():
            print(
                f"Device Index:   {gpu['index']}\nDevice Minor:   {gpu.get('minor_number', gpu['index'])}\n"
                f"Model:          {gpu['name']}\nBrand:          Nvidia\nGPU UUID:       {gpu['uuid']}\n"
                f"Bus Location:   {gpu['pci_bus_id']}\nArchitecture:   {gpu['compute_capability']}\n"
            )
        return 0
    print("Usage: nvidia-container-cli [OPTION...] COMMAND [ARG...]", file=sys.stderr)
    return 64


if __name__ == "__main__":
    sys.exit(cli_main(sys.argv[1:]))
