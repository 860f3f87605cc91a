"""The diag layer's tools on the node (``diag_tools``): DCGM 4 with its host engine, and nvbandwidth where served.

Without them the conformance suite's diag layer skips its DCGM and nvbandwidth checks on the node. DCGM comes
from NVIDIA's CUDA repository (the same one as the driver: this step adds it where the driver comes from the
distribution), as ``datacenter-gpu-manager-4-core`` and the diagnostics package of the pinned driver's CUDA
major; its ``nvidia-dcgm`` service runs ``nv-hostengine``, which ``dcgmi diag`` connects to. nvbandwidth has no
NVIDIA package: it is installed where one of the node's repositories has it (Debian's and Ubuntu's do), else the
deploy warns and the bandwidth checks keep skipping there (or run with ``--connection local``). Facts and sources:
:mod:`gpuready.nvidia.diag_packages`.
"""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.facts.deb import DebPackages

from gpuready.deploy.context import current_node
from gpuready.deploy.facts.apt import AptCandidate
from gpuready.deploy.facts.host import UnitState
from gpuready.deploy.node_facts import FactSpec, node_fact, reads
from gpuready.deploy.operations import apt as gpu_apt
from gpuready.deploy.operations import host as host_ops
from gpuready.deploy.tasks.repos import task_repository
from gpuready.nvidia import diag_packages
from gpuready.spec import knobs


@reads
def facts_read() -> list[FactSpec]:
    """The facts diag_tools reads where the knob is on (the repository's: tasks.repos declares those)."""
    if not current_node().diag_tools:
        return []
    return [
        (DebPackages, {}),
        (AptCandidate, {"package": diag_packages.NVBANDWIDTH}),
        (UnitState, {"unit": diag_packages.DCGM_SERVICE}),
    ]


@deploy("Diag tools", data_defaults=knobs.defaults("deploy"))
def diag_tools() -> None:
    node = current_node()
    if not node.diag_tools:
        return
    packages = node.apt_packages["diag"]
    # the CUDA repository's lists change in this run when it is new or refreshed for a missing package: the
    # nvbandwidth candidate read before the run is then stale, and the node decides itself
    lists_change = bool(gpu_apt.missing(packages))
    task_repository("diag")
    gpu_apt.installed(name=f"Install DCGM ({', '.join(packages)})", packages=packages)
    gpu_apt.where_available(
        name=f"Install {diag_packages.NVBANDWIDTH} where a repository has it",
        package=diag_packages.NVBANDWIDTH,
        lists_change=lists_change,
        no_recommends=True,
    )
    # after a driver change nv-hostengine cannot start before the reboot (NVML: driver/library mismatch)
    installed = node_fact(DebPackages).get("nvidia-driver") or []
    changing = bool(installed) and node.versions.driver_package not in installed
    host_ops.service(
        name=f"Enable {diag_packages.DCGM_SERVICE} (nv-hostengine, which dcgmi connects to)",
        unit=diag_packages.DCGM_SERVICE,
        running=None if changing else True,
        enabled=True,
    )
