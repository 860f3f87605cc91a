"""How fast the lab comes up and goes down, and what a running host costs in memory.

Prints: the time to build the Debian base root (only when it is not cached yet, or with --rebuild), the time for
`lab up` of N hosts (default 8) with the base and the control plane binaries cached, control plane and kube-proxy
included (issue #28's goal for 3 hosts: under 60 s), the time for `lab down`, and memory per
running host (RSS and PSS summed over the host's processes; PSS splits pages the hosts share with each other).
Needs root. Uses its own state dir; the base cache is the machine's shared one.
Run: sudo .venv/bin/python bench/lab_up.py [--nodes 8] [--rebuild]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from gpuready.lab import hosts
from gpuready.lab.state import LabPaths


def memory_kib(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of one process in KiB, 0 when it is gone."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0, 0
    fields = {
        line.split(":")[0]: int(line.split()[1]) for line in text.splitlines()[1:] if line.endswith("kB")
    }
    return fields.get("Rss", 0), fields.get("Pss", 0)


def host_memory(paths: LabPaths, name: str, nspawn_pid: int) -> tuple[int, int, int]:
    """(processes, RSS KiB, PSS KiB) of a host: its systemd-nspawn plus everything in its cgroup."""
    cgroup = hosts.lab_cgroups(paths)[-1] / name
    pids = {nspawn_pid, *hosts.cgroup_pids(cgroup)}
    rss, pss = zip(*(memory_kib(pid) for pid in pids), strict=True)
    return len(pids), sum(rss), sum(pss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--rebuild", action="store_true", help="rebuild the cached base root and time it")
    args = parser.parse_args()

    _, seconds = hosts.ensure_base(rebuild=args.rebuild)
    print(
        f"base root build (debootstrap, once per recipe): {'cached' if seconds is None else f'{seconds:.1f} s'}"
    )

    paths = LabPaths(Path(tempfile.mkdtemp(prefix="gpuready-lab-bench-", dir="/var/tmp")))
    try:
        start = time.perf_counter()
        state = hosts.up(paths, nodes=args.nodes)
        up_s = time.perf_counter() - start
        print(
            f"lab up, {args.nodes} hosts, base cached (every sshd answers, cluster up): {up_s:.2f} s (goal < 20 s)"
        )

        for name in state["hosts"]:  # let every host finish booting before measuring it
            hosts.run_on_host(paths, name, ["systemctl", "is-system-running", "--wait"])
        time.sleep(1.0)  # the SSH sessions above end; their processes leave the hosts' cgroups
        rows = [host_memory(paths, n, h["pid"]) for n, h in state["hosts"].items()]
        procs, rss, pss = (statistics.mean(col) for col in zip(*rows, strict=True))
        print(
            f"memory per running host (mean of {len(rows)}): {procs:.0f} processes, "
            f"RSS {rss / 1024:.1f} MiB, PSS {pss / 1024:.1f} MiB"
        )

        start = time.perf_counter()
        hosts.down(paths, quiet=True)
        print(f"lab down, {args.nodes} hosts: {time.perf_counter() - start:.2f} s")
    finally:
        hosts.down(paths, quiet=True)
        shutil.rmtree(paths.root, ignore_errors=True)


if __name__ == "__main__":
    main()
