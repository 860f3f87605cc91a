"""Swap: kubelet refuses to run with swap on by default, and a reboot must not bring it back."""

from __future__ import annotations

from pyinfra.api import FactBase


class Swap(FactBase[dict[str, list[str]]]):
    """
    Returns active swap devices and the uncommented swap lines of /etc/fstab.

    .. code:: python

        {"active": ["/swapfile"], "fstab": ["/swapfile none swap sw 0 0"]}
    """

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
