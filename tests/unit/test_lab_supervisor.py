"""The lab host supervisor's restart rules, with small stand-in commands instead of systemd-nspawn."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuready.lab import supervisor
from gpuready.lab.supervisor import MARKER_PREFIX, REBOOT_STATUS, START_LIMIT_BURST, Supervisor

# Exits with the next status of a comma-separated list, one per run (the run count is kept in a file).
STATUS_SEQUENCE = """
import sys
from pathlib import Path
counter, statuses = Path(sys.argv[1]), [int(s) for s in sys.argv[2].split(",")]
runs = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(runs + 1))
sys.exit(statuses[min(runs, len(statuses) - 1)])
"""

# Says it is ready, waits for SIGTERM, records it and exits with the status given (an nspawn powering off).
WAITS_FOR_SIGTERM = """
import signal, sys, time
from pathlib import Path
record, status = Path(sys.argv[1]), int(sys.argv[2])
def stop(signum, frame):
    with record.open("a") as f:
        f.write("SIGTERM\\n")
    sys.exit(status)
signal.signal(signal.SIGTERM, stop)
with record.open("a") as f:
    f.write("ready\\n")
while True:
    time.sleep(60)
"""


def sequence_command(tmp_path: Path, statuses: list[int]) -> tuple[list[str], Path]:
    script = tmp_path / "sequence.py"
    script.write_text(STATUS_SEQUENCE)
    counter = tmp_path / "runs"
    return [sys.executable, str(script), str(counter), ",".join(map(str, statuses))], counter


def markers(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(MARKER_PREFIX)]


def test_two_reboots_then_a_poweroff(tmp_path):
    command, counter = sequence_command(tmp_path, [REBOOT_STATUS, REBOOT_STATUS, 0])
    log = io.StringIO()
    sup = Supervisor(command, name="gpu-node-9", log=log)
    assert sup.run() == 0
    assert counter.read_text() == "3"
    assert sup.boots == 3
    lines = markers(log.getvalue())
    assert len(lines) == 2
    assert lines[0].endswith("gpu-node-9: reboot (systemd-nspawn exited 133), starting boot 2")
    assert lines[1].endswith("gpu-node-9: reboot (systemd-nspawn exited 133), starting boot 3")


def test_a_crash_after_a_reboot_ends_with_its_status(tmp_path):
    command, counter = sequence_command(tmp_path, [REBOOT_STATUS, 7, 0])
    log = io.StringIO()
    assert Supervisor(command, log=log).run() == 7
    assert counter.read_text() == "2"
    assert len(markers(log.getvalue())) == 1


def test_a_first_boot_that_fails_is_not_restarted(tmp_path):
    command, counter = sequence_command(tmp_path, [1, 0])
    log = io.StringIO()
    assert Supervisor(command, log=log).run() == 1
    assert counter.read_text() == "1"
    assert markers(log.getvalue()) == []


def test_a_reboot_loop_is_given_up_after_the_start_limit(tmp_path):
    command, counter = sequence_command(tmp_path, [REBOOT_STATUS])
    log = io.StringIO()
    assert Supervisor(command, log=log).run() == REBOOT_STATUS
    assert counter.read_text() == str(START_LIMIT_BURST)
    lines = markers(log.getvalue())
    assert len(lines) == START_LIMIT_BURST
    assert "giving up" in lines[-1] and "giving up" not in "".join(lines[:-1])


def test_reboots_spread_out_in_time_are_all_restarted(tmp_path):
    """More reboots than the burst, but each 11 s after the last: the start limit (5 in 10 s) is never hit."""
    statuses = [REBOOT_STATUS] * (START_LIMIT_BURST + 2) + [0]
    command, counter = sequence_command(tmp_path, statuses)
    ticks = iter(range(0, 10_000, 11))
    sup = Supervisor(command, log=io.StringIO(), clock=lambda: float(next(ticks)))
    assert sup.run() == 0
    assert counter.read_text() == str(len(statuses))


def test_a_child_killed_by_a_signal_exits_like_a_shell_reports_it(tmp_path):
    assert Supervisor(["sh", "-c", "kill -9 $$"], log=io.StringIO()).run() == 128 + signal.SIGKILL
    assert supervisor.exit_status(-signal.SIGTERM) == 143
    assert supervisor.exit_status(133) == 133


def test_stop_before_the_first_boot_starts_nothing(tmp_path):
    command, counter = sequence_command(tmp_path, [0])
    sup = Supervisor(command, log=io.StringIO())
    sup.request_stop()
    assert sup.run() == 128 + signal.SIGTERM
    assert not counter.exists()


def _start_cli(tmp_path: Path, child_status: int) -> tuple[subprocess.Popen[str], Path]:
    script = tmp_path / "waits.py"
    script.write_text(WAITS_FOR_SIGTERM)
    record = tmp_path / "record"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuready.lab.supervisor", "--name=gpu-node-9", "--",
         sys.executable, str(script), str(record), str(child_status)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not (record.exists() and "ready" in record.read_text()):
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "the stand-in command never started"
        time.sleep(0.02)
    return proc, record


@pytest.mark.parametrize("child_status", [0, REBOOT_STATUS])
def test_sigterm_is_passed_on_and_nothing_restarts(tmp_path, child_status):
    """Whether nspawn powers off (0) or the container happened to reboot (133), a stopped host stays stopped."""
    proc, record = _start_cli(tmp_path, child_status)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=30)
    assert proc.returncode == child_status
    assert record.read_text() == "ready\nSIGTERM\n"  # one run, and it got the signal
    lines = markers(output)
    if child_status == REBOOT_STATUS:
        assert len(lines) == 1 and lines[0].endswith("rebooted while stopping (boot 1): not started again")
    else:
        assert lines == []


def test_cli_needs_a_command():
    result = subprocess.run(
        [sys.executable, "-m", "gpuready.lab.supervisor", "--name=x"], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "no command given" in result.stderr


def test_fresh_clocks_prefix_offsets_are_the_current_clocks():
    before = time.clock_gettime(time.CLOCK_BOOTTIME)
    prefix = supervisor.fresh_clocks_prefix()
    after = time.clock_gettime(time.CLOCK_BOOTTIME)
    assert prefix[:2] == ["unshare", "--time"] and prefix[-1] == "--"
    boottime = -int(prefix[2].removeprefix("--boottime="))
    assert int(before) <= boottime <= int(after)
    assert prefix[3].startswith("--monotonic=-")


@pytest.mark.skipif(os.geteuid() != 0, reason="a time namespace needs CAP_SYS_ADMIN (run as root)")
@pytest.mark.skipif(
    not supervisor.time_namespaces_supported(), reason="no unshare or no time namespaces here"
)
def test_fresh_clocks_make_uptime_start_at_zero(tmp_path):
    machine_uptime = float(Path("/proc/uptime").read_text().split()[0])
    if machine_uptime < 120:
        pytest.skip("this machine booted less than 2 minutes ago: a fresh uptime would look like its own")
    out = tmp_path / "uptime"
    sup = Supervisor(["sh", "-c", f"cat /proc/uptime > {out}"], fresh_clocks=True, log=io.StringIO())
    assert sup.run() == 0
    assert float(out.read_text().split()[0]) < 60
