"""What the lab's nvidia-smi costs on a host and in a GPU container (one Go ELF, gpuready/lab/silicon/tools).

In a container (``GPUREADY_LAB_CONTAINER_DEVICES`` set, as the lab's runc wrapper sets it)
nvidia-smi sees only the GPUs and MIG devices the container's device nodes reveal (silicon/machine/contain.go). On
one emulated H100 x8 machine in a temporary directory (no lab, no root), times ``-L``, ``-q -x``, a
``--query-gpu`` and the table on the host and in a container given GPUs 0 and 3, and with ``--baseline REV`` the
same with the Python nvidia-smi of commit REV (293b33f: the last one; e5bc7cd: before the container rule was
package machine's), and prints the ratios. Medians of --runs.
Run: .venv/bin/python bench/container_smi.py [--runs 20] [--baseline 293b33f]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from emulated_smi import PYTHON, baseline_emulator, machine_env

from gpuready.lab import hardware
from gpuready.lab.silicon import build

CONTAINER = "/dev/nvidiactl,/dev/nvidia0,/dev/nvidia3"
COMMANDS = (["-L"], ["-q", "-x"], ["--query-gpu=index,uuid,memory.total,ecc.errors.uncorrected.volatile.total",
             "--format=csv"], [])  # fmt: skip


def median_ms(smi: list[str], env: dict[str, str], args: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run([*smi, *args], env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            sys.exit(f"nvidia-smi {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--baseline", help="a commit whose emulator to time as well")
    args = parser.parse_args()
    tools = str(build.static_tools())
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        hardware.write_hardware(tmp / "hardware.json", hardware.make_hardware("h100-sxm-8", 0))
        host = machine_env(tmp, tools)
        places = {"host": host, "container": {**host, "GPUREADY_LAB_CONTAINER_DEVICES": CONTAINER}}
        emulators = {"now": [tools, "nvidia-smi"]}
        if args.baseline:
            old = baseline_emulator(args.baseline, tmp / "baseline") / "nvidia_smi.py"
            emulators[args.baseline] = [PYTHON, "-E", "-s", str(old)]
        rows = {
            (emulator, place, " ".join(command)[:24] or "(table)"): median_ms(smi, env, command, args.runs)
            for emulator, smi in emulators.items()
            for place, env in places.items()
            for command in COMMANDS
        }
    print(
        f"nvidia-smi on an emulated H100 x8, on the host and in a container given {CONTAINER}, median of {args.runs}:"
    )
    for (emulator, place, command), ms in rows.items():
        print(f"  {emulator:<8} {place:<10} {command:<24} {ms:7.1f} ms")
    for command in COMMANDS:
        words = " ".join(command)[:24] or "(table)"
        now = rows[("now", "container", words)]
        print(f"  ratio container / host, {words}: {now / rows[('now', 'host', words)]:.2f}")
        if args.baseline:
            print(
                f"  ratio container now / {args.baseline}, {words}: {now / rows[(args.baseline, 'container', words)]:.2f}"
            )


if __name__ == "__main__":
    main()
