"""Which CUDA a container image needs and which CUDA a driver supports.

A CUDA application runs only where the driver supports its CUDA version or newer (without the data-center forward
compatibility package, which gpuready does not install): a CUDA 12.5 image on a driver whose ``nvidia-smi``
says "CUDA Version: 12.4" fails with "CUDA driver version is insufficient for CUDA runtime version". The
conformance suite compares each image it runs with what ``nvidia-smi`` reports on the node; ``gpuready plan``
compares them with the pinned driver's branch, from NVIDIA's CUDA toolkit release notes (minimum Linux driver
per toolkit release: 12.0 -> 525, 12.1 -> 530, 12.2 -> 535, 12.3 -> 545, 12.4 -> 550, 12.5 -> 555,
12.6 -> 560, 12.8 -> 570, 12.9 -> 575, 13.0 -> 580, and the 590/595 branches with 13.1/13.2).
"""

from __future__ import annotations

import re

Version = tuple[int, int]

# The last word of a good vectorAdd run: NVIDIA's cuda-samples vectorAdd prints it, and so does gpuready's own
# (gpuready.conformance.cuda.vector_add) for each device.
VECTOR_ADD_PASSED = "Test PASSED"
# The exit status of gpuready's CUDA tools (vectorAdd, copy bandwidth) where the machine has no libcuda.so.1: the
# check then skips ("no CUDA driver here") instead of failing.
NO_LIBCUDA = 3

BRANCH_CUDA: dict[int, Version] = {
    525: (12, 0),
    530: (12, 1),
    535: (12, 2),
    545: (12, 3),
    550: (12, 4),
    555: (12, 5),
    560: (12, 6),
    565: (12, 7),
    570: (12, 8),
    575: (12, 9),
    580: (13, 0),
    590: (13, 1),
    595: (13, 2),
}


def parse(text: str | None) -> Version | None:
    """``"12.4"`` (as nvidia-smi prints it) -> (12, 4); None when absent or not a version."""
    found = re.match(r"^\s*(\d+)\.(\d+)", text or "")
    return (int(found[1]), int(found[2])) if found else None


def show(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def image_cuda(image: str) -> Version | None:
    """The CUDA version an image is built for, from its tag: ``cuda-sample:vectoradd-cuda12.5.0-...`` or
    ``nvidia/cuda:12.4.1-base-...``; None when the tag does not say (a digest-only reference, another image)."""
    name = image.split("@", 1)[0]
    repository, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "")
    found = re.search(r"cuda-?(\d+)\.(\d+)", tag)
    if found is None and repository.rsplit("/", 1)[-1] == "cuda":
        found = re.match(r"(\d+)\.(\d+)", tag)
    return (int(found[1]), int(found[2])) if found else None


def driver_cuda(driver_version: str) -> Version | None:
    """The newest CUDA a driver supports, from its branch (the closest known branch at or below it)."""
    found = re.match(r"^(\d+)", driver_version)
    if not found:
        return None
    branch = int(found[1])
    known = [b for b in BRANCH_CUDA if b <= branch]
    return BRANCH_CUDA[max(known)] if known else None
