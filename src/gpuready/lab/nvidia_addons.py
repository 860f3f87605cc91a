"""NVIDIA's real Kubernetes add-ons, built from their Go modules once per version into the lab cache.

The device plugin and GPU feature discovery are open source Go (``github.com/NVIDIA/k8s-device-plugin``), so the
lab runs the real ones (issue #29; DESIGN.md, "The lab"). The module proxy serves v0.19.3 (and v0.18.2), not the
product default v0.20.0: the lab builds what is served and its inventory pins that image in real-kubelet mode.

How it is built, read from the module (v0.19.3's Makefile, ``deployments/container/Dockerfile``):

* ``cmd/`` holds ``nvidia-device-plugin``, ``gpu-feature-discovery``, ``config-manager`` and
  ``mps-control-daemon``; the image carries all four in ``/usr/bin`` (``COMMANDS``), entrypoint
  ``nvidia-device-plugin``. go.mod has no ``replace`` directives: ``go build ./cmd/...`` in the module's
  downloaded directory (as the Makefile builds; ``go install <cmd>@<version>`` would first list the module's versions
  for a deprecation notice, which the lab's proxy refuses with 403).
* cgo on (go-nvml ``dlopen``s ``libnvidia-ml.so.1``), linked as the Makefile links it on Linux:
  ``-s -w '-extldflags=-Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files'`` (no ``-z,lazy``,
  unlike the container toolkit's Makefile), so NVML's symbols resolve against the library found at run time: on a
  lab host the mock ``libnvidia-ml.so.1`` over the emulated machine.
* ``-X internal/info.version=v<version>`` (versions.mk's ``VERSION``, with its "v") and ``-X
  internal/info.gitCommit=`` the release commit the proxy's ``.info`` names (``Origin.Hash``; empty when none).
* Cached as :mod:`gpuready.lab.nvidia_tools` caches the toolkit, through :func:`gpuready.lab.gobuild.ensure_built`:
  ``<cache>/k8s-device-plugin-<version>/bin/<cmd>`` with ``commands.json``.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from gpuready.lab import go_images
from gpuready.lab.gobuild import (
    Progress,
    build_module_commands,
    cached_commands,
    ensure_built,
    main_for_versions,
    stamped_ldflags,
)
from gpuready.lab.state import cache_dir

MODULE = "github.com/NVIDIA/k8s-device-plugin"
NAME = "k8s-device-plugin"
DEFAULT_VERSION = "0.19.3"  # the newest the Go module proxy serves (v0.20.0 is not)
# inventory/group_data/all.py's device_plugin_image, untagged
IMAGE_REPOSITORY = "nvcr.io/nvidia/k8s-device-plugin"
# deployments/container/Dockerfile copies these four into /usr/bin
COMMANDS = ("nvidia-device-plugin", "gpu-feature-discovery", "config-manager", "mps-control-daemon")
INFO_PACKAGE = f"{MODULE}/internal/info"
# upstream's Makefile (Linux): NVML's symbols resolve against whichever libnvidia-ml is dlopened
EXTLDFLAGS = "-Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files"


def image_name(version: str = DEFAULT_VERSION) -> str:
    """The upstream image name of `version`: ``nvcr.io/nvidia/k8s-device-plugin:v<version>``."""
    return f"{IMAGE_REPOSITORY}:v{version}"


def plugin_cache(version: str, cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / f"{NAME}-{version}"


def cached_plugin(version: str = DEFAULT_VERSION, cache: Path | None = None) -> dict[str, Path] | None:
    """The built binaries of `version` by command name, or None when the cache has no complete build."""
    return cached_commands(plugin_cache(version, cache))


def ldflags(version: str, commit: str) -> str:
    """The `-ldflags` of upstream's Makefile: stripped, NVML left unresolved, ``v<version>`` (and commit)."""
    return stamped_ldflags(EXTLDFLAGS, INFO_PACKAGE, f"v{version}", commit)


def ensure_plugin(
    version: str = DEFAULT_VERSION, progress: Progress = lambda _m: None, cache: Path | None = None
) -> dict[str, Path]:
    """The real device plugin's binaries of `version` by command name (see COMMANDS), built once into the cache."""
    target = plugin_cache(version, cache)
    label = f"NVIDIA device plugin v{version}"

    def build(tmp: Path) -> None:
        env = {**os.environ, "CGO_ENABLED": "1", "GOFLAGS": ""}
        commit_ldflags = partial(ldflags, version)
        build_module_commands(MODULE, f"v{version}", COMMANDS, tmp, env, commit_ldflags, label, progress)

    found, _ = ensure_built(
        target,
        target.parent / f".{NAME}-{version}.lock",
        lambda: cached_plugin(version, cache),
        build,
        label,
        progress,
        cgo="the NVIDIA device plugin builds with cgo (go-nvml dlopens libnvidia-ml.so.1)",
    )
    return found


# --- the image ----------------------------------------------------------------------------------------------------

# deployments/container/Dockerfile's ENV and ENTRYPOINT (its base, nvcr.io/nvidia/distroless/go:*-dev, gives
# glibc and /busybox)
IMAGE_CONFIG = {
    "Entrypoint": ["nvidia-device-plugin"],
    "Env": [
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/busybox",
        "NVIDIA_DISABLE_REQUIRE=true",
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
    ],
    "Labels": {"name": "NVIDIA Device Plugin", "vendor": "NVIDIA"},
}


def image_archive(version: str = DEFAULT_VERSION, progress: Progress = lambda _m: None) -> tuple[str, bytes]:
    """The OCI archive of ``nvcr.io/nvidia/k8s-device-plugin:v<version>`` (file name, bytes) for the lab hosts'
    containerd: the four commands in /usr/bin (as the Dockerfile copies them), built from the cached binaries once
    into the plugin's cache directory (:func:`gpuready.lab.go_images.cached_archive`)."""
    binaries = ensure_plugin(version, progress)
    return go_images.cached_archive(
        plugin_cache(version) / f"{NAME}_v{version}.oci.tar",
        image_name(version),
        {f"usr/bin/{name}": path for name, path in binaries.items()},
        IMAGE_CONFIG,
        f"NVIDIA device plugin v{version}",
        progress,
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m gpuready.lab.nvidia_addons [VERSION...]`: build the device plugin and the lab's image of it."""

    def build(version: str, progress: Progress) -> str:
        name, data = image_archive(version, progress)
        return f"{image_name(version)}: {plugin_cache(version) / name}, {len(data)} bytes"

    return main_for_versions(argv, DEFAULT_VERSION, build)


if __name__ == "__main__":
    raise SystemExit(main())
