"""The NVIDIA driver: pinned to the inventory's version and held, so it only moves when the inventory does."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import apt, systemd

from gpuready.deploy_context import current_node
from gpuready.operations import apt as gpu_apt
from gpuready.tasks.repos import repository


@deploy("NVIDIA driver")
def nvidia_driver() -> None:
    node = current_node()
    pins = node.apt_packages["driver"]
    if node.versions.driver_source == "cuda-repo":
        repository(
            repo="cuda",
            url_template=node.repos["cuda_repo_url"],
            keyring_url_template=node.repos["cuda_repo_keyring_url"],
            pins=pins,
        )
    apt.packages(
        name=f"Install NVIDIA driver {node.versions.driver}",
        packages=pins,
        no_recommends=True,
        # the pins are held: changing the version on purpose needs this flag, unattended upgrades do not get it
        extra_install_args="--allow-change-held-packages",
        allow_downgrades=True,
    )
    gpu_apt.held(name="Hold the NVIDIA driver packages", packages=pins)
    systemd.service(
        name="Enable nvidia-persistenced", service="nvidia-persistenced", running=True, enabled=True
    )
    if node.nvswitch:
        systemd.service(
            name="Enable NVIDIA Fabric Manager", service="nvidia-fabricmanager", running=True, enabled=True
        )
