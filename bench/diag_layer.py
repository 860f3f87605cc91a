"""What the diag layer adds to a conformance run: its wall time on 1 node and on every node of a lab.

Boots its own 3-host lab (root; H100 x8 with NVSwitch, A100 x4 with MIG, L4), deploys the nodes, installs DCGM and
nvbandwidth from the lab's CUDA repository, then times ``pytest conformance -m diag`` (whole processes, median
of --runs) for one node and for all, next to ``-m "host or gpu"`` for scale. The lab's tools are emulated, so the
figures are the suite's own cost; on real GPUs ``dcgmi diag -r 1`` adds seconds and nvbandwidth about a minute.
Run: sudo .venv/bin/python bench/diag_layer.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuready.lab import hosts
from gpuready.lab.state import LabPaths

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(env: dict[str, str], *args: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [str(BIN / args[0]), *args[1:]], cwd=REPO, env=env, capture_output=True, text=True, timeout=1800
    )
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuready-bench-") as tmp:
        paths = LabPaths(Path(tmp))
        env = {**os.environ, "GPUREADY_LAB_DIR": tmp}
        try:
            state = hosts.up(paths, nodes=3)
            run(env, "pyinfra", "-y", "inventory/lab.py", "deploys/gpu_node.py")
            for node in state["hosts"]:
                hosts.run_on_host(
                    paths,
                    node,
                    [
                        "sh",
                        "-c",
                        "DEBIAN_FRONTEND=noninteractive apt-get install "
                        "-y -q datacenter-gpu-manager-4-core nvbandwidth",
                    ],
                    timeout=300,
                )
            suite = [
                "gpuready",
                "check",
                "--inventory",
                "inventory/lab.py",
                "-p",
                "no:cacheprovider",
                "-q",
            ]
            cases = {
                "diag, 1 node": [*suite, "-m", "diag", "--nodes", "gpu-node-1"],
                "diag, 3 nodes": [*suite, "-m", "diag"],
                "host and gpu, 3 nodes": [*suite, "-m", "host or gpu"],
            }
            times: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(args.runs):
                for name, argv in cases.items():
                    times[name].append(run(env, *argv))
        finally:
            hosts.down(paths, quiet=True)
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, seconds in medians.items():
        print(f"{name:24s} (pytest conformance, whole process) median of {args.runs}: {seconds:6.2f} s")
    print(
        f"the diag layer on 3 nodes at once costs {medians['diag, 3 nodes'] / medians['diag, 1 node']:.2f}x "
        "its cost on 1 node (the nodes measure in parallel)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
