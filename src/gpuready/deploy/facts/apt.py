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

    def requires_command(self, *args: object, **kwargs: object) -> str:
        return "dpkg-query"

    def command(self) -> str:
        # apt-mark keeps holds as dpkg selections; reading them from dpkg does not load apt's cache
        return "dpkg-query -W -f='${Package} ${Status}\\n' | awk '$2 == \"hold\" {print $1}'"

    @staticmethod
    def process(output: list[str]) -> set[str]:
        return {line.strip().split(":")[0] for line in output if line.strip()}


class AptCandidate(FactBase[str | None]):
    """
    Returns the version apt would install of a package from the node's current lists, or None where no
    repository has it (``apt-cache policy``'s ``Candidate: (none)``, or no such package at all).

    .. code:: python

        "0.9+ds-2"
    """

    def requires_command(self, *args: object, **kwargs: object) -> str:
        return "apt-cache"

    def command(self, package: str) -> str:
        return f"apt-cache policy {package} | sed -n 's/^ *Candidate: *//p'"

    @staticmethod
    def process(output: list[str]) -> str | None:
        text = " ".join(output).strip()
        return None if not text or text == "(none)" else text
