"""Keep a lab host running across reboots, as systemd-nspawn@.service does on a real machine.

systemd-nspawn exits with status 133 when the container's systemd reboots; a host under systemd is started again
because systemd-nspawn@.service says ``RestartForceExitStatus=133``. The lab starts nspawn itself (no machined, PID 1
of this machine need not be systemd), so this process plays that unit's part for one host:

- it runs the nspawn command and starts it again when it exits 133; any other status ends it with that status
  (poweroff is 0, a crash is non-zero), so `lab up` still sees a host that fails to boot as an early exit;
- SIGTERM (and SIGINT, SIGHUP) is passed on to nspawn, which turns it into an orderly poweroff of the container,
  and then nothing is restarted: `lab down` stops a host by signalling this process;
- a host that reboots more than START_LIMIT_BURST times within START_LIMIT_INTERVAL_S is given up on (systemd's
  default start limit), so a boot loop ends instead of spinning;
- with --fresh-clocks every boot runs in a new time namespace whose CLOCK_BOOTTIME and CLOCK_MONOTONIC start near
  zero. Containers otherwise share the machine's clocks, so /proc/uptime would keep growing across a "reboot";
  tools that confirm a reboot by a smaller uptime (pyinfra's ``server.reboot``) would wait forever.

It writes one marker line per reboot to its standard output, which `lab up` points at the host's console log, so the
log reads as one console across boots. It keeps no state of its own: if it is killed (SIGKILL), nspawn runs on
unsupervised in the host's cgroup, where `lab down` still finds and kills it.

With --kernel-files it also keeps the host's /dev/nvidia*, /proc/driver/nvidia and PCI sysfs view in step with its
emulated machine, from a thread (gpuready.lab.kernel_files.watch): it is the one machine-side process that lives as
long as the host and sees every boot. Only that option imports anything outside the standard library.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import IO

REBOOT_STATUS = 133  # systemd-nspawn's exit status when the container asked for a reboot
START_LIMIT_BURST = 5
START_LIMIT_INTERVAL_S = 10.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
MARKER_PREFIX = "-- gpuready-lab supervisor:"


def time_namespaces_supported() -> bool:
    """Whether --fresh-clocks can work here: util-linux `unshare` and a kernel with time namespaces (5.6+)."""
    return shutil.which("unshare") is not None and os.path.exists("/proc/self/timens_offsets")


def fresh_clocks_prefix() -> list[str]:
    """An `unshare` prefix whose command sees CLOCK_BOOTTIME/MONOTONIC (and so /proc/uptime) start at ~0 now.

    Offsets are whole seconds below the current values, so the clocks inside start between 0 and 1 and never go
    negative (the kernel refuses offsets that would make them so).
    """
    boottime = math.floor(time.clock_gettime(time.CLOCK_BOOTTIME))
    monotonic = math.floor(time.clock_gettime(time.CLOCK_MONOTONIC))
    return ["unshare", "--time", f"--boottime=-{boottime}", f"--monotonic=-{monotonic}", "--"]


def exit_status(returncode: int) -> int:
    """A child's status as a shell reports it: a death by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


class Supervisor:
    """Runs one command until it exits with something other than REBOOT_STATUS, or until told to stop."""

    def __init__(
        self,
        command: Sequence[str],
        name: str = "host",
        fresh_clocks: bool = False,
        log: IO[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        kernel_files: tuple[Path, Path] | None = None,
    ) -> None:
        self.command = list(command)
        self.kernel_files = kernel_files  # (the host's machine dir, its root filesystem)
        self.name = name
        self.fresh_clocks = fresh_clocks
        self.log = log if log is not None else sys.stdout
        self.clock = clock
        self.stopping = False
        self.boots = 0
        self._child: subprocess.Popen[bytes] | None = None
        self._starts: collections.deque[float] = collections.deque(maxlen=START_LIMIT_BURST)

    def request_stop(self, signum: int = signal.SIGTERM, _frame: FrameType | None = None) -> None:
        """Signal handler: stop after this boot; nspawn gets SIGTERM, its cue for an orderly poweroff."""
        self.stopping = True
        child = self._child
        if child is not None and child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGTERM)

    def install_signal_handlers(self) -> None:
        for signum in STOP_SIGNALS:
            signal.signal(signum, self.request_stop)

    def _marker(self, text: str) -> None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.log.write(f"\n{MARKER_PREFIX} {stamp} {self.name}: {text}\n")
        self.log.flush()

    def _start(self) -> subprocess.Popen[bytes]:
        argv = (fresh_clocks_prefix() if self.fresh_clocks else []) + self.command
        self.boots += 1
        self._starts.append(self.clock())
        # stdout/stderr are inherited: nspawn writes the console to the same (append-mode) log as the markers.
        self.log.flush()
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL)

    def _start_limit_hit(self) -> bool:
        return (
            len(self._starts) == START_LIMIT_BURST and self.clock() - self._starts[0] < START_LIMIT_INTERVAL_S
        )

    def _watch_kernel_files(self) -> threading.Event | None:
        if self.kernel_files is None:
            return None
        from gpuready.lab import kernel_files

        stop = threading.Event()
        machine_dir, root = self.kernel_files

        def nspawn_pid() -> int | None:
            child = self._child
            return child.pid if child is not None and child.returncode is None else None

        def log(text: str) -> None:
            self._marker(text)

        threading.Thread(
            target=kernel_files.watch, args=(machine_dir, root, nspawn_pid, stop, log), daemon=True
        ).start()
        return stop

    def run(self) -> int:
        """Boot, and boot again after each reboot; returns the status this process should exit with."""
        stop = self._watch_kernel_files()
        try:
            return self._run()
        finally:
            if stop is not None:
                stop.set()

    def _run(self) -> int:
        while True:
            if self.stopping:  # told to stop before the first boot: never start it
                return exit_status(-signal.SIGTERM)
            self._child = child = self._start()
            if self.stopping:  # a stop signal came while the child was being started: it may have missed it
                self.request_stop()
            returncode = child.wait()
            self._child = None
            if returncode != REBOOT_STATUS:
                return exit_status(returncode)
            if self.stopping:
                self._marker(f"rebooted while stopping (boot {self.boots}): not started again")
                return exit_status(returncode)
            if self._start_limit_hit():
                self._marker(
                    f"rebooted {START_LIMIT_BURST} times within {START_LIMIT_INTERVAL_S:.0f}s: giving up "
                    f"(status {REBOOT_STATUS})"
                )
                return exit_status(returncode)
            self._marker(f"reboot (systemd-nspawn exited {REBOOT_STATUS}), starting boot {self.boots + 1}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpuready.lab.supervisor",
        description="Run a systemd-nspawn command and start it again whenever the container reboots (status 133).",
    )
    parser.add_argument("--name", default="host", help="the host's name, for the console markers")
    parser.add_argument(
        "--fresh-clocks",
        action="store_true",
        help="run each boot in a new time namespace (uptime starts at 0 on every boot)",
    )
    parser.add_argument(
        "--kernel-files",
        nargs=2,
        metavar=("MACHINE_DIR", "ROOT"),
        help="keep the host's NVIDIA device nodes and kernel files in step with its machine (kernel_files.watch)",
    )
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, help="-- the command to run, e.g. systemd-nspawn ..."
    )
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (put it after --)")
    kernel_files = (Path(args.kernel_files[0]), Path(args.kernel_files[1])) if args.kernel_files else None
    supervisor = Supervisor(
        command, name=args.name, fresh_clocks=args.fresh_clocks, kernel_files=kernel_files
    )
    supervisor.install_signal_handlers()
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
