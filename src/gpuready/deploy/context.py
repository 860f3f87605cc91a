"""The running deploy's view of the fleet spec: the current pyinfra host's :class:`NodeSpec`.

The whole inventory is validated once per run (not once per host: 1000 hosts must not mean 1000 validations), and
the result is cached on the inventory object pyinfra already holds.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyinfra import host
from pyinfra.facts.server import Arch, LinuxDistribution

from gpuready.spec import Fleet, NodeSpec, SpecError, fleet_from_inventory

_CACHE_ATTR = "_gpuready_fleet"


def inventory_path() -> str:
    """The inventory file named on pyinfra's command line (its first ``.py`` argument), for error messages."""
    for arg in sys.argv[1:]:
        if arg.endswith(".py") and Path(arg).is_file():
            return arg
    return "inventory"


def fleet_for(inventory: Any) -> Fleet:
    """The validated fleet of a loaded inventory; a SpecError is cached too, so it is reported once."""
    cached = getattr(inventory, _CACHE_ATTR, None)
    if cached is None:
        try:
            cached = fleet_from_inventory(inventory, inventory_path())
        except SpecError as exc:
            cached = exc
        setattr(inventory, _CACHE_ATTR, cached)
    if isinstance(cached, SpecError):
        raise cached
    return cached


def current_node() -> NodeSpec:
    return fleet_for(host.inventory).nodes[host.name]


# NVIDIA's newest Debian repository path (compute/cuda/repos/<path>/; debian12 and debian13 exist).
NEWEST_DEBIAN_REPO = "debian13"


def distro_path(distro: Mapping[str, Any]) -> str:
    """The repository path part `{distro}` from pyinfra's LinuxDistribution fact: "debian12", "ubuntu2204", ...

    Debian testing and unstable (sid) carry no VERSION_ID in os-release (only VERSION_CODENAME, e.g. forky), so
    pyinfra finds no major version either, and NVIDIA publishes no repository for them. Such a host gets the newest
    Debian one (NEWEST_DEBIAN_REPO): testing and sid grew from that release and their libraries are at least as
    new as its, so its packages are the ones that install; an older path would be further off, and "debian" alone
    names no repository at all.
    """
    name = (distro.get("name") or "").lower()
    version = str(distro.get("release_meta", {}).get("VERSION_ID") or distro.get("major") or "")
    if name == "debian" and not version:
        return NEWEST_DEBIAN_REPO
    return f"{name}{version.replace('.', '')}"


def repo_vars() -> dict[str, str]:
    """What the repository URL templates in group data are filled with, from the host's facts."""
    from gpuready.deploy.node_facts import node_fact

    distro = node_fact(LinuxDistribution)
    arch = node_fact(Arch)
    return {
        "distro": distro_path(distro),
        "arch": {"aarch64": "sbsa"}.get(arch, arch),
        "deb_arch": {"x86_64": "amd64", "aarch64": "arm64"}.get(arch, arch),
        "minor": current_node().versions.kubernetes_minor,
    }
