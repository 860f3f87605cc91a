"""Host state the node deploy decides on: swap, kernel features, boot id, managed files, systemd units."""

from __future__ import annotations

from pyinfra.api import FactBase

MISSING = "__gpuready_missing__"


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


class BootTime(FactBase[int | None]):
    """
    Returns when the running OS started, in seconds since the epoch by the host's own clock: its PID 1's start.

    The same clock stamps the kubelet's container ``startedAt``, so a container that started before this moment
    ran in an earlier boot (its status is stale until the kubelet reports again). PID 1 rather than the kernel's
    boot time: in a container host (the lab's, kind's) PID 1 starts with the OS, the kernel long before.
    ``None`` when /proc does not answer.

    .. code:: python

        1795984327
    """

    def command(self) -> str:
        # /proc/1/stat field 22: PID 1's start in clock ticks after the kernel's boot (btime in /proc/stat)
        return (
            "echo $(( $(awk '/^btime /{print $2}' /proc/stat) "
            "+ $(cut -d' ' -f22 /proc/1/stat) / $(getconf CLK_TCK) ))"
        )

    @staticmethod
    def process(output: list[str]) -> int | None:
        text = output[0].strip() if output else ""
        return int(text) if text.isdigit() else None


class FileText(FactBase[str | None]):
    """
    Returns the text of a file, or ``None`` if it does not exist.

    .. code:: python

        'deb [signed-by=/etc/apt/keyrings/cuda.gpg] https://developer.download.nvidia.com/... /\\n'
    """

    def command(self, path: str) -> str:
        return f"test -f {path} && cat {path} || echo {MISSING}"

    @staticmethod
    def process(output: list[str]) -> str | None:
        if output and output[0] == MISSING:
            return None
        return "".join(line + "\n" for line in output)


class FileDigest(FactBase[dict[str, str] | None]):
    """
    Returns a file's SHA-1, mode and owner, or ``None`` if it does not exist: what decides whether to upload it.

    .. code:: python

        {"sha1": "0beec7b5ea3f0fdbc95d0dd47f3c5bc275da8a33", "mode": "644", "user": "root", "group": "root"}
    """

    def command(self, path: str) -> str:
        return f"test -f {path} && sha1sum {path} && stat -c '%a %U %G' {path} || true"

    @staticmethod
    def process(output: list[str]) -> dict[str, str] | None:
        if len(output) < 2:
            return None
        mode, user, group = output[1].split()
        return {"sha1": output[0].split()[0], "mode": mode, "user": user, "group": group}


class UnitState(FactBase[dict[str, str]]):
    """
    Returns a systemd unit's active and unit-file state (``inactive``/``not-found`` when it does not exist).

    .. code:: python

        {"active": "active", "enabled": "enabled"}
    """

    def requires_command(self, *args: object, **kwargs: object) -> str:
        return "systemctl"

    @staticmethod
    def default() -> dict[str, str]:
        return {"active": "inactive", "enabled": "not-found"}

    def command(self, unit: str) -> str:
        return f"systemctl show --property ActiveState --property UnitFileState {unit}"

    @staticmethod
    def process(output: list[str]) -> dict[str, str]:
        values = dict(line.partition("=")[::2] for line in output if "=" in line)
        return {
            "active": values.get("ActiveState") or "inactive",
            "enabled": values.get("UnitFileState") or "not-found",
        }
