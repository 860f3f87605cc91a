"""Emulated NVIDIA Container Toolkit: `nvidia-ctk`, `nvidia-container-cli`, `nvidia-container-runtime`.

Stdlib only (installed into lab hosts under /usr/lib/nvidia-container-emu by the toolkit packages). The
toolkit talks to the driver through NVML, so these tools import the driver emulator (nvemu, shipped by the
driver's libnvidia-ml1 package) from /usr/lib/nvidia-emu and fail as the real ones do when it is missing.
Version strings and output shapes follow the real tools (toolkit 1.18): ``nvidia-ctk --version``,
CDI specs (cdiVersion, kind nvidia.com/gpu, devices by index, UUID and "all"), ``nvidia-container-cli info``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys

TOOLKIT_DIR = "/usr/lib/nvidia-container-emu"
DRIVER_DIR = "/usr/lib/nvidia-emu"
DEFAULT_TOOLKIT_VERSION = "1.20.0"
CDI_VERSION = "0.5.0"
RUNC_SPEC = "1.2.1"


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


# ---- nvidia-ctk ------------------------------------------------------------------------------------
def _yaml_device(name: str, nodes: list[str]) -> list[str]:
    out = ["- containerEdits:", "    deviceNodes:"]
    out += [f"    - path: {node}" for node in nodes]
    out.append(f'  name: "{name}"' if name.replace(":", "").isdigit() else f"  name: {name}")
    return out


def cdi_spec() -> str:
    _nvemu, drv = _driver()
    from gpu_tree import GpuView

    devices: list[str] = []
    all_nodes = []
    for gpu in drv.visible_gpus():
        node = f"/dev/nvidia{gpu.get('minor_number', gpu['index'])}"
        all_nodes.append(node)
        devices += _yaml_device(str(gpu["index"]), [node])
        devices += _yaml_device(gpu["uuid"], [node])
        for dev in GpuView(drv, gpu).mig_devices():
            caps = [node, f"/dev/nvidia-caps/nvidia-cap{dev['gi'] * 9 + dev['ci'] + 31}"]
            devices += _yaml_device(f"{gpu['index']}:{dev['index']}", caps)
            devices += _yaml_device(dev["uuid"], caps)
    devices += _yaml_device("all", all_nodes)
    version = drv.version
    lib = "/usr/lib/x86_64-linux-gnu"
    lines = [
        "---",
        f"cdiVersion: {CDI_VERSION}",
        "containerEdits:",
        "  deviceNodes:",
        "  - path: /dev/nvidia-modeset",
        "  - path: /dev/nvidia-uvm",
        "  - path: /dev/nvidia-uvm-tools",
        "  - path: /dev/nvidiactl",
        "  env:",
        "  - NVIDIA_VISIBLE_DEVICES=void",
        "  hooks:",
        "  - args:",
        "    - nvidia-cdi-hook",
        "    - create-symlinks",
        "    - --link",
        f"    - libcuda.so.1::{lib}/libcuda.so",
        "    hookName: createContainer",
        "    path: /usr/bin/nvidia-cdi-hook",
        "  - args:",
        "    - nvidia-cdi-hook",
        "    - update-ldcache",
        "    - --folder",
        f"    - {lib}",
        "    hookName: createContainer",
        "    path: /usr/bin/nvidia-cdi-hook",
        "  mounts:",
    ]
    for so in ("libcuda.so", "libnvidia-ml.so"):
        lines += [
            f"  - containerPath: {lib}/{so}.{version}",
            f"    hostPath: {lib}/{so}.{version}",
            "    options:",
            "    - ro",
            "    - nosuid",
            "    - nodev",
            "    - rbind",
            "    - rprivate",
        ]
    lines += [
        "  - containerPath: /usr/bin/nvidia-smi",
        "    hostPath: /usr/bin/nvidia-smi",
        "    options:",
        "    - ro",
        "    - nosuid",
        "    - nodev",
        "    - rbind",
        "    - rprivate",
    ]
    lines.append("devices:")
    lines += devices
    lines.append("kind: nvidia.com/gpu")
    return "\n".join(lines) + "\n"


def ctk_main(argv: list[str]) -> int:
    if argv[:1] in (["--version"], ["-v"]) or argv[:1] == ["version"]:
        print(f"NVIDIA Container Toolkit CLI version {toolkit_version()}\ncommit: {commit()}")
        return 0
    if argv[:2] == ["cdi", "generate"]:
        output = None
        for i, arg in enumerate(argv[2:], start=2):
            if arg.startswith("--output="):
                output = arg.split("=", 1)[1]
            elif arg == "--output" and i + 1 < len(argv):
                output = argv[i + 1]
        try:
            spec = cdi_spec()
        except RuntimeError as exc:
            print(
                f"ERRO[0000] failed to generate CDI spec: failed to create device CDI specs: {exc}",
                file=sys.stderr,
            )
            return 1
        if output:
            os.makedirs(os.path.dirname(output) or ".", exist_ok=True)
            tmp = output + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(spec)
            os.chmod(tmp, 0o644)
            os.replace(tmp, output)
            print(f"INFO[0000] Generated CDI spec with version {CDI_VERSION}", file=sys.stderr)
        else:
            sys.stdout.write(spec)
        return 0
    if argv[:2] == ["cdi", "list"]:
        names = []
        for path in ("/etc/cdi/nvidia.yaml", "/var/run/cdi/nvidia.yaml"):
            try:
                with open(path, encoding="utf-8") as f:
                    names += [ln.split(":", 1)[1].strip().strip('"') for ln in f if ln.startswith("  name:")]
            except OSError:
                continue
        print(f"INFO[0000] Found {len(names)} CDI devices", file=sys.stderr)
        for name in names:
            print(f"nvidia.com/gpu={name}")
        return 0
    if argv[:2] == ["system", "create-dev-char-symlinks"]:
        return 0
    print(f"Incorrect Usage: unknown command {' '.join(argv[:2])!r}", file=sys.stderr)
    return 1


# ---- nvidia-container-cli --------------------------------------------------------------------------
def cli_main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--load-kmods") and a not in ("-k", "--debug")]
    if args[:1] in (["--version"], ["-V"]):
        v = toolkit_version()
        print(
            f"cli-version: {v}\nlib-version: {v}\nbuild date: 2025-10-10T12:00+00:00\n"
            f"build revision: {commit()}\nbuild compiler: x86_64-linux-gnu-gcc-7 7.5.0\n"
            "build platform: x86_64\nbuild flags: -D_GNU_SOURCE -D_FORTIFY_SOURCE=2 -DNDEBUG -std=gnu11 -O2 -g"
        )
        return 0
    if args[:1] in (["info"], ["list"]):
        try:
            nvemu, drv = _driver()
        except RuntimeError as exc:
            print(f"nvidia-container-cli: initialization error: {exc}", file=sys.stderr)
            return 1
        if args[0] == "list":
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


# ---- nvidia-container-runtime ------------------------------------------------------------------------
def runtime_main(argv: list[str]) -> int:
    """A shim like the real runtime: it would inject GPUs into the OCI spec, then it hands off to runc."""
    runc = os.environ.get("GPUREADY_LAB_RUNC") or shutil.which("runc")
    if argv[:1] in (["--version"], ["-v"]):
        print(
            f"NVIDIA Container Runtime version {toolkit_version()}\ncommit: {commit()}\nspec: {RUNC_SPEC}\n"
        )
        sys.stdout.flush()
        if runc:
            os.execv(runc, [runc, "--version"])
        return 0
    if not runc:
        print(
            "ERRO[0000] error running nvidia-container-runtime: error constructing low-level runtime: "
            "error locating runtime: no runtime binary found from candidate list: [runc crun]",
            file=sys.stderr,
        )
        return 1
    os.execv(runc, [runc, *argv])
    return 1  # not reached


if __name__ == "__main__":
    tool = os.path.basename(sys.argv[0])
    entry = {"nvidia-ctk": ctk_main, "nvidia-container-cli": cli_main}.get(tool, runtime_main)
    sys.exit(entry(sys.argv[1:]))
