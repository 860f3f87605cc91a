"""The conformance suite's node layer on N virtual nodes of the API simulator: wall time and API requests/node.

Usage: .venv/bin/python bench/conformance_scale.py [--nodes 1000]
Goal (issue 7): under 60 s for 1000 nodes, API requests growing linearly, at most 3 per node. Requests are
counted at the Kubernetes client's REST layer (every HTTP request the suite makes, the connect check included).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import pytest
from kubernetes.client import rest

from gpuready.lab.apiserver import ApiServer

REPO = Path(__file__).resolve().parents[1]
JOIN = {"kube_api_endpoint": "10.0.0.1:6443", "kube_ca_cert_hash": "sha256:" + "ab" * 32,
        "kube_join_token_file": "/nonexistent/token"}  # fmt: skip


def converge(sim: ApiServer, names: list[str], timeout: float = 600.0) -> None:
    """Give the virtual nodes lab GPU backends, join labels and taint, and deploy gpuready's add-ons on them."""
    from gpuready import addons
    from gpuready.lab.apiserver.gpu import attach_virtual

    def join(node: dict) -> None:
        node["metadata"]["labels"]["nvidia.com/device-plugin.config"] = "default"
        node["spec"]["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]

    for name in names:
        sim.store.modify("nodes", "", name, join)
    attach_virtual(sim, names, "dgx-h100")
    settings = addons.AddonSettings()
    ns = settings.namespace
    sim.create_internal("namespaces", {"metadata": {"name": ns}})
    sim.create_internal("runtimeclasses.node.k8s.io", addons.runtime_class())
    config = "version: v1\nflags:\n  migStrategy: none\n"
    sim.create_internal("configmaps", {"metadata": {"name": addons.DEVICE_PLUGIN_CONFIGMAP, "namespace": ns},
                                       "data": {"default": config}})  # fmt: skip
    sim.create_internal("serviceaccounts", {"metadata": {"name": "nvidia-device-plugin", "namespace": ns}})
    exporter, _service = addons.dcgm_exporter(settings)
    for ds in (addons.device_plugin(settings), addons.gpu_feature_discovery(settings), exporter):
        ds["spec"]["template"]["spec"]["runtimeClassName"] = "nvidia"
        sim.create_internal("daemonsets.apps", ds)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = sim.store.list("pods", ns)[0]
        ready = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")
        if ready >= 3 * len(names):
            return
        time.sleep(0.5)
    raise SystemExit(f"add-ons not running on every virtual node after {timeout} s ({ready} pods running)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sim = ApiServer(root / "state", node_grace_period=600.0, node_monitor_period=30.0)
        sim.start()
        try:
            names = sim.add_virtual_nodes(args.nodes, "dgx-h100")
            setup = time.monotonic()
            converge(sim, names)
            print(f"{args.nodes} virtual GPU nodes converged (device plugin, GFD, dcgm-exporter) in "
                  f"{time.monotonic() - setup:.1f} s", flush=True)  # fmt: skip
            data = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "nvswitch": True, **JOIN}
            (root / "group_data").mkdir()
            (root / "group_data" / "all.py").write_text((REPO / "inventory/group_data/all.py").read_text())
            inventory = root / "inventory.py"
            inventory.write_text(f"gpu_nodes = ({[(n, data) for n in names]!r}, {{}})\n")
            count = {"n": 0}
            original = rest.RESTClientObject.request

            def counting(self, *a, **kw):
                count["n"] += 1
                return original(self, *a, **kw)

            rest.RESTClientObject.request = counting
            start = time.monotonic()
            code = pytest.main([str(REPO / "conformance"), "-m", "node", "-q", "-p", "no:cacheprovider", "--tb=line",
                                "--inventory", str(inventory), "--kubeconfig", str(sim.kubeconfig_path),
                                "--report-dir", str(root / "report"), "--no-header", "-o", "console_output_style=classic"])  # fmt: skip
            wall = time.monotonic() - start
            rest.RESTClientObject.request = original
            verdict = json.loads((root / "report" / "verdict.json").read_text())
            statuses: dict[str, int] = {}
            for node in verdict["nodes"].values():
                for check in node["layers"]["node"]["checks"].values():
                    statuses[check["status"]] = statuses.get(check["status"], 0) + 1
        finally:
            sim.stop()
    print(f"\nnode layer on {args.nodes} virtual nodes: {wall:.1f} s wall (pytest exit {int(code)}), "
          f"{count['n']} API requests = {count['n'] / args.nodes:.3f} per node; check outcomes {statuses}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
