"""The running deploy's view of the fleet spec: the current pyinfra host's :class:`NodeSpec`.

The whole inventory is validated once per run (not once per host: 1000 hosts must not mean 1000 validations), and
the result is cached on the inventory object pyinfra already holds.
"""

from __future__ import annotations

from typing import Any

from pyinfra import host, state
from pyinfra.facts.server import Arch, LinuxDistribution

from gpuready.spec import Fleet, NodeSpec, fleet_from_inventory

_CACHE_ATTR = "_gpuready_fleet"


def fleet_for(inventory: Any) -> Fleet:
    fleet = getattr(inventory, _CACHE_ATTR, None)
    if fleet is None:
        fleet = fleet_from_inventory(inventory, str(getattr(state, "inventory_path", None) or "inventory"))
        setattr(inventory, _CACHE_ATTR, fleet)
    return fleet


def current_node() -> NodeSpec:
    return fleet_for(host.inventory).nodes[host.name]


def repo_vars() -> dict[str, str]:
    """What the repository URL templates in group data are filled with, from the host's facts."""
    distro = host.get_fact(LinuxDistribution)
    name = (distro.get("name") or "").lower()
    version = str(distro.get("release_meta", {}).get("VERSION_ID") or distro.get("major") or "")
    arch = host.get_fact(Arch)
    return {
        "distro": f"{name}{version.replace('.', '')}",
        "arch": {"aarch64": "sbsa"}.get(arch, arch),
        "deb_arch": {"x86_64": "amd64", "aarch64": "arm64"}.get(arch, arch),
        "minor": current_node().versions.kubernetes_minor,
    }
