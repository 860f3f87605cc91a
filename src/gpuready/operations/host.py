"""Host operations pyinfra has no single operation for."""

from __future__ import annotations

import time

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, OperationError, StringCommand, operation
from pyinfra.connectors.util import clear_askpass_cache

from gpuready.facts.host import BootId, KernelFeature, Swap

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


@operation(is_idempotent=False)
def rebooted(reboot_timeout: int = 600, interval: float = 2.0):
    """
    Reboot the host and wait until it is back in a new boot.

    Unlike ``server.reboot``, the new boot is recognised by the kernel's boot id, not by uptime, which containers
    and some VMs share with their host (so the wait would never end there).

    + reboot_timeout: seconds to wait for the host to answer in a new boot
    + interval: seconds between reconnection attempts

    **Example:**

    .. code:: python

        host.rebooted(name="Reboot to load the new driver", reboot_timeout=600)
    """
    before: list[str] = []

    def note_boot(state, host) -> None:
        before.append(host.get_fact(BootId))

    yield FunctionCommand(note_boot, (), {})
    # Detached, so the SSH channel closes before the connection drops (pyinfra's server.reboot does the same).
    yield StringCommand("( sleep 1 && systemctl reboot ) </dev/null >/dev/null 2>&1 &")

    def wait_for_new_boot(state, host) -> None:
        clear_askpass_cache(host)
        host.disconnect()
        deadline = time.monotonic() + reboot_timeout
        while time.monotonic() < deadline:
            time.sleep(interval)
            host.connect(show_errors=False)
            if host.connected:
                current = host.get_fact(BootId)
                if current and current != before[0]:
                    logger.info(f"{host.print_prefix}back in a new boot ({current})")
                    return
                host.disconnect()  # still the old boot: shutting down
        raise OperationError(f"{host.name} did not come back in a new boot within {reboot_timeout}s")

    yield FunctionCommand(wait_for_new_boot, (), {})
