"""What an idle, joined lab costs: CPU over one minute and memory, per part (goal: under 10% of one core).

Brings up its own lab of N hosts (default 8), joins them (``pyinfra inventory/lab.py deploys/gpu_node.py``) and
installs the add-ons (their DaemonSet pods then run on every node), waits 10 s for the start-up work to settle,
then reads each part's CPU time (utime + stime of every process, from /proc) at the start and the end of the
window: the hosts (every process in their cgroups: systemd, sshd, containerd, the kubelet and its pods), each
control plane component, the lab's kube-proxy beside it, and the repository and egress servers. Prints seconds of CPU and percent of one core per part and in total, and the
resident memory of the control plane and the helper. Nothing is asserted.

Run: sudo .venv/bin/python bench/lab_idle.py [--nodes 8] [--window 60]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuready.lab import hosts
from gpuready.lab.state import LabPaths

REPO = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICK


def rss_mib(pid: int) -> float:
    try:
        line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return 0.0
    return int(line.split()[1]) / 1024


def helpers(api: dict) -> dict[str, int]:
    """The processes the lab runs beside the control plane: kube-proxy."""
    return {"kube-proxy": api["kube_proxy"]["pid"]} if "kube_proxy" in api else {}


def parts(paths: LabPaths, state: dict) -> dict[str, list[int]]:
    """Part name -> the pids that make it up now (host cgroups are read each time: processes come and go)."""
    api = state["apiserver"]
    out = {"hosts": [p for cg in hosts.lab_cgroups(paths) for p in hosts.cgroup_pids(cg)]}
    out.update({name: [pid] for name, pid in api["pids"].items()})
    out.update({name: [pid] for name, pid in helpers(api).items()})
    out["repo + egress"] = [state["repo"]["pid"], state["egress"]["pid"]]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--window", type=float, default=60.0)
    args = parser.parse_args()
    paths = LabPaths(Path(tempfile.mkdtemp(prefix="gpuready-lab-idle-", dir="/var/tmp")))
    env = {**os.environ, "GPUREADY_LAB_DIR": str(paths.root)}
    pyinfra = str(Path(sys.executable).with_name("pyinfra"))
    try:
        state = hosts.up(paths, nodes=args.nodes)
        for deploy in ("deploys/gpu_node.py", "deploys/cluster_addons.py"):
            subprocess.run(
                [pyinfra, "-y", "inventory/lab.py", deploy],
                cwd=REPO,
                env=env,
                check=True,
                capture_output=True,
            )
        time.sleep(10.0)  # pods start, first status posts: the window measures the steady state only
        before = {name: cpu_seconds(pids) for name, pids in parts(paths, state).items()}
        start = time.monotonic()
        time.sleep(args.window)
        elapsed = time.monotonic() - start
        after = {name: cpu_seconds(pids) for name, pids in parts(paths, state).items()}
        print(
            f"idle joined lab, {args.nodes} hosts with the add-ons, {elapsed:.1f} s window "
            f"(CPU from /proc, {1 / TICK:.2f} s ticks):"
        )
        total = 0.0
        for name in after:
            used = max(0.0, after[name] - before.get(name, 0.0))
            total += used
            print(f"  {name:<26} {used:7.2f} s CPU  {100 * used / elapsed:6.2f}% of one core")
        print(f"  {'total':<26} {total:7.2f} s CPU  {100 * total / elapsed:6.2f}% of one core (goal < 10%)")
        api = state["apiserver"]
        for name, pid in [*api["pids"].items(), *helpers(api).items()]:
            print(f"  RSS {name:<22} {rss_mib(pid):7.1f} MiB")
    finally:
        hosts.down(paths, quiet=True)
        shutil.rmtree(paths.root, ignore_errors=True)


if __name__ == "__main__":
    main()
