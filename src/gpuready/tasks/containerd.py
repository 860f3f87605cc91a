"""containerd with the ``nvidia`` runtime handler, restarted only when its config files changed."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import apt, systemd

from gpuready.deploy_context import current_node
from gpuready.operations import containerd as containerd_ops


@deploy("containerd with the nvidia runtime")
def containerd() -> None:
    node = current_node()
    apt.packages(name="Install containerd", packages=node.apt_packages["containerd"], no_recommends=True)
    config = containerd_ops.nvidia_runtime(
        name="Add the nvidia runtime to containerd (drop-in)",
        set_as_default=bool(node.data.get("containerd_nvidia_default_runtime", False)),
        enable_cdi=bool(node.data.get("containerd_enable_cdi", False)),
    )
    systemd.service(name="Enable containerd", service="containerd", running=True, enabled=True)
    systemd.service(
        name="Restart containerd for the new config",
        service="containerd",
        restarted=True,
        _if=config.did_change,
    )
