"""No-change re-run of deploys/gpu_node.py on 1 and on 8 lab hosts (root; boots its own lab and takes it down).

Prints the wall time of each re-run, the ratio 8 hosts / 1 host (goal: within 1.5x), and the commands pyinfra ran on one
host during a no-change run (facts included), counted from pyinfra's -vv output.
Run: sudo .venv/bin/python bench/deploy_rerun.py [--hosts 8]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuready.lab import hosts
from gpuready.lab.state import LabPaths

REPO = Path(__file__).resolve().parents[1]
PYINFRA = str(Path(sys.executable).with_name("pyinfra"))


def deploy(env: dict[str, str], *args: str) -> tuple[float, str]:
    start = time.perf_counter()
    result = subprocess.run(
        [PYINFRA, "-y", *args, "inventory/lab.py", "deploys/gpu_node.py"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"deploy failed:\n{(result.stdout + result.stderr)[-3000:]}")
    return elapsed, result.stdout + result.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuready-bench-") as tmp:
        paths = LabPaths(Path(tmp))
        env = {**os.environ, "GPUREADY_LAB_DIR": tmp}
        try:
            hosts.up(paths, nodes=args.hosts, profiles=["l4-1"])
            first, _ = deploy(env)
            print(f"first run, {args.hosts} hosts (converge from bare): {first:6.1f} s")
            one, _ = deploy(env, "--limit", "gpu-node-1")
            many, _ = deploy(env)
            _, verbose = deploy(env, "-vv", "--limit", "gpu-node-1")
        finally:
            hosts.down(paths, quiet=True)
    commands = len(re.findall(r"^\s*\[gpu-node-1\] >>> ", verbose, flags=re.M))
    print(f"no-change re-run, 1 host:  {one:6.2f} s")
    print(f"no-change re-run, {args.hosts} hosts: {many:6.2f} s")
    print(f"ratio {args.hosts} hosts / 1 host: {many / one:.2f}x (goal <= 1.5x)")
    print(f"commands run on a host in a no-change run (facts and operations): {commands}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
