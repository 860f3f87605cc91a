"""deploys/upgrade_driver.py on 4 lab hosts with batches of 1, 2 and 4 (root; boots its own lab and takes it down).

Each run changes the driver (580 <-> 570), so every node is cordoned, drained, upgraded, rebooted, validated by the
conformance layers and uncordoned. Prints the wall time of each run, its ratio to batches of one (what larger
batches buy on this machine), and a no-change run (every node at the pinned versions: plan only, nothing cordoned).
Run (as root): .venv/bin/python bench/upgrade_batches.py [--hosts 4]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuready.lab import hosts
from gpuready.lab.state import LabPaths

REPO = Path(__file__).resolve().parents[1]
PYINFRA = str(Path(sys.executable).with_name("pyinfra"))
DRIVERS = (("570.195.03", "570"), ("580.178.04", "580"))


def pyinfra(env: dict[str, str], deploy: str, driver: tuple[str, str], *args: str) -> float:
    version, branch = driver
    data = ["--data", f"nvidia_driver_version={version}", "--data", f"nvidia_driver_branch={branch}"]
    start = time.perf_counter()
    result = subprocess.run(
        [PYINFRA, "-y", *data, *args, "inventory/lab.py", deploy],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"{deploy} failed:\n{(result.stdout + result.stderr)[-3000:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=4)
    args = parser.parse_args()
    sizes = sorted({1, 2, args.hosts})
    times: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="gpuready-bench-") as tmp:
        paths = LabPaths(Path(tmp))
        env = {**os.environ, "GPUREADY_LAB_DIR": tmp}
        try:
            hosts.up(paths, nodes=args.hosts, profiles=["l4-1"], first_index=201)
            pyinfra(env, "deploys/gpu_node.py", DRIVERS[0])
            pyinfra(env, "deploys/cluster_addons.py", DRIVERS[0])
            for i, size in enumerate(sizes, start=1):
                batch = ("--data", f"upgrade_batch_size={size}", "--data", f"upgrade_max_unavailable={size}")
                times[size] = pyinfra(env, "deploys/upgrade_driver.py", DRIVERS[i % 2], *batch)
                print(f"upgrade, {args.hosts} hosts in batches of {size}: {times[size]:6.1f} s", flush=True)
            unchanged = pyinfra(env, "deploys/upgrade_driver.py", DRIVERS[len(sizes) % 2])
        finally:
            hosts.down(paths, quiet=True)
    for size, seconds in times.items():
        print(
            f"batches of {size}: {seconds:6.1f} s, {seconds / args.hosts:5.1f} s/node, "
            f"{times[1] / seconds:.2f}x faster than batches of 1"
        )
    print(f"no-change run (every node at the pinned versions): {unchanged:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
