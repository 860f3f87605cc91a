"""The NVIDIA container toolkit, pinned and held like the driver (a toolkit/driver skew breaks containers)."""

from __future__ import annotations

from pyinfra.api import deploy

from gpuready.deploy.context import current_node
from gpuready.deploy.tasks.repos import install_pinned, repository
from gpuready.spec import knobs


@deploy("NVIDIA container toolkit", data_defaults=knobs.defaults("deploy"))
def container_toolkit() -> None:
    node = current_node()
    pins = node.apt_packages["toolkit"]
    repository(
        repo="nvidia-container-toolkit",
        url_template=node.repos["nvidia_container_repo_url"],
        keyring_url_template=node.repos["nvidia_container_repo_keyring_url"],
        pins=pins,
    )
    install_pinned(f"NVIDIA container toolkit {node.versions.toolkit}", pins)
