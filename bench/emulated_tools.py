"""What the lab's dcgmi, nvidia-container-cli and driver daemons cost (the static tools' ELF, gpuready/lab/silicon/tools).

On one emulated H100 x8 machine in a temporary directory (no lab, no root), times each command below: ``dcgmi diag``
at levels 1 and 2 (JSON, as the diag layer runs it, and the table), ``nvidia-container-cli info`` (what the toolkit's
legacy hook asks first), and a Type=forking start of ``nvidia-persistenced`` and ``nv-hostengine``: from the start
until the starter exits with the daemon's pid file written, plus the stop (SIGTERM until the pid file is gone).
With ``--baseline REV`` it times the same through the Python tools of commit REV (extracted with ``git archive``;
4f62b2b is the last whose tools were Python) and prints the ratios. Medians of --runs.
Run: .venv/bin/python bench/emulated_tools.py [--runs 20] [--baseline 4f62b2b]
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from emulated_smi import PYTHON, baseline_emulator, machine_env, parse_args_and_tools

from gpuready.lab import hardware

COMMANDS = {
    "dcgmi diag -r 1 -j": ["dcgmi", "diag", "-r", "1", "-j"],
    "dcgmi diag -r 2 -j": ["dcgmi", "diag", "-r", "2", "-j"],
    "dcgmi diag -r 2": ["dcgmi", "diag", "-r", "2"],
    "nvidia-container-cli info": ["nvidia-container-cli", "info"],
}
DAEMONS = {"nvidia-persistenced": ["--verbose"], "nv-hostengine": []}
# the Python modules of the baseline, and their entry points
PY_MODULES = {
    "dcgmi": ("dcgmi", "main"),
    "nvidia-container-cli": ("toolkit", "cli_main"),
    "nvidia-persistenced": ("nvidia_persistenced", "main"),
    "nv-hostengine": ("nv_hostengine", "main"),
}


def go_command(tools: str, tool: str) -> list[str]:
    return [tools, tool]


def py_command(emulator: Path, tool: str) -> list[str]:
    module, entry = PY_MODULES[tool]
    code = f"import sys; sys.path[:0] = [{str(emulator)!r}]; import {module}; sys.exit({module}.{entry}(sys.argv[1:]))"
    return [PYTHON, "-E", "-s", "-c", code]


def time_command(command: list[str], env: dict[str, str], runs: int) -> float:
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        seconds.append(time.perf_counter() - start)
        if done.returncode not in (0, 226):  # 226: a diag test failed, which is an answer too
            sys.exit(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return statistics.median(seconds)


def time_daemon(command: list[str], env: dict[str, str], pid_file: Path, runs: int) -> tuple[float, float]:
    """Median seconds of the forking start (until the starter exits 0) and of the stop (SIGTERM until the pid file
    is gone)."""
    starts, stops = [], []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, env=env, capture_output=True, check=True, timeout=60)
        starts.append(time.perf_counter() - start)
        pid = int(pid_file.read_text().strip())
        start = time.perf_counter()
        os.kill(pid, signal.SIGTERM)
        while pid_file.exists():
            if time.perf_counter() - start > 10:
                sys.exit(f"{command[0]}: pid {pid} did not remove {pid_file} within 10 s of SIGTERM")
            time.sleep(0.0005)
        stops.append(time.perf_counter() - start)
    return statistics.median(starts), statistics.median(stops)


def measure(make: object, tmp: Path, tools: str, runs: int) -> dict[str, float]:
    env = machine_env(tmp, tools)  # no host engine pid file named: dcgmi takes the engine as up
    rows = {}
    for name, (tool, *args) in COMMANDS.items():
        rows[name] = time_command([*make(tool), *args], env, runs)  # type: ignore[operator]
    pids = {"nvidia-persistenced": tmp / "persistenced.pid", "nv-hostengine": tmp / "hostengine.pid"}
    env["GPUREADY_LAB_PERSISTENCED_PID"] = str(pids["nvidia-persistenced"])
    env["GPUREADY_LAB_HOSTENGINE_PID"] = str(pids["nv-hostengine"])
    for tool, args in DAEMONS.items():
        started, stopped = time_daemon([*make(tool), *args], env, pids[tool], runs)  # type: ignore[operator]
        rows[f"{tool}: start (fork, pid file)"] = started
        rows[f"{tool}: stop (SIGTERM, pid file gone)"] = stopped
    return rows


def main() -> None:
    args, tools = parse_args_and_tools(__doc__, "a commit whose Python tools to time as well")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        hardware.write_hardware(tmp / "hardware.json", hardware.make_hardware("h100-sxm-8", 0))
        now = measure(lambda tool: go_command(tools, tool), tmp, tools, args.runs)
        base = None
        if args.baseline:
            old = baseline_emulator(args.baseline, tmp / "baseline")
            base = measure(lambda tool: py_command(old, tool), tmp, tools, args.runs)
    print(f"H100 x8, median of {args.runs} (ms):")
    header = f"  {'':<42} {'Go':>8}"
    if base:
        header += f" {'Python@' + args.baseline:>16} {'ratio':>6}"
    print(header)
    for name, seconds in now.items():
        line = f"  {name:<50} {seconds * 1000:8.1f}"
        if base:
            line += f" {base[name] * 1000:16.1f} {seconds / base[name]:6.2f}"
        print(line)


if __name__ == "__main__":
    main()
