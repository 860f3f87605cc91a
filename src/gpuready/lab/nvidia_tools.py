"""NVIDIA's real container toolkit binaries, built from their Go module once per version into the lab cache.

The lab emulates only the silicon (see DESIGN.md, "The lab"): ``nvidia-ctk``, ``nvidia-container-runtime``,
``nvidia-cdi-hook`` and ``nvidia-container-runtime-hook`` are open source Go, so the lab's toolkit packages carry the
real ones, built from ``github.com/NVIDIA/nvidia-container-toolkit`` at the package's own version (a package
``nvidia-container-toolkit=1.20.0-1`` holds binaries that say 1.20.0; nothing is relabelled). A defect in how
gpuready drives the toolkit (``cdi generate``, the refresh units, ``runtime configure``'s containerd layout) then
shows up in the lab as it would on a node.

How it is built, and why:

* The module's go.mod has no ``replace`` directives, so ``go install <module>/cmd/<tool>@v<version>`` builds it as
  published (no wrapper module as the control plane needs).
* cgo on: go-nvml ``dlopen``s ``libnvidia-ml.so.1`` at run time (``CGO_ENABLED=0`` fails to compile it). Linked as
  upstream's Makefile links it (``-s -w``, ``-extldflags=-Wl,--export-dynamic
  -Wl,--unresolved-symbols=ignore-in-object-files -Wl,-z,lazy``): NVML's symbols are left for the library that is
  loaded, which on a lab host is the mock ``libnvidia-ml.so.1`` over the emulated machine.
* Version stamped as the Makefile does: ``-X internal/info.version=<version>`` and ``-X internal/info.gitCommit=``
  the release commit when the module proxy's ``.info`` names one (``Origin.Hash``). The public proxy's ``.info``
  for these tags carries none, so ``--version`` then prints no ``commit:`` line rather than an invented one.
* ``-trimpath``; built in a temporary directory next to ``<cache>/nvidia-container-toolkit-<version>/`` and renamed
  into place under a file lock, like the control plane (:mod:`gpuready.lab.cluster.binaries`).

What needs libnvidia-container (NVIDIA's C library, which the lab does not build) and what does not, read from
the module (``internal/runtime``, ``internal/modifier``, ``cmd/nvidia-container-runtime-hook``):

* ``nvidia-container-runtime`` in **cdi** mode (``mode = "cdi"``, or ``auto`` when the devices requested are CDI
  names) edits the OCI spec from the CDI spec files itself, and adds ``nvidia-cdi-hook`` hooks
  (``create-symlinks``, ``update-ldcache``, ``enable-cuda-compat``): pure Go, no libnvidia-container.
* **jit-cdi** mode builds the CDI spec on the fly through NVML (go-nvml): no libnvidia-container, the mock NVML
  suffices.
* **csv** mode (Tegra) reads mount lists from CSV files: no libnvidia-container.
* **legacy** mode (``auto`` on a node without CDI devices requested: runtime-class mode on bookworm's containerd
  1.6) only adds the ``nvidia-container-runtime-hook`` prestart hook, and that hook runs ``nvidia-container-cli
  configure`` (libnvidia-container's CLI) to mount the driver into the container. That CLI stays emulated in the
  lab's ``libnvidia-container-tools`` package (the static ``nvidia-emu-tools``, :mod:`gpuready.lab.silicon`).
* ``nvidia-ctk cdi generate`` (what ``nvidia-cdi-refresh.service`` runs) needs NVML (the mock), the device nodes
  under ``--dev-root`` and the driver's files under ``--driver-root``; no libnvidia-container.

What ``cdi generate`` (v1.20.0) needs from a host, measured over the lab's mock NVML (tests/unit/test_nvidia_tools.py):

* ``--dev-root`` is the directory that holds ``dev/`` (default ``/``), ``--driver-root`` the one that holds
  ``usr/lib/...``; the lab's rendered tree (:mod:`gpuready.lab.kernel_files`) serves as a dev root as it is.
* ``/dev/nvidia<minor>`` as **character devices** (195:<minor>) for every GPU: a regular file gives the device no
  edits and the whole spec is refused ("invalid device, empty device edits", exit 1). ``/dev/nvidiactl``,
  ``/dev/nvidia-uvm``, ``/dev/nvidia-uvm-tools``, ``/dev/nvidia-modeset`` go into the spec's common edits when they
  exist and are left out silently when not.
* ``libnvidia-ml.so.<driver version>`` (the version NVML reports) under the driver root's library directory; the
  spec mounts every ``*.so.<version>`` it finds (``libcuda.so.<version>`` too: any file, it is not loaded) and
  ``nvidia-smi`` if present. No ``/etc/ld.so.cache`` is needed (a warning without it).
* MIG devices additionally: ``/proc/driver/nvidia-caps/mig-minors`` at that absolute path (not under
  ``--dev-root``), ``/dev/nvidia-caps/nvidia-cap<minor>`` character devices for the instances' access
  capabilities, and NVML's MIG calls (go-nvlib's ``MigDevice.GetProfile``: ``GetGpuInstanceById``,
  ``GpuInstanceGetInfo``, ``GpuInstanceGetComputeInstanceById``, ``GpuInstanceGetComputeInstanceProfileInfo``,
  ``ComputeInstanceGetInfo_v2`` and the MIG handle calls). Linked as upstream links it, a function missing from
  the library is a lazy-binding ``symbol lookup error`` (exit 127) at its first call, not an NVML error code.
* ``/sys/bus/pci/devices/<bus id>/drm`` is read for DRM nodes; absent, a GPU simply gets none.

Build times on this project's 2-core machine: about a minute per version with Go's build cache warm (1.17.3 after
1.20.0: 22 s); 4.6 min for 1.20.0 with empty build and module caches while other builds ran; cached: instant.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpuready.lab.gobuild import (
    Progress,
    cached_commands,
    download_module,
    ensure_built,
    go_build,
    main_for_versions,
    stamped_ldflags,
)
from gpuready.lab.state import cache_dir

MODULE = "github.com/NVIDIA/nvidia-container-toolkit"
DEFAULT_VERSION = "1.20.0"  # inventory/group_data/all.py's nvidia_container_toolkit_version
# What the toolkit's Debian packages put in /usr/bin (packaging/debian/*.install), where the release has it;
# nvidia-cdi-hook is its own binary from 1.17 on.
COMMANDS = ("nvidia-ctk", "nvidia-container-runtime", "nvidia-cdi-hook", "nvidia-container-runtime-hook")
INFO_PACKAGE = f"{MODULE}/internal/info"
# upstream's Makefile (cmd-% target, Linux): NVML's symbols resolve against whichever libnvidia-ml is dlopened
EXTLDFLAGS = "-Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files -Wl,-z,lazy"


def toolkit_cache(version: str, cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / f"nvidia-container-toolkit-{version}"


def cached_toolkit(version: str = DEFAULT_VERSION, cache: Path | None = None) -> dict[str, Path] | None:
    """The built binaries of `version` by command name, or None when the cache has no complete build."""
    return cached_commands(toolkit_cache(version, cache))


def ldflags(version: str, commit: str) -> str:
    """The `-ldflags` of upstream's Makefile: stripped, NVML left unresolved, version (and commit) stamped."""
    return stamped_ldflags(EXTLDFLAGS, INFO_PACKAGE, version, commit)


def ensure_toolkit(
    version: str = DEFAULT_VERSION, progress: Progress = lambda _m: None, cache: Path | None = None
) -> dict[str, Path]:
    """The real toolkit binaries of `version` by command name (see COMMANDS), built once into the cache."""
    target = toolkit_cache(version, cache)

    def build(tmp: Path) -> None:
        env = {**os.environ, "CGO_ENABLED": "1", "GOBIN": str(tmp / "bin"), "GOFLAGS": ""}
        progress(f"NVIDIA Container Toolkit v{version}: resolving {MODULE} through the Go module proxy")
        module = download_module(MODULE, f"v{version}", tmp, env)
        commands = [c for c in COMMANDS if (module.dir / "cmd" / c).is_dir()]
        progress(f"NVIDIA Container Toolkit v{version}: compiling {', '.join(commands)} (cgo; minutes cold)")
        packages = [f"{MODULE}/cmd/{c}@v{version}" for c in commands]
        what = f"go install of the NVIDIA Container Toolkit v{version}"
        go_build(packages, tmp, what, env, ldflags(version, module.commit), verb="install")
        (tmp / "commands.json").write_text(json.dumps(commands) + "\n")

    found, _ = ensure_built(
        target,
        target.parent / f".nvidia-container-toolkit-{version}.lock",
        lambda: cached_toolkit(version, cache),
        build,
        f"NVIDIA Container Toolkit v{version}",
        progress,
        cgo="the NVIDIA Container Toolkit builds with cgo (go-nvml dlopens libnvidia-ml.so.1)",
    )
    return found


def main(argv: list[str] | None = None) -> int:
    """`python -m gpuready.lab.nvidia_tools [VERSION...]`: build the toolkit binaries the lab's packages carry."""

    def build(version: str, progress: Progress) -> str:
        built = ensure_toolkit(version, progress)
        return f"NVIDIA Container Toolkit v{version}: {', '.join(str(p) for p in built.values())}"

    return main_for_versions(argv, DEFAULT_VERSION, build)


if __name__ == "__main__":
    raise SystemExit(main())
