"""Swap: kubelet refuses to run with swap on by default, and a reboot must not bring it back."""

from __future__ import annotations

from pyinfra.api import FactBase


class Swap(FactBase[dict[str, list[str]]]):
    """
    Returns active swap devices and the uncommented swap lines of /etc/fstab.

    .. code:: python

        {"active": ["/swapfile"], "fstab": ["/swapfile none swap sw 0 0"]}
    """

    @staticmethod
    def default() -> dict[str, list[str]]:
        return {"active": [], "fstab": []}

    def command(self) -> str:
        return (
            "tail -n +2 /proc/swaps 2>/dev/null | awk '{print \"active \" $1}'; "
            "grep -E '^[^#].*[[:space:]]swap[[:space:]]' /etc/fstab 2>/dev/null | sed 's/^/fstab /' || true"
        )

    @staticmethod
    def process(output: list[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {"active": [], "fstab": []}
        for line in output:
            kind, _, value = line.partition(" ")
            if kind in out and value:
                out[kind].append(value)
        return out


class KernelFeature(FactBase[bool]):
    """
    Returns whether a kernel feature a module provides is present, by a probe of what it provides.

    A module may be built into the kernel (no /proc/modules entry, no modprobe target) or loaded already: what the
    node needs is the feature (the overlay filesystem, bridge netfilter), so that is what is checked.

    .. code:: python

        True
    """

    def command(self, probe: str) -> str:
        return f"if {probe}; then echo present; else echo absent; fi"

    @staticmethod
    def process(output: list[str]) -> bool:
        return bool(output) and output[-1].strip() == "present"


class BootId(FactBase[str]):
    """
    Returns the kernel's boot id, which changes on every boot.

    Uptime cannot prove a reboot everywhere: containers and some VMs report the host's uptime; a new boot id
    (the same value kubelet reports as the Node's ``nodeInfo.bootID``) can.

    .. code:: python

        "5a8e2c1e-7f43-4c1f-9d5e-0b9c0d7e4a11"
    """

    def command(self) -> str:
        return "cat /proc/sys/kernel/random/boot_id"

    @staticmethod
    def process(output: list[str]) -> str:
        return output[0].strip() if output else ""
