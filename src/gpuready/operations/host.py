"""Host operations pyinfra has no single operation for."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation

from gpuready.facts.host import Swap

_FSTAB_SWAP = r"^([^#].*[[:space:]]swap[[:space:]].*)$"


@operation()
def swap_off():
    """
    Turn swap off now and comment out swap entries in /etc/fstab so it stays off after a reboot.

    **Example:**

    .. code:: python

        host.swap_off(name="Turn swap off")
    """
    swap = host.get_fact(Swap)
    if not swap["active"] and not swap["fstab"]:
        host.noop("swap is off")
        return
    if swap["active"]:
        yield "swapoff -a"
    if swap["fstab"]:
        yield f"sed -i -E 's@{_FSTAB_SWAP}@# \\1  # swap disabled by gpuready@' /etc/fstab"
