"""The binary packages of an NVIDIA driver release, by name: what the apt pin holds at the driver's version.

apt evaluates a regular-expression pin (``Package: /^nvidia-.../``) against every package in its cache on every
run of every apt client: 4-5 s of CPU per ``apt-cache policy`` on a node with Debian's lists. A pin on explicit
names is a hash lookup. A name with no package at the pinned version is inert (apt applies a version pin only to
that version), so the list may cover more than one repository ships.

Sources (binary packages built from one driver release, all versioned ``<driver>-<revision>``):
- NVIDIA's CUDA repository, ``compute/cuda/repos/debian12/x86_64`` and ``debian13``, R560 and later: the Debian
  packaging of ``nvidia-graphics-drivers`` plus ``nvidia-driver-cuda``, ``nvidia-kernel-open-dkms``,
  ``nvidia-fabricmanager``, ``libnvidia-nscq``, ``nvidia-imex`` and the ``cuda-drivers`` metapackages;
- Debian's ``nvidia-graphics-drivers`` source package (non-free), for ``nvidia_driver_source = "distribution"``.
"""

from __future__ import annotations

# Userspace libraries: every one depends on libnvidia-ml1/libcuda1 or is depended on at "(= version)".
LIBRARIES = (
    "libcuda1",
    "libcudadebugger1",
    "libegl-nvidia0",
    "libgl1-nvidia-glvnd-glx",
    "libgles-nvidia1",
    "libgles-nvidia2",
    "libglx-nvidia0",
    "libnvcuvid1",
    "libnvidia-allocator1",
    "libnvidia-api1",
    "libnvidia-cfg1",
    "libnvidia-eglcore",
    "libnvidia-encode1",
    "libnvidia-fbc1",
    "libnvidia-glcore",
    "libnvidia-glvkspirv",
    "libnvidia-gpucomp",
    "libnvidia-ml1",
    "libnvidia-ngx1",
    "libnvidia-nvvm4",
    "libnvidia-opticalflow1",
    "libnvidia-pkcs11-openssl3",
    "libnvidia-ptxjitcompiler1",
    "libnvidia-rtcore",
    "libnvidia-sandboxutils1",
    "libnvoptix1",
)
# Tools, daemons, kernel module sources and metapackages.
TOOLS = (
    "nvidia-alternative",
    "nvidia-cuda-mps",
    "nvidia-driver",
    "nvidia-driver-bin",
    "nvidia-driver-cuda",
    "nvidia-driver-libs",
    "nvidia-egl-common",
    "nvidia-egl-icd",
    "nvidia-kernel-dkms",
    "nvidia-kernel-open-dkms",
    "nvidia-kernel-source",
    "nvidia-kernel-support",
    "nvidia-modprobe",
    "nvidia-open",
    "nvidia-opencl-common",
    "nvidia-opencl-icd",
    "nvidia-persistenced",
    "nvidia-powerd",
    "nvidia-settings",
    "nvidia-smi",
    "nvidia-suspend-common",
    "nvidia-vdpau-driver",
    "nvidia-vulkan-common",
    "nvidia-vulkan-icd",
    "nvidia-xconfig",
    "xserver-xorg-video-nvidia",
)
# NVSwitch and multi-node systems (the CUDA repository only).
FABRIC = ("nvidia-fabricmanager", "nvidia-fabricmanager-dev", "libnvidia-nscq", "nvidia-imex")


def driver_package_names(branch: str, source: str = "cuda-repo") -> tuple[str, ...]:
    """Every package of a driver release of ``branch`` from ``source``, sorted: the names the apt pin lists."""
    names = set(LIBRARIES + TOOLS)
    if source == "cuda-repo":
        names |= set(FABRIC)
        # branch-named variants: cuda-drivers-580, nvidia-fabricmanager-580, libnvidia-nscq-580, nvidia-imex-580
        names |= {"cuda-drivers", f"cuda-drivers-{branch}"}
        names |= {f"{name}-{branch}" for name in FABRIC if not name.endswith("-dev")}
    return tuple(sorted(names))
