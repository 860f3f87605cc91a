"""What the diag layer runs on a node, as packages: DCGM 4 (``dcgmi diag`` and its host engine) and nvbandwidth.

Facts (looked up 2026-11; sources named per line):

* DCGM 4 is split into packages in NVIDIA's CUDA repository: ``datacenter-gpu-manager-4-core`` (``dcgmi``,
  ``nv-hostengine``, the ``nvidia-dcgm`` unit; versions with epoch 1, e.g. ``1:4.5.2-1``, Azure/AgentBaker#7855's
  components.json tracks it for Ubuntu 22.04/24.04) and one diagnostics package per CUDA major,
  ``datacenter-gpu-manager-4-cuda11`` / ``-cuda12`` / ``-cuda13``, to match the CUDA version the driver reports
  (NVIDIA/DCGM#255: "driver 580's user mode cuda version is 13 per DCGM user guide, which requires
  datacenter-gpu-manager-4-cuda13"; the charm of canonical/hardware-observer splits its DCGM 4 snap into
  v4-cuda-11/12/13 tracks the same way, discourse.charmhub.io/t/hardware-observer-docs-dcgm/19023).
  ``datacenter-gpu-manager-4-proprietary`` is only a Recommends of the core package, needed for the DCP
  profiling metrics, not for ``dcgmi diag`` (dstackai/dstack#2399).
* ``dcgmi`` talks to the host engine, which the package does not start: the install steps end with
  ``systemctl --now enable nvidia-dcgm`` (gist danielsnider/7d6f26959b749b026721fe82b90f5cc7, after DCGM's
  "Getting Started"; the DCGM 4 page's own command was not read here) and Google Cloud's Ops Agent DCGM page checks
  it with ``service nvidia-dcgm status`` (docs.cloud.google.com/monitoring/agent/ops-agent/third-party-nvidia).
  Without it ``dcgmi diag`` prints "Error: unable to establish a connection to the specified host: localhost"
  (:mod:`gpuready.nvidia.dcgm_diag`). The unit is ``nvidia-dcgm.service``, its daemon ``nv-hostengine``.
* nvbandwidth: NVIDIA publishes no package (github.com/NVIDIA/nvbandwidth's README: build it with a CUDA
  toolkit, cmake and Boost program_options); Debian's NVIDIA maintainers package it as ``nvbandwidth``
  (0.9+ds-2; Ubuntu multiverse, depending on the driver's compute library, packages.ubuntu.com/nvbandwidth).
  So the deploy installs it only where one of the node's apt repositories has it.

The CUDA major comes from the pinned driver's branch (:func:`gpuready.nvidia.cuda.driver_cuda`: R525-R575 are
CUDA 12, R580 and later 13); a branch older than R525 is CUDA 11.
"""

from __future__ import annotations

from gpuready.nvidia.cuda import driver_cuda

DCGM_CORE = "datacenter-gpu-manager-4-core"
DCGM_SERVICE = "nvidia-dcgm"  # nvidia-dcgm.service runs nv-hostengine
NVBANDWIDTH = "nvbandwidth"
OLDEST_CUDA_MAJOR = 11  # DCGM 4's oldest per-CUDA package


def dcgm_cuda_package(driver_version: str) -> str:
    """``datacenter-gpu-manager-4-cuda<N>`` for the CUDA major the driver supports."""
    cuda = driver_cuda(driver_version)
    return f"datacenter-gpu-manager-4-cuda{cuda[0] if cuda else OLDEST_CUDA_MAJOR}"


def dcgm_packages(driver_version: str) -> list[str]:
    """DCGM 4's packages for a node whose driver is ``driver_version``: the core and its CUDA diagnostics."""
    return [DCGM_CORE, dcgm_cuda_package(driver_version)]
