"""Holding pinned packages, so unattended upgrades cannot move the driver, toolkit or kubelet behind the spec."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand, operation

from gpuready.facts.apt import HeldPackages


def package_names(pins: list[str]) -> list[str]:
    """``name=version`` pins to bare names, as apt-mark wants them."""
    return [pin.split("=", 1)[0] for pin in pins]


@operation()
def held(packages: list[str], held: bool = True):
    """
    Hold (or unhold) packages with apt-mark.

    + packages: package names, or ``name=version`` pins (the version is ignored)
    + held: whether the packages should be held

    **Example:**

    .. code:: python

        apt.held(name="Hold the NVIDIA driver", packages=["nvidia-driver=580.95.05-1"])
    """
    names = package_names(packages)
    current = host.get_fact(HeldPackages)
    todo = [name for name in names if (name in current) != held]
    if not todo:
        host.noop(f"{', '.join(names)} {'already' if held else 'not'} held")
        return
    yield StringCommand("apt-mark", "hold" if held else "unhold", *todo)
