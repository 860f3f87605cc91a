"""Package holds: a driver upgraded behind the node's back is the most common cause of a driver/library mismatch."""

from __future__ import annotations

from pyinfra.api import FactBase


class HeldPackages(FactBase[set[str]]):
    """
    Returns the packages ``apt-mark`` holds.

    .. code:: python

        {"nvidia-driver", "kubelet"}
    """

    default = set
    requires_command = "apt-mark"

    def command(self) -> str:
        return "apt-mark showhold"

    @staticmethod
    def process(output: list[str]) -> set[str]:
        return {line.strip() for line in output if line.strip()}
