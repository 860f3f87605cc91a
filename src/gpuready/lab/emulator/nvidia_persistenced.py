"""Emulated `nvidia-persistenced`: the daemon that keeps GPUs initialised; nvidia-smi shows Persistence-M On.

Stdlib only (installed into lab hosts). Forks like the real daemon (its unit is Type=forking with a pid
file); emulated nvidia-smi reports persistence mode Enabled while this pid is alive. It fails to start the
way the real one does when NVML cannot initialise (no driver, library/module version mismatch).
"""

from __future__ import annotations

import contextlib
import os
import sys
import syslog

import nvemu

PID_FILE = os.environ.get("GPUREADY_LAB_PERSISTENCED_PID", "/run/nvidia-persistenced/nvidia-persistenced.pid")
USAGE = "nvidia-persistenced: invalid option"


def main(argv: list[str]) -> int:
    if "--version" in argv or "-v" in argv:
        version = nvemu.library_version()
        print(f"nvidia-persistenced:  version {version}\n")
        return 0
    known = {
        "--verbose",
        "-V",
        "--no-persistence-mode",
        "--persistence-mode",
        "--no-unbind",
        "--foreground",
        "-f",
    }
    i = 0
    while i < len(argv):
        if argv[i] in ("--user", "-u", "--group", "-g"):
            i += 2
            continue
        if argv[i] not in known:
            print(f"{USAGE} -- '{argv[i]}'", file=sys.stderr)
            return 1
        i += 1
    drv = nvemu.start_daemon(
        "nvidia-persistenced", "nvidia-persistenced failed to initialize. Check syslog for more details."
    )
    if drv is None:
        return 1
    if "--foreground" not in argv and "-f" not in argv:
        nvemu.daemonize(PID_FILE)
    else:
        os.makedirs(os.path.dirname(PID_FILE), exist_ok=True)
        with open(PID_FILE, "w", encoding="ascii") as f:
            f.write(f"{os.getpid()}\n")
    syslog.syslog(syslog.LOG_NOTICE, f"Started ({os.getpid()})")
    for gpu in drv.visible_gpus():
        syslog.syslog(syslog.LOG_NOTICE, f"device {gpu['pci_bus_id'][4:]} - registered")
    nvemu.wait_forever()
    syslog.syslog(syslog.LOG_NOTICE, f"Shutdown ({os.getpid()})")
    with contextlib.suppress(OSError):
        os.unlink(PID_FILE)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
