"""scripts/run_tests.py (`make test`'s run): the lab tests and the others side by side, each in a pytest of its own,
every result reported and the exit status a failure of either, a stop request reaching both runs' teardowns.

Run on a small suite of its own in tmp_path (a `lab` test and another), not on this repository's."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "run_tests.py"

INI = """[pytest]
markers =
    lab: a lab test
"""


def suite(tmp_path: Path, lab_body: str, rest_body: str) -> Path:
    (tmp_path / "pytest.ini").write_text(INI)
    (tmp_path / "test_suite.py").write_text(
        "import pathlib, time\nimport pytest\n\n"
        "@pytest.mark.lab\n"
        f"def test_on_the_lab():\n    {lab_body}\n\n"
        f"def test_elsewhere():\n    {rest_body}\n"
    )
    return tmp_path


def run(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "-p", "no:cacheprovider", *args],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_both_runs_pass_and_each_reports_its_own_tests(tmp_path: Path) -> None:
    done = run(suite(tmp_path, "assert True", "assert True"))
    assert done.returncode == 0, done.stdout + done.stderr
    lab, rest = done.stdout.split("output of the tests not marked lab")
    assert "1 passed, 1 deselected" in lab  # the lab run: only the lab test
    assert "1 passed, 1 deselected" in rest  # the other run's log, printed after the lab run's output
    assert (tmp_path / "reports" / "tests-rest.log").read_text() in rest


def test_a_failure_in_the_run_beside_the_lab_fails_the_whole(tmp_path: Path) -> None:
    done = run(suite(tmp_path, "assert True", "assert 1 == 2, 'broken elsewhere'"))
    assert done.returncode == 1, done.stdout
    assert "broken elsewhere" in done.stdout
    assert "lab tests: exit 0; the others: exit 1" in done.stdout


def test_a_failure_in_the_lab_run_fails_the_whole(tmp_path: Path) -> None:
    done = run(suite(tmp_path, "assert 1 == 2, 'broken on the lab'", "assert True"))
    assert done.returncode == 1, done.stdout
    assert "lab tests: exit 1; the others: exit 0" in done.stdout


def test_arguments_reach_both_runs_and_a_side_with_nothing_selected_is_no_failure(tmp_path: Path) -> None:
    done = run(suite(tmp_path, "assert True", "assert 1 == 2"), "-k", "on_the_lab")
    assert done.returncode == 0, done.stdout  # the failing test is deselected by -k in the other run
    assert "lab tests: exit 0; the others: exit 5" in done.stdout


def test_sigterm_stops_both_runs_teardowns_also_with_sigint_ignored_at_start(tmp_path: Path) -> None:
    torn = tmp_path / "torn"
    torn.mkdir()
    (tmp_path / "conftest.py").write_text(
        "import os, pathlib, pytest\n\n"
        "@pytest.fixture(autouse=True)\n"
        "def lab_like(request):\n"
        "    pathlib.Path('started', request.node.name).write_text('')\n"
        "    yield\n"
        "    pathlib.Path('torn', request.node.name).write_text('')\n"
    )
    (tmp_path / "started").mkdir()
    where = suite(tmp_path, "time.sleep(60)", "time.sleep(60)")
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "-p", "no:cacheprovider"],
        cwd=where,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # as `make test &` from a script starts it: SIGINT ignored (POSIX, a shell without job control)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    deadline = time.monotonic() + 60
    while len(list((tmp_path / "started").iterdir())) < 2:
        assert time.monotonic() < deadline, "the two runs did not both start a test"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert sorted(p.name for p in torn.iterdir()) == ["test_elsewhere", "test_on_the_lab"], out
    assert proc.returncode == 2, out  # pytest's exit status for an interrupted run
    assert out.count("KeyboardInterrupt") >= 2, out
