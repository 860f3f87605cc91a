"""What a converged GPU node costs to administer: no-change deploys on 1 and N lab hosts, and apt under the pin.

Boots its own lab (root), converges it once, then:
- times whole ``pyinfra`` processes as a user runs them (a no-change run on one host and on all hosts, alternated
  so both see the same machine load), --runs times each; prints the medians and the ratio of medians (goal: N
  hosts within 1.3x of one host);
- counts the commands pyinfra runs on one host in a no-change run (facts and operations, from ``-vv``; goal <= 25);
- times ``apt-cache policy nvidia-driver`` on a pinned host (CPU seconds per run, averaged over 20) with the deploy's pin
  (package names), with the regular-expression pin gpuready wrote before, and with no pin (goal: within 2x of none).

Run: sudo .venv/bin/python bench/deploy_rerun.py [--hosts 8] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuready.lab import hosts
from gpuready.lab.state import LabPaths

PREFERENCES_FILE = "/etc/apt/preferences.d/gpuready-nvidia-driver"  # where the deploy writes the driver pin

REPO = Path(__file__).resolve().parents[1]
PYINFRA = str(Path(sys.executable).with_name("pyinfra"))
# The pin gpuready wrote until the package-name list replaced it: apt matches it against every cached package.
REGEX_PIN = (
    "Package: /^(nvidia-(driver|kernel|smi|persistenced|fabricmanager|modprobe|settings|xconfig|opencl)"
    "|libnvidia-(ml|cfg|gl|compute|encode|decode|fbc|nscq|ptxjitcompiler|nvvm)|libcuda|libnvidia-egl)/\n"
    "Pin: version {version}\nPin-Priority: 1001\n"
)


def deploy(env: dict[str, str], *args: str) -> tuple[float, str]:
    start = time.perf_counter()
    result = subprocess.run(
        [PYINFRA, "-y", *args, "inventory/lab.py", "deploys/gpu_node.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"deploy failed:\n{(result.stdout + result.stderr)[-3000:]}")
    return elapsed, result.stdout + result.stderr


def on_host(paths: LabPaths, node: str, command: str) -> str:
    result = hosts.run_on_host(paths, node, ["sh", "-c", command], timeout=600)
    if result.returncode != 0:
        sys.exit(f"{node}: {command!r} exited {result.returncode}: {result.stderr}")
    return result.stdout


def apt_policy_cpu(paths: LabPaths, node: str, runs: int = 20) -> float:
    """CPU seconds of one ``apt-cache policy nvidia-driver`` on the node as configured now: the total over ``runs``
    runs divided by ``runs`` (the kernel counts CPU time in 10 ms ticks, too coarse for one fast run)."""
    script = (
        "python3 -c 'import os,subprocess\n"
        "b=os.times()\n"
        f"for _ in range({runs}):\n"
        '    subprocess.run(["apt-cache","policy","nvidia-driver"],capture_output=True)\n'
        "a=os.times()\n"
        f"print((a.children_user+a.children_system-b.children_user-b.children_system)/{runs})'"
    )
    return float(on_host(paths, node, script).strip())


def apt_costs(paths: LabPaths, node: str) -> dict[str, float]:
    version = on_host(paths, node, "dpkg-query -W -f '${Version}' nvidia-driver").strip()
    saved = "/root/gpuready-pin.bench"
    costs = {"package names (gpuready now)": apt_policy_cpu(paths, node)}
    on_host(paths, node, f"mv {PREFERENCES_FILE} {saved}")
    try:
        costs["no pin"] = apt_policy_cpu(paths, node)
        regex = REGEX_PIN.format(version=version)
        on_host(paths, node, f"printf '%s' '{regex}' > {PREFERENCES_FILE}")
        costs["regular expression (before)"] = apt_policy_cpu(paths, node, runs=3)
    finally:
        on_host(paths, node, f"mv {saved} {PREFERENCES_FILE}")
    return costs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuready-bench-") as tmp:
        paths = LabPaths(Path(tmp))
        env = {**os.environ, "GPUREADY_LAB_DIR": tmp}
        try:
            hosts.up(paths, nodes=args.hosts, profiles=["l4-1"])
            first, _ = deploy(env)
            print(f"first run, {args.hosts} hosts (converge from bare): {first:6.1f} s")
            one: list[float] = []
            many: list[float] = []
            for run in range(args.runs):
                one.append(deploy(env, "--limit", "gpu-node-1")[0])
                many.append(deploy(env)[0])
                print(
                    f"  run {run + 1}: 1 host {one[-1]:5.2f} s, {args.hosts} hosts {many[-1]:5.2f} s",
                    flush=True,
                )
            _, verbose = deploy(env, "-vv", "--limit", "gpu-node-1")
            costs = apt_costs(paths, "gpu-node-1")
        finally:
            hosts.down(paths, quiet=True)
    commands = len(re.findall(r"^\s*\[gpu-node-1\] >>> ", verbose, flags=re.M))
    m1, mn = statistics.median(one), statistics.median(many)
    print(f"no-change run, 1 host, median of {args.runs}:  {m1:6.2f} s")
    print(f"no-change run, {args.hosts} hosts, median of {args.runs}: {mn:6.2f} s")
    print(f"ratio of medians {args.hosts} hosts / 1 host: {mn / m1:.2f}x (goal <= 1.3x)")
    print(f"commands run on a host in a no-change run (facts and operations): {commands} (goal <= 25)")
    print("apt-cache policy nvidia-driver on a pinned host, CPU seconds per run:")
    for label, seconds in costs.items():
        print(f"  {label:30s} {seconds:6.3f} s")
    ratio = costs["package names (gpuready now)"] / max(costs["no pin"], 1e-3)
    print(f"pin by package names / no pin: {ratio:.2f}x (goal <= 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
