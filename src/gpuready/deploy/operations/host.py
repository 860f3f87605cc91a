"""Host operations pyinfra has no single operation for."""

from __future__ import annotations

import hashlib
import time
from io import StringIO

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, OperationError, StringCommand, operation
from pyinfra.connectors.util import clear_askpass_cache
from pyinfra.facts.server import Sysctl
from pyinfra.operations import files, server, systemd

from gpuready.deploy.facts.host import BootId, FileDigest, FileText, KernelFeature, Swap, UnitState
from gpuready.deploy.node_facts import node_fact

_FSTAB_SWAP = r"^([^#].*[[:space:]]swap[[:space:]].*)$"


@operation()
def swap_off():
    """
    Turn swap off now and comment out swap entries in /etc/fstab so it stays off after a reboot.

    **Example:**

    .. code:: python

        host.swap_off(name="Turn swap off")
    """
    swap = node_fact(Swap)
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
    if node_fact(KernelFeature, probe=probe):
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


@operation()
def file_content(path: str, content: str, mode: str = "644"):
    """
    A file with exactly ``content``, owned by root with ``mode``; uploaded only when its SHA-1 or mode differs.

    pyinfra's ``files.put`` reads three facts per file; this reads one, which the node deploy batches.

    + path: the file
    + content: its text
    + mode: octal permissions as ``stat -c %a`` prints them

    **Example:**

    .. code:: python

        host.file_content(name="Blacklist nouveau", path="/etc/modprobe.d/blacklist-nouveau.conf", content="...")
    """
    digest = node_fact(FileDigest, path=path)
    wanted = hashlib.sha1(content.encode()).hexdigest()
    if digest and (digest["sha1"], digest["mode"], digest["user"], digest["group"]) == (
        wanted,
        mode,
        "root",
        "root",
    ):
        host.noop(f"{path} is up to date")
        return
    yield from files.put._inner(src=StringIO(content), dest=path, mode=mode, user="root", group="root")


@operation()
def sysctls(values: dict[str, int], persist_file: str):
    """
    Kernel parameters set now and in ``persist_file`` for every boot.

    + values: parameter -> value
    + persist_file: a sysctl.d file holding ``key = value`` lines

    **Example:**

    .. code:: python

        host.sysctls(name="Kubernetes sysctls", values={"net.ipv4.ip_forward": 1},
                     persist_file="/etc/sysctl.d/99-kubernetes.conf")
    """
    running = node_fact(Sysctl, keys=sorted(values))
    persisted = (node_fact(FileText, path=persist_file) or "").splitlines()
    todo = [
        key
        for key, value in values.items()
        if running.get(key) != value or f"{key} = {value}" not in persisted
    ]
    if not todo:
        host.noop(f"{', '.join(values)} set and persisted")
        return
    for key in todo:
        yield from server.sysctl._inner(key=key, value=values[key], persist=True, persist_file=persist_file)


@operation()
def service(unit: str, running: bool | None = None, enabled: bool | None = None):
    """
    A systemd unit running (or not) and enabled (or not); ``None`` leaves that side alone.

    + unit: the unit name without ``.service``
    + running, enabled: the wanted states

    **Example:**

    .. code:: python

        host.service(name="Enable containerd", unit="containerd", running=True, enabled=True)
    """
    state = node_fact(UnitState, unit=unit)
    is_running = state["active"] == "active"
    is_enabled = state["enabled"] in ("enabled", "enabled-runtime", "static", "alias")
    if (running is None or running == is_running) and (enabled is None or enabled == is_enabled):
        host.noop(f"{unit}: {state['active']}, {state['enabled']}")
        return
    yield from systemd.service._inner(service=unit, running=running, enabled=enabled)
