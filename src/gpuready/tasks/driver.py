"""The NVIDIA driver: pinned to the inventory's version and held, so it only moves when the inventory does."""

from __future__ import annotations

from io import StringIO

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.facts.deb import DebPackages
from pyinfra.operations import files, systemd

from gpuready.deploy_context import current_node
from gpuready.tasks.repos import install_pinned, repository

# Every package of the driver, not only the ones installed by name: their exact-version dependencies
# (nvidia-driver -> nvidia-driver-cuda (= v) -> libnvidia-ml1 (= v) ...) must move together, up or down.
DRIVER_PACKAGES = (
    r"/^(nvidia-(driver|kernel|smi|persistenced|fabricmanager|modprobe|settings|xconfig|opencl)"
    r"|libnvidia-(ml|cfg|gl|compute|encode|decode|fbc|nscq|ptxjitcompiler|nvvm)|libcuda|libnvidia-egl)/"
)


def driver_preferences(package_version: str) -> str:
    """An apt pin (priority > 1000 allows downgrades) holding all driver packages at one version."""
    return (
        "# Written by gpuready: the NVIDIA driver packages stay at the inventory's version.\n"
        f"Package: {DRIVER_PACKAGES}\nPin: version {package_version}\nPin-Priority: 1001\n"
    )


@deploy("NVIDIA driver")
def nvidia_driver(reboot_follows: bool = False) -> None:
    """``reboot_follows``: the caller reboots the node next (the rolling upgrade), so its services wait for the boot."""
    node = current_node()
    pins = node.apt_packages["driver"]
    if node.versions.driver_source == "cuda-repo":
        repository(
            repo="cuda",
            url_template=node.repos["cuda_repo_url"],
            keyring_url_template=node.repos["cuda_repo_keyring_url"],
            pins=pins,
        )
    installed = host.get_fact(DebPackages).get("nvidia-driver") or []
    # A driver that changes under a loaded kernel module gives "Driver/library version mismatch" until the node
    # reboots: its services cannot start before that, and the node must not be used.
    changing = bool(installed) and node.versions.driver_package not in installed
    if changing and not reboot_follows:
        logger.warning(
            f"{host.name}: NVIDIA driver {', '.join(installed)} -> {node.versions.driver_package}: "
            "reboot the node (drained) to load it; deploys/upgrade_driver.py does that for a fleet"
        )
    files.put(
        name="Pin the NVIDIA driver version",
        src=StringIO(driver_preferences(node.versions.driver_package)),
        dest="/etc/apt/preferences.d/gpuready-nvidia-driver",
        mode="644",
    )
    install_pinned(f"NVIDIA driver {node.versions.driver}", pins, "Hold the NVIDIA driver packages")
    # after a change the services start with the new module, at boot
    running = None if changing or reboot_follows else True
    systemd.service(
        name="Enable nvidia-persistenced", service="nvidia-persistenced", running=running, enabled=True
    )
    if node.nvswitch:
        systemd.service(
            name="Enable NVIDIA Fabric Manager", service="nvidia-fabricmanager", running=running, enabled=True
        )
