"""The lab's real control plane at fleet scale: N virtual GPU nodes (default 1000), P GPU pods (default 1000).

Brings up a lab cluster (network namespace, etcd + kube-apiserver + kube-controller-manager + kube-scheduler
made by kubeadm, KWOK playing the kubelet of N dgx-h100 virtual nodes and renewing their Leases) and prints:
the time to bring it up; each component's resident memory (VmRSS from /proc/<pid>/status) with the nodes; the
time to list the nodes (kubectl table, kubectl -o json, the Python client) and until a watch has delivered every
ADDED event; the CPU the idle cluster uses over a window (utime + stime from /proc/<pid>/stat, per component)
and the API server's request rate meanwhile (its apiserver_request_total); then the time to create P pods each
asking for 1 nvidia.com/gpu, until the real scheduler has bound them all and until KWOK reports them all Running, and
the memory after. Asserts nothing. Everything is brought down and the namespace destroyed after.

Needs root and `make control-plane`. Run: .venv/bin/python bench/apiserver.py [--nodes 1000] [--pods 1000] [--idle 60]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cluster_common import api_client, cpu_seconds, lab_cluster, pids, request_totals, rss_mib, table
from kubernetes import client, watch

KUBECTL = Path(sys.executable).parent / "kubectl"


def timed(label: str, fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    table([(label, f"{time.perf_counter() - start:8.3f} s")])
    return result


def memory(entry: dict, when: str) -> dict[str, float]:
    rss = {c: rss_mib(p) for c, p in pids(entry).items()}
    table([(f"RSS {c} {when}", f"{mib:8.1f} MiB") for c, mib in rss.items()])
    table([(f"RSS kube-apiserver + etcd {when}", f"{rss['kube-apiserver'] + rss['etcd']:8.1f} MiB")])
    return rss


def wait_ready(v1: client.CoreV1Api, count: int, timeout: float = 300.0) -> float:
    """Seconds until `count` nodes are Ready (KWOK posted them Ready; nothing marked them otherwise)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        nodes = json.loads(v1.list_node(_preload_content=False).data)["items"]
        ready = sum(
            any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions") or [])
            for n in nodes
        )
        if ready >= count:
            return time.monotonic() - start
        time.sleep(1)
    raise SystemExit(f"only {ready} of {count} nodes Ready after {timeout} s")


def settle(api: client.ApiClient, timeout: float = 300.0, window: float = 5.0) -> float:
    """Seconds until the cluster is idle: a `window` in which the API server took no writes but Lease renewals and
    node status patches, a kubelet's heartbeats (KWOK's: every 10 min per node, jittered), so the controllers are
    done registering the nodes (podCIDRs, RegisteredNode events, taints)."""
    start = time.monotonic()
    while True:
        before = request_totals(api)
        time.sleep(window)  # one sampling window
        after = request_totals(api)
        busy = {
            k: after[k] - before.get(k, 0)
            for k in after
            if k[0] in ("POST", "PUT", "PATCH", "DELETE")
            and k[1] != "leases"
            and k != ("PATCH", "nodes")
            and after[k] > before.get(k, 0)
        }
        if not busy:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            print(f"  still busy after {timeout} s: {busy}")
            return time.monotonic() - start


def idle_cpu(entry: dict, api: client.ApiClient, window: float) -> dict[str, float]:
    """CPU seconds each component used over `window` seconds of an idle cluster, and the request rate."""
    procs = pids(entry)
    before = {c: cpu_seconds(p) for c, p in procs.items()}
    requests_before = request_totals(api)
    start = time.monotonic()
    time.sleep(window)  # the measurement window itself: nothing to poll for
    elapsed = time.monotonic() - start
    after = {c: cpu_seconds(p) for c, p in procs.items()}
    requests_after = request_totals(api)
    used = {c: after[c] - before[c] for c in procs}
    rows = [
        (
            f"idle CPU {c} over {elapsed:.0f} s",
            f"{used[c]:8.2f} s = {100 * used[c] / elapsed:5.1f} % of a core",
        )
        for c in procs
    ]
    total = sum(used.values())
    rows.append(
        (
            f"idle CPU all components over {elapsed:.0f} s",
            f"{total:8.2f} s = {100 * total / elapsed:5.1f} % of a core ({os.cpu_count()} cores here)",
        )
    )
    delta = {k: requests_after[k] - requests_before.get(k, 0) for k in requests_after}
    busiest = sorted(((v, k) for k, v in delta.items() if v > 0), reverse=True)[:5]
    rows.append(
        (
            f"idle API requests/s (top: {', '.join(f'{k[0]} {k[1]}' for _, k in busiest)})",
            f"{sum(delta.values()) / elapsed:8.1f} /s ({', '.join(f'{v / elapsed:.1f}' for v, _ in busiest)})",
        )
    )
    table(rows)
    return used


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--pods", type=int, default=1000)
    p.add_argument("--idle", type=float, default=60.0, help="seconds of idle cluster to measure CPU over")
    args = p.parse_args()
    out: dict = {"nodes": args.nodes, "pods": args.pods}
    with lab_cluster(args.nodes) as (entry, took), tempfile.TemporaryDirectory() as home:
        table([(f"cluster up + {args.nodes} virtual nodes registered", f"{took:8.1f} s")])
        api = api_client(entry)
        v1 = client.CoreV1Api(api)
        table([(f"all {args.nodes} nodes Ready (after up)", f"{wait_ready(v1, args.nodes):8.1f} s")])
        out["rss_mib_with_nodes"] = memory(entry, f"with {args.nodes} nodes")
        env = {**os.environ, "KUBECONFIG": entry["kubeconfig"], "HOME": home}
        kubectl = [str(KUBECTL), "--cache-dir", f"{home}/kcache"]

        def run_kubectl(*a: str) -> str:
            return subprocess.run([*kubectl, *a], env=env, capture_output=True, text=True, check=True).stdout

        timed("kubectl get nodes (cold discovery cache)", run_kubectl, "get", "nodes")
        timed("kubectl get nodes (warm cache)", run_kubectl, "get", "nodes")
        timed("kubectl get nodes -o wide", run_kubectl, "get", "nodes", "-o", "wide")
        timed("kubectl get nodes -o json", run_kubectl, "get", "nodes", "-o", "json")
        timed("python client list_node", v1.list_node)
        timed(
            "python client list_node (raw JSON, no model objects)",
            lambda: v1.list_node(_preload_content=False).data,
        )

        def watch_all() -> int:
            n = 0
            for ev in watch.Watch().stream(v1.list_node, timeout_seconds=120, deserialize=False):
                n += ev["type"] == "ADDED"
                if n == args.nodes:
                    break
            return n

        timed("watch: all ADDED events delivered (python client)", watch_all)
        table([("cluster settled (no writes but Lease renewals for 5 s)", f"{settle(api):8.1f} s")])
        out["idle_cpu_s"] = idle_cpu(entry, api, args.idle)
        out["idle_window_s"] = args.idle
        if args.pods:
            v1.create_namespace({"metadata": {"name": "bench"}})
            wait_for_account(v1)

            def pod(i: int) -> dict:
                container = {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
                return {"metadata": {"name": f"gpu-{i:04d}"}, "spec": {"containers": [container]}}

            t0 = time.perf_counter()
            for i in range(args.pods):
                v1.create_namespaced_pod("bench", pod(i), _preload_content=False)
            table([(f"create {args.pods} pods (sequential POSTs)", f"{time.perf_counter() - t0:8.3f} s")])
            bound, running, t_bound = set(), set(), None
            for ev in watch.Watch().stream(
                v1.list_namespaced_pod, "bench", timeout_seconds=900, deserialize=False
            ):
                obj = ev["object"]  # a dict: deserialize=False
                if (obj.get("spec") or {}).get("nodeName"):
                    bound.add(obj["metadata"]["name"])
                    if len(bound) == args.pods and t_bound is None:
                        t_bound = time.perf_counter() - t0
                if (obj.get("status") or {}).get("phase") == "Running":
                    running.add(obj["metadata"]["name"])
                if len(running) == args.pods:
                    break
            t_running = time.perf_counter() - t0
            table(
                [
                    (f"first create -> all {args.pods} pods bound", f"{t_bound or float('nan'):8.3f} s"),
                    (
                        f"first create -> all {args.pods} pods Running ({len(running)} seen)",
                        f"{t_running:8.3f} s",
                    ),
                ]
            )
            per_node: dict[str, int] = {}
            for item in json.loads(v1.list_namespaced_pod("bench", _preload_content=False).data)["items"]:
                node = item["spec"].get("nodeName")
                per_node[node] = per_node.get(node, 0) + 1
            table([("nodes used / max pods on one node", f"{len(per_node):5d} / {max(per_node.values())}")])
            out["rss_mib_after_pods"] = memory(entry, f"after {args.pods} pods")
        api.close()
    print(json.dumps(out))
    return 0


def wait_for_account(v1: client.CoreV1Api, timeout: float = 60.0) -> None:
    """The ServiceAccount admission refuses pods until the controller-manager made the namespace's default one."""
    deadline = time.monotonic() + timeout
    while not v1.list_namespaced_service_account("bench").items:
        if time.monotonic() > deadline:
            raise SystemExit("no default ServiceAccount in namespace bench")
        time.sleep(0.2)


if __name__ == "__main__":
    raise SystemExit(main())
