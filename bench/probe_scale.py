"""``--connection pod`` against SSH on real lab hosts: the host and gpu layers of ``gpuready check`` on N lab hosts
(nspawn, deployed by deploys/gpu_node.py and joined by the real kubelet), once over SSH and once through one probe
pod per node, whole processes. Prints the lab's bring-up time and each run's wall time and outcome. Asserts nothing.

The 100- and 1000-node rounds on virtual nodes are gone with the node agent's stand-in hosts (session 34: a probe
pod on a node with no host behind it has nothing real to look at); the request-count side of issue 18 is what
bench/suite_overhead.py and bench/conformance_scale.py measure.

Needs root and `make control-plane`. Run: .venv/bin/python bench/probe_scale.py [--lab-hosts 8]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cluster_common import table

REPO = Path(__file__).resolve().parents[1]


LAB_FIRST_INDEX = 121  # gpu-node-121..: apart from the test labs' hosts


def lab_hosts(count: int, tmp: Path) -> list[tuple[str, str]]:
    """The same two layers on ``count`` real lab hosts (nspawn, deployed by deploys/gpu_node.py, joined): once
    over SSH (the default connection) and once through probe pods, whole ``pytest`` processes."""
    from gpuready.lab import hosts
    from gpuready.lab.state import LabPaths

    paths = LabPaths(tmp / "lab")
    env = {**os.environ, "GPUREADY_LAB_DIR": str(paths.root)}
    rows = []
    try:
        start = time.monotonic()
        state = hosts.up(paths, nodes=count, first_index=LAB_FIRST_INDEX)
        deploy = subprocess.run([str(Path(sys.executable).parent / "pyinfra"), "-y", "inventory/lab.py",
                                 "deploys/gpu_node.py"], cwd=REPO, env=env, capture_output=True, text=True)  # fmt: skip
        if deploy.returncode != 0:
            raise SystemExit(
                f"deploying the {count} lab hosts failed:\n{deploy.stdout[-3000:]}{deploy.stderr[-2000:]}"
            )
        rows.append((f"{count} lab hosts up and deployed", f"{time.monotonic() - start:8.1f} s"))
        kubeconfig = state["apiserver"]["kubeconfig"]
        for label, extra in (("over SSH", []), ("probe pods", ["--connection", "pod"])):
            cmd = [sys.executable, "-m", "gpuready.cli", "check", "--inventory", "inventory/lab.py", "-m",
                   "host or gpu", "-q", "-p", "no:cacheprovider", "--kubeconfig", kubeconfig, *extra]  # fmt: skip
            start = time.monotonic()
            done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
            wall = time.monotonic() - start
            summary = [ln for ln in done.stdout.splitlines() if " passed" in ln or " failed" in ln]
            rows.append((f"host+gpu layers, {count} lab hosts, {label}: wall",
                         f"{wall:8.1f} s (exit {done.returncode}; {summary[-1] if summary else '?'})"))  # fmt: skip
    finally:
        hosts.down(paths, quiet=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab-hosts", type=int, default=8, help="real lab hosts to run both connections on")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuready-probe-scale-") as tmp:
        print(f"bringing up {args.lab_hosts} lab hosts", flush=True)
        table(lab_hosts(args.lab_hosts, Path(tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
