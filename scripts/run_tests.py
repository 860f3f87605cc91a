"""`make test`'s test run: the lab tests and the rest of the suite as two pytest runs side by side.

Why: on a 2-core machine the lab tests (marked `lab`) are most of the run (46 minutes, with the rest's 5 beside
them, in a warm CI on 2026-12-02) and leave CPU idle while hosts boot, apt installs and pods start. The rest
(unit, operation and cluster tests) needs no lab host: it brings up its own control plane on a subnet of its own (the lab's network
plan picks a free one), and what both build into the lab cache is built under a lock. Run one after the other the
two add up; side by side the rest is done while the lab runs.

The lab run streams to the terminal. The other run writes to reports/tests-rest.log, says when it is done, and its
log is printed whole after the lab run ends, so neither run's output is cut into the other's. Every argument is
passed to both runs (`python scripts/run_tests.py -x -k deploy`). Ctrl-C reaches both (one process group); a
SIGTERM to this script is passed on to both as SIGINT, so each tears its labs and cluster down as on Ctrl-C. The
exit status is the lab run's when it failed, else the other's. One pytest over everything still works
(`.venv/bin/pytest`), one after the other.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import IO

LAB = "lab"
REST = "not lab"
REST_LOG = Path("reports/tests-rest.log")


def pytest_run(marker: str, args: list[str], output: IO[bytes] | None = None) -> subprocess.Popen[bytes]:
    """pytest on the tests `marker` selects; its output to `output` (the terminal when None)."""
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-m", marker, *args], stdout=output, stderr=subprocess.STDOUT
    )


def main(args: list[str]) -> int:
    # started as `make test &` from a script, SIGINT comes ignored and would stay ignored in both runs: the SIGTERM
    # passed on as SIGINT would then stop neither (tests/interrupts.py says more)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    REST_LOG.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with REST_LOG.open("wb") as log:
        rest = pytest_run(REST, args, log)
        print(
            f"[run_tests] the tests not marked lab run beside the lab tests (pid {rest.pid}): {REST_LOG}",
            flush=True,
        )
        lab = pytest_run(LAB, args)
        children = (rest, lab)

        def stop(signum: int, frame: FrameType | None) -> None:
            for child in children:
                if child.poll() is None:
                    child.send_signal(signal.SIGINT)

        signal.signal(signal.SIGTERM, stop)

        def announce() -> None:
            code = rest.wait()
            print(
                f"\n[run_tests] the tests not marked lab ended (exit {code}) after {time.monotonic() - started:.0f} s; "
                "their output follows the lab run's",
                flush=True,
            )

        threading.Thread(target=announce, daemon=True).start()
        while True:
            try:
                lab_code = lab.wait()
                rest_code = rest.wait()
                break
            except KeyboardInterrupt:  # both children got the terminal's SIGINT too: wait for their teardowns
                continue
    print(f"\n[run_tests] output of the tests not marked lab ({REST_LOG}):", flush=True)
    sys.stdout.buffer.write(REST_LOG.read_bytes())
    print(
        f"[run_tests] lab tests: exit {lab_code}; the others: exit {rest_code}; "
        f"{time.monotonic() - started:.0f} s in all",
        flush=True,
    )
    # pytest's 5 (no test collected, e.g. `-k` matching only one side) is no failure of the other side
    codes = [c for c in (lab_code, rest_code) if c not in (0, 5)]
    if codes:
        return codes[0]
    return 5 if lab_code == rest_code == 5 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
