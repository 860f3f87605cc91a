"""What reaching nodes through testinfra costs: the host and gpu layers' wall time over SSH on a 3-host lab.

Boots its own 3-host lab (root; H100 x8 with NVSwitch, A100 x4 with MIG, L4), deploys the nodes, then times
``pytest conformance -m host`` and ``-m "host or gpu"`` (whole processes, median of --runs) with this tree. With
``--baseline REV`` it times the same on the same lab with the suite of commit REV (checked out in a temporary git
worktree and loaded in place of this tree's plugin), e.g. the last commit before testinfra carried the SSH path,
and prints the ratios.
Run: sudo .venv/bin/python bench/host_layer.py [--runs 5] [--baseline ac8a056]
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
LAYERS = ("host", "host or gpu")


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode not in (0, 1):  # 1: a check failed (the figures still count); anything else is broken
        sys.exit(f"{' '.join(cmd)} exited {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}")
    return time.perf_counter() - start


def suite(tree: Path, env: dict[str, str], layer: str, runs: int, plugin: str | None) -> float:
    cmd = [str(BIN / "python"), "-m", "gpuready.cli", "check", "--inventory", "inventory/lab.py", "-m", layer,
           "-q", "-p", "no:cacheprovider"]  # fmt: skip
    if plugin:  # an older tree: its own plugin module instead of this tree's entry point
        cmd += ["-p", "no:gpuready", "-p", plugin]
        env = {**env, "PYTHONPATH": str(tree / "src")}
    return statistics.median(timed(cmd, tree, env) for _ in range(runs))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", help="a commit whose suite to time on the same lab")
    parser.add_argument(
        "--baseline-plugin", default="gpuready.conformance_plugin", help="that commit's plugin module"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuready-bench-") as tmp:
        paths = LabPaths(Path(tmp) / "lab")
        env = {**os.environ, "GPUREADY_LAB_DIR": str(paths.root)}
        baseline = Path(tmp) / "baseline"
        try:
            if args.baseline:
                subprocess.run(["git", "worktree", "add", "--detach", str(baseline), args.baseline], cwd=REPO,
                               check=True, capture_output=True)  # fmt: skip
            hosts.up(paths, nodes=3)
            timed([str(BIN / "pyinfra"), "-y", "inventory/lab.py", "deploys/gpu_node.py"], REPO, env)
            for layer in LAYERS:
                now = suite(REPO, env, layer, args.runs, None)
                line = f"-m {layer!r:14} 3 nodes over SSH: {now:6.2f} s (median of {args.runs}, this tree)"
                if args.baseline:
                    before = suite(baseline, env, layer, args.runs, args.baseline_plugin)
                    line += f"; {args.baseline}: {before:6.2f} s; ratio now/before {now / before:.2f}"
                print(line, flush=True)
        finally:
            hosts.down(paths, quiet=True)
            if args.baseline:
                subprocess.run(["git", "worktree", "remove", "--force", str(baseline)], cwd=REPO,
                               capture_output=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
