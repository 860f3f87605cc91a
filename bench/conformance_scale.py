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
            for name in names:
                sim.store.modify("nodes", "", name, lambda n: n["metadata"]["labels"].update(
                    {"nvidia.com/device-plugin.config": "default"}))  # fmt: skip
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
            code = pytest.main([str(REPO / "conformance"), "-m", "node", "-q", "-p", "no:cacheprovider",
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
