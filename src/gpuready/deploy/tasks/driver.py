"""The NVIDIA driver: pinned to the inventory's version and held, so it only moves when the inventory does."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.facts.deb import DebPackages

from gpuready.deploy.context import current_node
from gpuready.deploy.facts.host import FileDigest, UnitState
from gpuready.deploy.node_facts import FactSpec, node_fact, reads
from gpuready.deploy.operations import host as host_ops
from gpuready.deploy.tasks.repos import install_pinned, task_repository
from gpuready.nvidia.driver_packages import driver_package_names
from gpuready.spec import NodeSpec, knobs

PREFERENCES_FILE = "/etc/apt/preferences.d/gpuready-nvidia-driver"


def driver_preferences(package_version: str, branch: str, source: str = "cuda-repo") -> str:
    """An apt pin (priority > 1000 allows downgrades) holding every driver package, by name, at one version.

    Every package of the driver, not only the ones installed by name: their exact-version dependencies
    (nvidia-driver -> nvidia-driver-cuda (= v) -> libnvidia-ml1 (= v) ...) must move together, up or down.
    """
    names = driver_package_names(branch, source)
    lines = [names[0]]
    for name in names[1:]:
        if len(lines[-1]) + len(name) + 1 > 100:
            lines.append(name)
        else:
            lines[-1] += " " + name
    return (
        "# Written by gpuready: the NVIDIA driver packages stay at the inventory's version.\n"
        "Package: " + "\n ".join(lines) + f"\nPin: version {package_version}\nPin-Priority: 1001\n"
    )


def units(node: NodeSpec) -> tuple[str, ...]:
    """The driver's systemd units on this node."""
    return ("nvidia-persistenced", "nvidia-fabricmanager") if node.nvswitch else ("nvidia-persistenced",)


@reads
def facts_read() -> list[FactSpec]:
    """The facts nvidia_driver reads (the repository and pins: tasks.repos declares those)."""
    return [
        (DebPackages, {}),
        (FileDigest, {"path": PREFERENCES_FILE}),
        *[(UnitState, {"unit": unit}) for unit in units(current_node())],
    ]


@deploy("NVIDIA driver", data_defaults=knobs.defaults("deploy"))
def nvidia_driver(reboot_follows: bool = False) -> None:
    """``reboot_follows``: the caller reboots the node next (the rolling upgrade), so its services wait for the boot."""
    node = current_node()
    pins = node.apt_packages["driver"]
    task_repository("driver")
    installed = node_fact(DebPackages).get("nvidia-driver") or []
    # A driver that changes under a loaded kernel module gives "Driver/library version mismatch" until the node
    # reboots: its services cannot start before that, and the node must not be used.
    changing = bool(installed) and node.versions.driver_package not in installed
    if changing and not reboot_follows:
        logger.warning(
            f"{host.name}: NVIDIA driver {', '.join(installed)} -> {node.versions.driver_package}: "
            "reboot the node (drained) to load it; deploys/upgrade_driver.py does that for a fleet"
        )
    host_ops.file_content(
        name="Pin the NVIDIA driver version",
        path=PREFERENCES_FILE,
        content=driver_preferences(
            node.versions.driver_package, node.versions.driver_branch, node.versions.driver_source
        ),
    )
    install_pinned(f"NVIDIA driver {node.versions.driver}", pins)
    # after a change the services start with the new module, at boot
    running = None if changing or reboot_follows else True
    for unit in units(node):
        host_ops.service(name=f"Enable {unit}", unit=unit, running=running, enabled=True)
