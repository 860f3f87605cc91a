"""``--connection pod`` at fleet scale: the host and gpu layers through probe pods on 100 and on 1000 virtual nodes of
the lab's real API server (the real scheduler places the probes, the real API server serves their logs).

Each virtual node gets a stand-in host (tests/conformance/shims.FakeNode: stand-in systemctl, journalctl,
containerd, nvidia-ctk) where the node agent runs its probe's command (the agent's ``attach_host`` with ``env``),
the H100's ``nvidia-smi`` answers recorded once from the lab's emulator and replayed (``cat``), so the bench
measures the suite, the API server and the agent rather than 1000 emulator start-ups on two cores. Prints per
fleet size: wall time of ``pytest conformance -m "host or gpu" --connection pod``, the suite's API requests
(client-side, every HTTP request) and per node, the API server's read counts meanwhile, the probe pods and the
check outcomes; then the same layers on --lab-hosts real lab hosts (default 8), over SSH and through probe
pods, side by side. Asserts nothing. Goal (issue 18): under 60 s for 1000 nodes; requests growing with nodes, not
nodes x checks.

Needs root and `make control-plane`. Run: .venv/bin/python bench/probe_scale.py [--sizes 100,1000] [--lab-hosts 8]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cluster_common import api_client, lab_cluster, pids, request_totals, table
from conformance_scale import DGX_H100, REPO, Requests

from gpuready.conformance import SUITE_DIR

sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "conformance")]
from host_roots import make_host  # noqa: E402
from shims import FakeNode  # noqa: E402

from gpuready.conformance.probe import ProbeFleet  # noqa: E402
from gpuready.lab.agent import control  # noqa: E402
from gpuready.lab.hardware import make_hardware  # noqa: E402

RECORDED = ("-q -x", "-L", "nvlink -s", "mig -lgi")


def stand_in(root: Path) -> dict[str, str]:
    """One H100 stand-in host whose nvidia-smi replays what the emulator answered once."""
    fake = FakeNode(root=root, profile="h100-sxm-8", hw=make_hardware("h100-sxm-8", 0))
    fake.write()
    fake.prepare_driver()
    env = {**os.environ, **fake.env()}
    cases = []
    for i, args in enumerate(RECORDED):
        out = subprocess.run([str(fake.bin / "nvidia-smi"), *args.split()], env=env, capture_output=True)
        (root / f"smi{i}.out").write_bytes(out.stdout + out.stderr)
        cases.append(f'  "{args}") cat "{root}/smi{i}.out"; exit {out.returncode} ;;')
    (fake.bin / "nvidia-smi").write_text(
        '#!/bin/sh\ncase "$*" in\n' + "\n".join(cases) + "\n  *) exit 0 ;;\nesac\n"
    )
    return fake.env()


def inventory(root: Path, names: list[str]) -> Path:
    (root / "group_data").mkdir(parents=True, exist_ok=True)
    (root / "group_data" / "all.py").write_text((REPO / "inventory/group_data/all.py").read_text())
    path = root / "inventory.py"
    host = {**DGX_H100, "nvidia_cdi": False}  # the stand-in's containerd is 1.6 (no CDI)
    path.write_text(f"gpu_nodes = ({[(n, host) for n in names]!r}, {{}})\n")
    return path


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(the process's own CPU seconds, its waited-for children's): /proc/<pid>/stat utime+stime, cutime+cstime."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def run(
    api: Any, kubeconfig: str, root: Path, names: list[str], components: dict[str, int]
) -> dict[str, Any]:
    path = inventory(root / f"n{len(names)}", names)
    agent = components["agent"]
    agent_before = cpu_seconds(agent)
    others_before = {c: cpu_seconds(p)[0] for c, p in components.items() if c != "agent"}
    suite_before = resource.getrusage(resource.RUSAGE_SELF)
    report = root / f"n{len(names)}" / "report"
    before = request_totals(api)
    output = io.StringIO()
    gathered = [0.0, 0]  # seconds in the probe rounds (pods created, watched, logs read, deleted), rounds
    original = ProbeFleet.gather

    def timed(self: ProbeFleet, wanted: Any) -> None:
        start = time.monotonic()
        try:
            original(self, wanted)
        finally:
            gathered[0] += time.monotonic() - start
            gathered[1] += 1

    ProbeFleet.gather = timed  # type: ignore[method-assign]
    with Requests() as counted, contextlib.redirect_stdout(output):
        start = time.monotonic()
        code = pytest.main([str(SUITE_DIR), "-m", "host or gpu", "-q", "-p", "no:cacheprovider", "--tb=no",
                            "--inventory", str(path), "--kubeconfig", kubeconfig, "--connection", "pod",
                            "--command-timeout", "60", "--pod-timeout", "600", "--report-dir", str(report),
                            "--no-header", "-o", "console_output_style=classic"])  # fmt: skip
        wall = time.monotonic() - start
    ProbeFleet.gather = original  # type: ignore[method-assign]
    after = request_totals(api)
    agent_after = cpu_seconds(agent)
    suite_after = resource.getrusage(resource.RUSAGE_SELF)
    others = {
        c: round(cpu_seconds(p)[0] - others_before[c], 1) for c, p in components.items() if c != "agent"
    }
    suite_cpu = (suite_after.ru_utime - suite_before.ru_utime) + (
        suite_after.ru_stime - suite_before.ru_stime
    )
    summary = [line for line in output.getvalue().splitlines() if " passed" in line or " failed" in line]
    print(f"  pytest -m 'host or gpu' --connection pod on {len(names)}: {summary[-1] if summary else '?'}")
    reads = {
        f"{verb} {resource}": after[(verb, resource)] - before[(verb, resource)]
        for verb, resource in after
        if verb in ("GET", "LIST", "WATCH")
        and resource != "leases"
        and after[(verb, resource)] > before[(verb, resource)]
    }
    verdict = json.loads((report / "verdict.json").read_text())
    outcomes: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    for node in verdict["nodes"].values():
        for layer in ("host", "gpu"):
            for check, r in (node["layers"].get(layer) or {}).get("checks", {}).items():
                outcomes[r["status"]] += 1
                if r["status"] == "fail":
                    failed[f"{layer}/{check}"] += 1
    checks = sum(outcomes.values())
    return {"nodes": len(names), "wall_s": round(wall, 1), "probe_s": round(gathered[0], 1), "probe_rounds": gathered[1],
            "exit": int(code), "requests": counted.n,
            "per_node": round(counted.n / len(names), 2), "checks": checks,
            "per_check": round(counted.n / max(checks, 1), 3), "apiserver_reads": reads,
            "outcomes": dict(outcomes), "failed": dict(failed.most_common(5)),
            "agent_cpu_s": round(agent_after[0] - agent_before[0], 1),
            "probe_cpu_s": round(agent_after[1] - agent_before[1], 1),
            "suite_cpu_s": round(suite_cpu, 1), "control_plane_cpu_s": others}  # fmt: skip


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
    parser.add_argument(
        "--sizes", default="100,1000", help="fleet sizes, comma-separated (the largest is registered)"
    )
    parser.add_argument(
        "--lab-hosts",
        type=int,
        default=8,
        help="real lab hosts to time the SSH path on beside the probes (0: none)",
    )
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    results = []
    with tempfile.TemporaryDirectory(prefix="gpuready-probe-scale-") as tmp:
        root = Path(tmp)
        env = stand_in(root / "stand-in")
        host_root, hardware = make_host(
            root / "hosts", "shared", "h100-sxm-8", 0, persistence=True, cdi=False
        )
        print(f"bringing up a lab cluster with {sizes[-1]} virtual nodes", flush=True)
        with lab_cluster(sizes[-1], profile="cpu") as (entry, took):
            names = sorted(entry["agent"]["virtual_nodes"])
            sock = Path(entry["agent"]["control"])
            start = time.monotonic()
            for name in names:
                control.call(sock, {"op": "attach_host", "name": name, "root": str(host_root),
                                    "hardware": str(hardware), "env": env})  # fmt: skip
            table([(f"cluster up + {len(names)} virtual nodes", f"{took:8.1f} s"),
                   (f"{len(names)} stand-in hosts attached", f"{time.monotonic() - start:8.1f} s")])  # fmt: skip
            api = api_client(entry)
            for size in sizes:
                r = run(api, entry["kubeconfig"], root, names[:size], pids(entry))
                results.append(r)
                table([
                    (f"host+gpu layers, {size} nodes, probe pods: wall", f"{r['wall_s']:8.1f} s (exit {r['exit']})"),
                    ("  of which probe rounds (create, one watch, logs, delete)",
                     f"{r['probe_s']:8.1f} s in {r['probe_rounds']} rounds; checks and pytest: {r['wall_s'] - r['probe_s']:.1f} s"),
                    ("  suite's API requests (client-side)",
                     f"{r['requests']:8d} = {r['per_node']:.2f} per node, {r['per_check']:.3f} per check ({r['checks']} checks)"),
                    ("  API server reads meanwhile (all clients)", json.dumps(r["apiserver_reads"])),
                    ("  CPU on this machine meanwhile: node agent; probe processes",
                     f"{r['agent_cpu_s']:8.1f} s; {r['probe_cpu_s']:.1f} s = {1000 * r['probe_cpu_s'] / size:.0f} ms per node "
                     "(on a real fleet each node runs its own)"),
                    ("  CPU of the suite (this process); of the control plane",
                     f"{r['suite_cpu_s']:8.1f} s; {json.dumps(r['control_plane_cpu_s'])}"),
                    ("  check outcomes", f"{json.dumps(r['outcomes'])} failed: {json.dumps(r['failed'])}"),
                ])  # fmt: skip
            if len(results) > 1:
                a, b = results[0], results[-1]
                table([(f"ratio {b['nodes']}/{a['nodes']} nodes", f"wall x{b['wall_s'] / a['wall_s']:.1f}, "
                        f"requests x{b['requests'] / a['requests']:.1f}")])  # fmt: skip
            api.close()
        if args.lab_hosts:
            print(f"bringing up {args.lab_hosts} lab hosts for the SSH path beside the probes", flush=True)
            table(lab_hosts(args.lab_hosts, root))
    print(json.dumps({"results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
