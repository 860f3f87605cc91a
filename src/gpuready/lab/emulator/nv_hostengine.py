"""Emulated ``nv-hostengine``: DCGM's host engine, the daemon ``dcgmi`` connects to (``nvidia-dcgm.service``).

Stdlib only (installed into lab hosts by the emulated ``datacenter-gpu-manager-4-core``). It starts the way the
real one does only where NVML initialises (a loaded driver of the library's version: after a driver change it
fails until the reboot), writes its pid file, and then waits; it serves nothing: the emulated ``dcgmi`` computes
its answers from the machine itself. ``-n`` keeps it in the foreground (the unit's way), otherwise it forks;
``-t`` stops a running one; ``--version`` prints DCGM's version. Other options of the real daemon (``-p``,
``--service-account``, ``-f``...) are accepted with their argument and ignored.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import syslog

import nvemu

DCGM_VERSION = "4.5.2"  # the emulated dcgmi's
PID_FILE = os.environ.get("GPUREADY_LAB_HOSTENGINE_PID", "/run/nvidia-hostengine.pid")
WITH_ARGUMENT = {"-p", "--port", "-d", "--domain-socket", "-f", "--log-filename", "--log-level", "--pid",
                 "--service-account", "-b", "--bind-interface"}  # fmt: skip
FLAGS = {"-n", "--no-daemon", "-t", "--term", "-v", "--version", "--denylist-modules"}


def main(argv: list[str]) -> int:
    pid_file = PID_FILE
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--pid" and i + 1 < len(argv):
            pid_file = argv[i + 1]
        if arg in WITH_ARGUMENT:
            i += 2
            continue
        if arg not in FLAGS:
            print(f"nv-hostengine: unknown option {arg}", file=sys.stderr)
            return 1
        i += 1
    if "-v" in argv or "--version" in argv:
        print(f"version : {DCGM_VERSION}")
        return 0
    if "-t" in argv or "--term" in argv:
        try:
            with open(pid_file, encoding="ascii") as f:
                os.kill(int(f.read().strip()), signal.SIGTERM)
        except (OSError, ValueError):
            print("Unable to terminate host engine.", file=sys.stderr)
            return 1
        print("Host engine successfully terminated.")
        return 0
    drv = nvemu.start_daemon("nv-hostengine", "Error: DCGM initialization error")
    if drv is None:
        return 1
    if "-n" in argv or "--no-daemon" in argv:
        os.makedirs(os.path.dirname(pid_file) or "/", exist_ok=True)
        with open(pid_file, "w", encoding="ascii") as f:
            f.write(f"{os.getpid()}\n")
        print("Started host engine version", DCGM_VERSION, "using port number: 5555", flush=True)
    else:
        nvemu.daemonize(pid_file)
    syslog.syslog(syslog.LOG_NOTICE, f"Started host engine ({os.getpid()})")
    nvemu.wait_forever()
    with contextlib.suppress(OSError):
        os.unlink(pid_file)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
