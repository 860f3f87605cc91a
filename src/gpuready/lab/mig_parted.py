"""NVIDIA's real ``nvidia-mig-parted``, built from its Go module once per version into the lab cache.

Like the container toolkit (:mod:`gpuready.lab.nvidia_tools`), MIG partitioning is open source Go, so the lab
runs NVIDIA's own tool over the emulated silicon instead of emulating the tool: ``nvidia-mig-parted apply``
drives the lab's mock ``libnvidia-ml.so.1`` (``lab/silicon/nvml``), whose MIG calls (``nvmlDeviceSetMigMode``,
``nvmlDeviceCreateGpuInstance``, ``nvmlGpuInstanceCreateComputeInstance``, the destroys) change the emulated
driver's state file under nvemu's lock, so the emulated ``nvidia-smi`` lists what it made at once.

How it is built, and why:

* ``go build`` inside the module as the Go module proxy serves it (``go mod download``), not ``go install
  <module>/cmd/nvidia-mig-parted@v<version>``: ``go install`` looks the module's deprecation up in the proxy's
  version list, which the proxy this project reaches refuses (403) for this module. The module's go.mod has no
  ``replace`` directives and its go.sum pins every dependency, so the build is the published one.
* cgo on (go-nvml ``dlopen``s ``libnvidia-ml.so.1``), linked as upstream's Makefile links it (``cmd-%`` target:
  ``-extldflags=-Wl,-z,lazy -s -w``); go-nvml itself adds ``-Wl,--unresolved-symbols=ignore-in-object-files``,
  so an NVML function the loaded library lacks is a ``symbol lookup error`` at its first call: the mock exports
  every function mig-parted v0.13.1 calls.
* Version stamped as the Makefile does: ``-X internal/info.version=v<version>`` (its ``VERSION ?= v0.13.1``) and
  ``-X internal/info.gitCommit=`` the release commit when the proxy's ``.info`` names one (``Origin.Hash``).
* ``-trimpath``; built in a temporary directory next to ``<cache>/nvidia-mig-parted-<version>/`` and renamed
  into place under a file lock.

What mig-parted needs from a host besides NVML (read from v0.13.1's ``cmd/nvidia-mig-parted/util``):

* ``/proc/modules`` with an ``nvidia`` line, else it takes its PCI path (config space through sysfs), which the
  lab does not emulate; the path is fixed in the binary.
* ``/sys/bus/pci/devices/<bdf>/{vendor,device,class,numa_node,resource}`` for each GPU (go-nvlib's nvpci; a
  missing ``resource`` is an error): the GPUs it walks are those, kept when NVML knows their bus id.
* ``nvidia-smi`` on PATH: after a MIG mode change is left pending it runs ``nvidia-smi -r -i <bus ids>`` (GPU
  reset), which the lab's emulated nvidia-smi does (pending mode takes effect, instances go).

Build time on this project's 2-core machine: 2 min 46 s with an empty build cache while other builds ran
(dependencies downloaded); cached: instant.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpuready.lab.gobuild import Progress, download_module, ensure_built, go_build, main_for_versions
from gpuready.lab.state import cache_dir

MODULE = "github.com/NVIDIA/mig-parted"
DEFAULT_VERSION = "0.13.1"
COMMAND = "nvidia-mig-parted"
INFO_PACKAGE = f"{MODULE}/internal/info"
EXTLDFLAGS = "-Wl,-z,lazy"  # upstream's Makefile; go-nvml's cgo flags leave NVML's symbols unresolved


def mig_parted_cache(version: str, cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / f"nvidia-mig-parted-{version}"


def cached_mig_parted(version: str = DEFAULT_VERSION, cache: Path | None = None) -> Path | None:
    """The built binary of `version`, or None when the cache has none."""
    path = mig_parted_cache(version, cache) / "bin" / COMMAND
    return path if path.is_file() else None


def ldflags(version: str, commit: str) -> str:
    """The `-ldflags` of upstream's Makefile (cmd-% target): stripped, lazy binding, version and commit stamped."""
    stamp = f"-X {INFO_PACKAGE}.gitCommit={commit} " if commit else ""
    return f"-extldflags={EXTLDFLAGS} -s -w {stamp}-X {INFO_PACKAGE}.version=v{version}"


def ensure_mig_parted(
    version: str = DEFAULT_VERSION, progress: Progress = lambda _m: None, cache: Path | None = None
) -> Path:
    """The real nvidia-mig-parted of `version`, built once into the cache."""
    target = mig_parted_cache(version, cache)

    def build(tmp: Path) -> None:
        env = {**os.environ, "CGO_ENABLED": "1", "GOFLAGS": "", "GOWORK": "off"}
        progress(f"nvidia-mig-parted v{version}: resolving {MODULE} through the Go module proxy")
        module = download_module(MODULE, f"v{version}", tmp, env)
        progress(f"nvidia-mig-parted v{version}: compiling (cgo; minutes cold)")
        args = ["-o", str(tmp / "bin" / COMMAND), f"./cmd/{COMMAND}"]
        what = f"go build of nvidia-mig-parted v{version}"
        go_build(args, module.dir, what, env, ldflags(version, module.commit))

    found, _ = ensure_built(
        target,
        target.parent / f".nvidia-mig-parted-{version}.lock",
        lambda: cached_mig_parted(version, cache),
        build,
        f"nvidia-mig-parted v{version}",
        progress,
        cgo="nvidia-mig-parted builds with cgo (go-nvml dlopens libnvidia-ml.so.1)",
    )
    return found


def main(argv: list[str] | None = None) -> int:
    """`python -m gpuready.lab.mig_parted [VERSION...]`: build nvidia-mig-parted into the lab cache."""
    return main_for_versions(
        argv, DEFAULT_VERSION, lambda v, progress: f"nvidia-mig-parted v{v}: {ensure_mig_parted(v, progress)}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
