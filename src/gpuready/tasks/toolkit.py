"""The NVIDIA container toolkit, pinned and held like the driver (a toolkit/driver skew breaks containers)."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import apt

from gpuready.deploy_context import current_node
from gpuready.operations import apt as gpu_apt
from gpuready.tasks.repos import repository


@deploy("NVIDIA container toolkit")
def container_toolkit() -> None:
    node = current_node()
    pins = node.apt_packages["toolkit"]
    repository(
        repo="nvidia-container-toolkit",
        url_template=node.repos["nvidia_container_repo_url"],
        keyring_url_template=node.repos["nvidia_container_repo_keyring_url"],
        pins=pins,
    )
    apt.packages(
        name=f"Install NVIDIA container toolkit {node.versions.toolkit}",
        packages=pins,
        no_recommends=True,
        extra_install_args="--allow-change-held-packages",
        allow_downgrades=True,
    )
    gpu_apt.held(name="Hold the container toolkit packages", packages=pins)
