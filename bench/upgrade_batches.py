"""deploys/upgrade_driver.py on 4 lab hosts with batches of 1, then of 4 (root; boots its own lab and takes it down).

The fleet is deployed at 570; each run upgrades the driver (570 -> 580, then 580 -> 595: a downgrade would fail its
validation, every older driver being below a security fix), so every node is cordoned, drained, upgraded,
rebooted, validated by the conformance layers and uncordoned. Prints the wall time of each run, per node, the ratio
of batches of one to batches of all (what larger batches buy on this machine), and a no-change run (every node at
the pinned versions: plan only, nothing cordoned). The hosts run the real kubelet, containerd and NVIDIA's add-ons
(a host's reboot includes stopping and restarting its containers).
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
DRIVERS = (("570.195.03", "570"), ("580.178.04", "580"), ("595.91.07", "595"))  # lab.packages.DRIVER_VERSIONS


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
    sizes = [1, args.hosts]
    times: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="gpuready-bench-") as tmp:
        paths = LabPaths(Path(tmp))
        env = {**os.environ, "GPUREADY_LAB_DIR": tmp}
        try:
            hosts.up(paths, nodes=args.hosts, profiles=["l4-1"], first_index=201)
            pyinfra(env, "deploys/gpu_node.py", DRIVERS[0])
            pyinfra(env, "deploys/cluster_addons.py", DRIVERS[0])
            for driver, size in zip(DRIVERS[1:], sizes, strict=True):
                batch = ("--data", f"upgrade_batch_size={size}", "--data", f"upgrade_max_unavailable={size}")
                times[size] = pyinfra(env, "deploys/upgrade_driver.py", driver, *batch)
                print(f"upgrade to {driver[0]}, {args.hosts} hosts in batches of {size}: {times[size]:6.1f} s",
                      flush=True)  # fmt: skip
            unchanged = pyinfra(env, "deploys/upgrade_driver.py", DRIVERS[-1])
        finally:
            hosts.down(paths, quiet=True)
    print(f"{args.hosts} hosts:")
    for size, seconds in times.items():
        print(
            f"batches of {size}: {seconds:6.1f} s, {seconds / args.hosts:5.1f} s/node, "
            f"{times[1] / seconds:.2f}x faster than batches of 1"
        )
    print(f"no-change run (every node at the pinned versions): {unchanged:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
