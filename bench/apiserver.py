"""The API-server simulator at fleet scale: 1000 virtual GPU nodes, 1000 GPU pods.

Prints: time to list the nodes (kubectl table, kubectl -o json, the Python client), time until a watch has
delivered every ADDED event, time to create and to schedule 1000 pods each asking for 1 nvidia.com/gpu (and until
all run), and the simulator's RSS before and after. The simulator runs as its own process, as in the lab.
Run: .venv/bin/python bench/apiserver.py [--nodes 1000] [--pods 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kubernetes import client, config, watch

KUBECTL = Path(sys.executable).parent / "kubectl"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def timed(label: str, fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    print(f"{label:<58} {time.perf_counter() - start:8.3f} s", flush=True)
    return result


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--pods", type=int, default=1000)
    args = p.parse_args()
    state = Path(tempfile.mkdtemp(prefix="gpuready-apiserver-bench-"))
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "gpuready.lab.apiserver", "--state-dir", str(state),
                             "--virtual-nodes", str(args.nodes)], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # "serving ..." once the virtual nodes exist
        print(
            f"{'simulator start + ' + str(args.nodes) + ' virtual nodes':<58} {time.perf_counter() - start:8.3f} s"
        )
        print(f"{'simulator RSS with nodes':<58} {rss_mib(proc.pid):8.1f} MiB")
        kubeconfig = str(state / "kubeconfig")
        env = {**os.environ, "KUBECONFIG": kubeconfig, "HOME": str(state)}
        kubectl = [str(KUBECTL), "--cache-dir", str(state / "kcache")]

        def run_kubectl(*a: str) -> str:
            return subprocess.run([*kubectl, *a], env=env, capture_output=True, text=True, check=True).stdout

        out = timed("kubectl get nodes (cold discovery cache)", run_kubectl, "get", "nodes")
        assert len(out.splitlines()) == args.nodes + 1
        timed("kubectl get nodes (warm cache)", run_kubectl, "get", "nodes")
        timed("kubectl get nodes -o wide", run_kubectl, "get", "nodes", "-o", "wide")
        timed("kubectl get nodes -o json", run_kubectl, "get", "nodes", "-o", "json")
        cfg = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        api = client.ApiClient(cfg)
        v1 = client.CoreV1Api(api)
        nodes = timed("python client list_node", v1.list_node)
        assert len(nodes.items) == args.nodes
        timed("python client list_node (raw JSON, no model objects)",
              lambda: v1.list_node(_preload_content=False).data)  # fmt: skip

        def watch_all() -> int:
            n = 0
            for ev in watch.Watch().stream(v1.list_node, timeout_seconds=120, _preload_content=False):
                n += ev["type"] == "ADDED"
                if n == args.nodes:
                    break
            return n

        assert timed("watch: all ADDED events delivered (python client)", watch_all) == args.nodes
        v1.create_namespace({"metadata": {"name": "bench"}})

        def pod(i: int) -> dict:
            container = {"name": "c", "image": "registry.k8s.io/pause:3.10",
                         "resources": {"limits": {"nvidia.com/gpu": "1"}}}  # fmt: skip
            return {"metadata": {"name": f"gpu-{i:04d}"}, "spec": {"containers": [container]}}

        w = watch.Watch()
        t0 = time.perf_counter()
        for i in range(args.pods):
            v1.create_namespaced_pod("bench", pod(i), _preload_content=False)
        created = time.perf_counter() - t0
        print(f"{f'create {args.pods} pods (sequential POSTs)':<58} {created:8.3f} s")
        bound, running = set(), set()
        for ev in w.stream(v1.list_namespaced_pod, "bench", timeout_seconds=600):
            obj = ev["object"]
            if obj.spec.node_name:
                bound.add(obj.metadata.name)
                if len(bound) == args.pods and "t_bound" not in locals():
                    t_bound = time.perf_counter() - t0
            if obj.status.phase == "Running":
                running.add(obj.metadata.name)
            if len(running) == args.pods:
                break
        t_running = time.perf_counter() - t0
        print(f"{f'first create -> all {args.pods} pods bound':<58} {t_bound:8.3f} s")
        print(f"{f'first create -> all {args.pods} pods Running':<58} {t_running:8.3f} s")
        per_node = {}
        for p_ in v1.list_namespaced_pod("bench").items:
            per_node[p_.spec.node_name] = per_node.get(p_.spec.node_name, 0) + 1
        print(f"{'nodes used / max pods on one node':<58} {len(per_node):5d} / {max(per_node.values())}")
        print(f"{'simulator RSS after pods':<58} {rss_mib(proc.pid):8.1f} MiB")
        print(json.dumps({"nodes": args.nodes, "pods": args.pods}))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
