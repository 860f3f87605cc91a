"""NVIDIA's DRA driver for GPUs (``sigs.k8s.io/dra-driver-nvidia-gpu``), built from its Go module once per version
into the lab cache and packaged as the image gpuready's DRA manifests start (issue #29 item 1).

How it is built, read from the module (v0.4.1's Makefile, ``deployments/container/Dockerfile``):

* ``cmd/`` holds ``gpu-kubelet-plugin``, ``compute-domain-controller``, ``compute-domain-kubelet-plugin``,
  ``compute-domain-daemon`` and ``webhook``; the image carries all five in ``/usr/bin``. gpuready starts only the
  GPU kubelet plugin (:mod:`gpuready.deploy.dra_addons`: ComputeDomains off, so no controller, no webhook), so the
  lab builds only that command. go.mod has no ``replace`` directives and the module zip no ``vendor/``:
  ``go build ./cmd/gpu-kubelet-plugin`` in the module's downloaded directory (``go install <cmd>@<version>``
  lists versions first, which the lab's proxy refuses with 403).
* cgo on (go-nvml ``dlopen``s ``libnvidia-ml.so.1``, from the driver root: the plugin finds it under
  ``/driver-root``), linked as the Makefile's ``cmd-%`` target links it: ``-s -w``, no extra ``-extldflags``
  (go-nvml's own ``#cgo LDFLAGS`` asks for ``--unresolved-symbols=ignore-in-object-files``, which the Makefile
  allows through ``CGO_LDFLAGS_ALLOW``), ``-X internal/info.version=v<version>`` (the ``VERSION`` file, with its
  "v") and ``-X internal/info.gitCommit=`` the release commit the proxy's ``.info`` names.
* the image ``registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v<version>`` (the product's
  ``dra_driver_image`` default): the plugin in ``/usr/bin``, ``/usr/bin/nvidia-cdi-hook`` (upstream copies it from
  the container toolkit's image; here the lab's toolkit build, :mod:`gpuready.lab.nvidia_tools`: the plugin copies
  it to the host's plugin directory and names it in the CDI specs it writes), glibc and busybox
  (:mod:`gpuready.lab.go_images`), the Dockerfile's ``ENV``. Cached at
  ``<cache>/dra-driver-nvidia-gpu-<version>/``.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from gpuready.lab import go_images, nvidia_tools
from gpuready.lab.gobuild import (
    Progress,
    build_module_commands,
    cached_commands,
    ensure_built,
    main_for_versions,
)
from gpuready.lab.state import cache_dir

MODULE = "sigs.k8s.io/dra-driver-nvidia-gpu"
NAME = "dra-driver-nvidia-gpu"
DEFAULT_VERSION = "0.4.1"  # inventory/group_data/all.py's dra_driver_image
IMAGE_REPOSITORY = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu"
# what gpuready's manifests start (dra_addons.kubelet_plugin's command)
COMMANDS = ("gpu-kubelet-plugin",)
INFO_PACKAGE = f"{MODULE}/internal/info"
# the Makefile's cmd-% target: go-nvml's #cgo LDFLAGS are let through, nothing added to the C linker's flags
CGO_LDFLAGS_ALLOW = "-Wl,--unresolved-symbols=ignore-in-object-files"


def image_name(version: str = DEFAULT_VERSION) -> str:
    """``registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v<version>``."""
    return f"{IMAGE_REPOSITORY}:v{version}"


def driver_cache(version: str, cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / f"{NAME}-{version}"


def cached_driver(version: str = DEFAULT_VERSION, cache: Path | None = None) -> dict[str, Path] | None:
    """The built binaries of `version` by command name, or None when the cache has no complete build."""
    return cached_commands(driver_cache(version, cache))


def ldflags(version: str, commit: str) -> str:
    """The Makefile's ``-ldflags``: stripped, ``v<version>`` and the commit stamped."""
    stamp = f"-X {INFO_PACKAGE}.version=v{version}"
    return f"-s -w {stamp}" + (f" -X {INFO_PACKAGE}.gitCommit={commit}" if commit else "")


def ensure_driver(
    version: str = DEFAULT_VERSION, progress: Progress = lambda _m: None, cache: Path | None = None
) -> dict[str, Path]:
    """The DRA driver's binaries of `version` by command name (see COMMANDS), built once into the cache."""
    target = driver_cache(version, cache)
    label = f"NVIDIA DRA driver v{version}"

    def build(tmp: Path) -> None:
        env = {**os.environ, "CGO_ENABLED": "1", "GOFLAGS": "", "CGO_LDFLAGS_ALLOW": CGO_LDFLAGS_ALLOW}
        commit_ldflags = partial(ldflags, version)
        build_module_commands(MODULE, f"v{version}", COMMANDS, tmp, env, commit_ldflags, label, progress)

    found, _ = ensure_built(
        target,
        target.parent / f".{NAME}-{version}.lock",
        lambda: cached_driver(version, cache),
        build,
        label,
        progress,
        cgo="NVIDIA's DRA driver builds with cgo (go-nvml dlopens libnvidia-ml.so.1)",
    )
    return found


# deployments/container/Dockerfile's ENV (its base, gcr.io/distroless/cc:debug, gives glibc and /busybox; no
# ENTRYPOINT of its own: the chart and gpuready's manifest name the command). Upstream's ``USER root:root`` comes
# with an /etc/passwd to resolve it; the lab's image has neither, so it runs as uid 0 all the same)
IMAGE_CONFIG = {
    "Env": [
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/busybox",
        "NVIDIA_DISABLE_REQUIRE=true",
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_DRIVER_CAPABILITIES=utility",
    ],
    "Labels": {"name": "DRA Driver for NVIDIA GPUs", "vendor": "NVIDIA"},
}


def image_archive(version: str = DEFAULT_VERSION, progress: Progress = lambda _m: None) -> tuple[str, bytes]:
    """The OCI archive of :func:`image_name` (file name, bytes) for the lab hosts' containerd, written once into
    the driver's cache directory."""
    binaries = ensure_driver(version, progress)
    hook = nvidia_tools.ensure_toolkit(progress=progress)["nvidia-cdi-hook"]
    files = {f"usr/bin/{name}": path for name, path in binaries.items()}
    files["usr/bin/nvidia-cdi-hook"] = hook
    return go_images.cached_archive(
        driver_cache(version) / f"{NAME}_v{version}.oci.tar",
        image_name(version),
        files,
        IMAGE_CONFIG,
        f"NVIDIA DRA driver v{version}",
        progress,
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m gpuready.lab.dra_image [VERSION...]`: build the DRA driver and the lab's image of it."""

    def build(version: str, progress: Progress) -> str:
        name, data = image_archive(version, progress)
        return f"{image_name(version)}: {driver_cache(version) / name}, {len(data)} bytes"

    return main_for_versions(argv, DEFAULT_VERSION, build)


if __name__ == "__main__":
    raise SystemExit(main())
