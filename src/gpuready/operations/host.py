"""Host operations pyinfra has no single operation for."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation

from gpuready.facts.host import KernelFeature, Swap

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


@operation()
def kernel_module(module: str, probe: str):
    """
    Load a kernel module unless the feature it provides is already there (loaded or built in).

    + module: the module to modprobe
    + probe: a shell test that succeeds when the feature is present, e.g. ``grep -qw overlay /proc/filesystems``

    **Example:**

    .. code:: python

        host.kernel_module(name="Bridge netfilter", module="br_netfilter", probe="test -d /proc/sys/net/bridge")
    """
    if host.get_fact(KernelFeature, probe=probe):
        host.noop(f"{module}: present ({probe})")
        return
    yield f"modprobe {module}"
