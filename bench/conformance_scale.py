"""The conformance suite against the lab's real control plane at fleet scale: the node layer on N virtual GPU nodes
(default 1000).

Brings up a lab cluster (network namespace, etcd + kube-apiserver + kube-controller-manager + kube-scheduler, the
KWOK playing the kubelet of N dgx-h100 virtual nodes registered with their GPU capacity and GFD labels), labels and taints the nodes
as the join does, server-side applies gpuready's add-ons (device plugin, GFD, dcgm-exporter and nfd-worker
DaemonSets, one nfd-master: created by the real DaemonSet controller and bound by the real scheduler) with each
image a placeholder named for its add-on (KWOK marks it Running; nothing runs), since a virtual node has no host
for NVIDIA's software to look at and the bench measures the suite's API traffic, not that software; waits until
they run, then runs the node layer in-process. The workloads
layer runs on the lab's real hosts (tests/lab), not here: a vectorAdd needs a GPU host.
Prints per layer: wall time, the suite's API requests (counted at the Kubernetes client's REST layer: every HTTP
request it makes, the connect check included) and per node, the API server's own count of read requests in that
time (apiserver_request_total; KWOK's and the controllers' writes left out), and the check outcomes.
Asserts nothing. Goal (issue 7): the node layer under 60 s for 1000 nodes, at most 3 requests per node.

Needs root and `make control-plane`. Run: .venv/bin/python bench/conformance_scale.py [--nodes 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from cluster_common import api_client, lab_cluster, request_totals, table
from kubernetes import client
from kubernetes.client import rest

from gpuready import kube
from gpuready.conformance import SUITE_DIR
from gpuready.deploy import addons
from gpuready.spec import Fleet, load_fleet

REPO = Path(__file__).resolve().parents[1]
DGX_H100 = {
    "gpu_model": "NVIDIA H100 80GB HBM3",
    "gpu_count": 8,
    "nvswitch": True,
    "kube_api_endpoint": "10.0.0.1:6443",
    "kube_ca_cert_hash": "sha256:" + "ab" * 32,
    "kube_join_token_file": "/nonexistent/token",
    "node_taints": ["nvidia.com/gpu=present:NoSchedule"],
}
ADDONS_NS = "gpu-system"
# a placeholder per add-on (KWOK marks its pods Running), named so the suite tells the add-ons apart
IMAGES = {
    knob: f"lab.invalid/placeholder/{name}:bench"
    for knob, name in (
        ("device_plugin_image", "k8s-device-plugin"),
        ("gfd_image", "gpu-feature-discovery"),
        ("dcgm_exporter_image", "dcgm-exporter"),
        ("dra_driver_image", "dra-driver-nvidia-gpu"),
        ("nfd_image", "node-feature-discovery"),
    )
}


def inventory(root: Path, names: list[str]) -> tuple[Path, Fleet]:
    root.mkdir(parents=True, exist_ok=True)
    (root / "group_data").mkdir(exist_ok=True)
    fleet_wide = "".join(
        f"{knob} = {image!r}\n" for knob, image in IMAGES.items()
    )  # knobs of the whole fleet
    (root / "group_data" / "all.py").write_text(
        (REPO / "inventory/group_data/all.py").read_text() + fleet_wide
    )
    path = root / "inventory.py"
    path.write_text(f"gpu_nodes = ({[(n, DGX_H100) for n in names]!r}, {{}})\n")
    return path, load_fleet(path)


def converge(api: client.ApiClient, fleet: Fleet, timeout: float = 1800.0) -> None:
    """Join labels and taints on every node, then the add-ons, applied as the add-ons deploy applies them; wait
    until every node runs its three add-on pods."""
    core = client.CoreV1Api(api)

    def join(name: str) -> None:
        spec = fleet.nodes[name]
        core.patch_node(
            name,
            {
                "metadata": {"labels": spec.node_labels},
                "spec": {"taints": [t.as_dict() for t in spec.taints]},
            },
        )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(join, fleet.nodes))
    cluster = kube.Cluster(api=api, url="")
    for manifest in addons.render_all(
        fleet, addons.AddonSettings.from_node(next(iter(fleet.nodes.values())))
    ):
        kube.apply(cluster, manifest)
    want = 4 * len(fleet.nodes) + 1  # device plugin, GFD, dcgm-exporter, nfd-worker per node; one nfd-master
    start = time.monotonic()
    shown = 0.0
    while True:
        pods = json.loads(core.list_namespaced_pod(ADDONS_NS, _preload_content=False).data)["items"]
        phases = Counter((p.get("status") or {}).get("phase", "?") for p in pods)
        bound = sum(1 for p in pods if (p.get("spec") or {}).get("nodeName"))
        elapsed = time.monotonic() - start
        if phases["Running"] >= want:
            print(
                f"  add-ons: {phases['Running']} pods Running on {len(fleet.nodes)} nodes after {elapsed:.0f} s"
            )
            return
        if elapsed - shown >= 15:
            shown = elapsed
            print(
                f"  add-ons after {elapsed:.0f} s: {len(pods)} pods created, {bound} bound, {dict(phases)}",
                flush=True,
            )
        if elapsed > timeout:
            raise SystemExit(f"add-ons not running on every node after {timeout} s ({dict(phases)})")
        time.sleep(2)


class Requests:
    """Counts every HTTP request the Kubernetes client makes in this process."""

    def __init__(self) -> None:
        self.n = 0
        self._original = rest.RESTClientObject.request

    def __enter__(self) -> Requests:
        original = self._original

        def counting(client_self: Any, *a: Any, **kw: Any) -> Any:
            self.n += 1
            return original(client_self, *a, **kw)

        rest.RESTClientObject.request = counting
        return self

    def __exit__(self, *exc: object) -> None:
        rest.RESTClientObject.request = self._original


def run_layer(
    api: client.ApiClient, kubeconfig: str, root: Path, names: list[str], layer: str, timeout: int
) -> dict[str, Any]:
    path, _fleet = inventory(root / layer, names)
    before = request_totals(api)
    output = io.StringIO()
    with Requests() as counted, contextlib.redirect_stdout(output):
        start = time.monotonic()
        code = pytest.main([str(SUITE_DIR), "-m", layer, "-q", "-p", "no:cacheprovider", "--tb=no",
                            "--inventory", str(path), "--kubeconfig", kubeconfig, "--command-timeout", str(timeout), "--pod-timeout", str(timeout),
                            "--report-dir", str(root / layer / "report"), "--no-header",
                            "-o", "console_output_style=classic"])  # fmt: skip
        wall = time.monotonic() - start
    summary = [line for line in output.getvalue().splitlines() if " passed" in line or " failed" in line]
    print(f"  pytest -m {layer}: {summary[-1] if summary else output.getvalue()[-2000:]}")
    after = request_totals(api)
    reads = {
        f"{verb} {resource}": after[(verb, resource)] - before[(verb, resource)]
        for verb, resource in after
        if verb in ("GET", "LIST", "WATCH")
        and resource not in ("leases",)
        and after[(verb, resource)] > before[(verb, resource)]
    }
    writes = sum(after.values()) - sum(before.values()) - sum(reads.values())
    verdict = json.loads((root / layer / "report" / "verdict.json").read_text())
    outcomes: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    for node in verdict["nodes"].values():
        for name, check in (node["layers"].get(layer) or {}).get("checks", {}).items():
            outcomes[check["status"]] += 1
            if check["status"] == "fail":
                failed[f"{name}: {check['message'].split(': ', 1)[-1][:120]}"] += 1
    return {
        "layer": layer,
        "nodes": len(names),
        "wall_s": round(wall, 1),
        "exit": int(code),
        "requests": counted.n,
        "per_node": round(counted.n / len(names), 3),
        "apiserver_reads": reads,
        "apiserver_other": writes,
        "outcomes": dict(outcomes),
        "failed": dict(failed.most_common(5)),
    }


def report(r: dict[str, Any]) -> None:
    n = r["nodes"]
    table(
        [
            (f"{r['layer']} layer on {n} nodes: wall", f"{r['wall_s']:8.1f} s (pytest exit {r['exit']})"),
            (
                f"{r['layer']} layer: suite's API requests (client-side)",
                f"{r['requests']:8d} = {r['per_node']:.3f} per node",
            ),
            (
                f"{r['layer']} layer: API server reads meanwhile (all clients)",
                json.dumps(r["apiserver_reads"]),
            ),
            (
                f"{r['layer']} layer: other API server requests meanwhile",
                f"{r['apiserver_other']:8d} (KWOK, controllers)",
            ),
            (f"{r['layer']} layer: check outcomes", json.dumps(r["outcomes"])),
            (f"{r['layer']} layer: failures (most common)", json.dumps(r["failed"])),
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="gpuready-conformance-scale-") as tmp:
        root = Path(tmp)
        print(f"bringing up a lab cluster with {args.nodes} virtual nodes", flush=True)
        with lab_cluster(args.nodes) as (entry, took):
            names = list(entry["virtual_nodes"])
            table([(f"cluster up + {len(names)} virtual nodes registered", f"{took:8.1f} s")])
            api = api_client(entry)
            _path, fleet = inventory(root / "all", names)
            start = time.monotonic()
            converge(api, fleet)
            joined = time.monotonic() - start
            table([(f"{len(names)} nodes joined + add-ons running (4 DaemonSets)", f"{joined:8.1f} s")])
            results.append(run_layer(api, entry["kubeconfig"], root, names, "node", 120))
            report(results[-1])
            api.close()
    print(json.dumps({"cluster_nodes": args.nodes, "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
