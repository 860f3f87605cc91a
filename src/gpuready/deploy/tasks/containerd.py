"""containerd with the ``nvidia`` runtime handler, restarted only when its config files changed."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.facts.deb import DebPackages
from pyinfra.operations import systemd

from gpuready.deploy.context import current_node
from gpuready.deploy.facts.containerd import ContainerdConfigText
from gpuready.deploy.facts.host import UnitState
from gpuready.deploy.node_facts import FactSpec, reads
from gpuready.deploy.operations import apt as gpu_apt
from gpuready.deploy.operations import containerd as containerd_ops
from gpuready.deploy.operations import host as host_ops
from gpuready.nvidia.containerd_config import DEFAULT_DROP_IN_DIR, DEFAULT_DROP_IN_NAME
from gpuready.spec import knobs

UNIT = "containerd"
CONFIG = "/etc/containerd/config.toml"


def config_paths() -> tuple[str, str]:
    """The files the runtime step reads: the main config and the nvidia drop-in."""
    return CONFIG, f"{DEFAULT_DROP_IN_DIR}/{DEFAULT_DROP_IN_NAME}"


@reads
def facts_read() -> list[FactSpec]:
    """The facts containerd_runtime reads: the packages, the unit and both config files."""
    return [
        (DebPackages, {}),
        (UnitState, {"unit": UNIT}),
        *[(ContainerdConfigText, {"path": path}) for path in config_paths()],
    ]


@deploy("containerd with the nvidia runtime", data_defaults=knobs.defaults("deploy"))
def containerd_runtime() -> None:
    node = current_node()
    gpu_apt.installed(name="Install containerd", packages=node.apt_packages["containerd"], no_recommends=True)
    config = containerd_ops.nvidia_runtime(
        name="Add the nvidia runtime to containerd (drop-in)",
        config_path=CONFIG,
        set_as_default=node.knobs["containerd_nvidia_default_runtime"],
        enable_cdi=node.cdi,
        containerd_package=node.versions.containerd_package,
    )
    host_ops.service(name="Enable containerd", unit=UNIT, running=True, enabled=True)
    systemd.service(
        name="Restart containerd for the new config",
        service=UNIT,
        restarted=True,
        _if=config.did_change,
    )
