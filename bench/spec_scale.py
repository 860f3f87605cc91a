"""How the fleet spec scales: load + validate + derive every expectation for N nodes.

Prints seconds and the per-node cost for 10, 100 and 1000 nodes; the ratio between sizes shows whether the work
grows linearly. Run: .venv/bin/python bench/spec_scale.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from gpuready.spec import load_fleet

REPO = Path(__file__).resolve().parents[1]
POOLS = [
    {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "nvswitch": True},
    {
        "gpu_model": "NVIDIA A100-SXM4-80GB",
        "gpu_count": 4,
        "gpu_sharing": "mig",
        "mig_layout": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
    },
    {"gpu_model": "NVIDIA L4", "gpu_count": 1, "gpu_sharing": "time-slicing", "sharing_replicas": 4},
]
JOIN = {
    "kube_api_endpoint": "10.0.0.1:6443",
    "kube_ca_cert_hash": "sha256:" + "ab" * 32,
    "kube_join_token_file": "/etc/gpuready/token",
}


def measure(n: int, workdir: Path) -> float:
    (workdir / "group_data").mkdir(exist_ok=True)
    shutil.copy(REPO / "inventory" / "group_data" / "all.py", workdir / "group_data" / "all.py")
    hosts = [(f"node-{i}", {**POOLS[i % 3], **JOIN}) for i in range(n)]
    inv = workdir / f"inv{n}.py"
    inv.write_text(f"nodes = {hosts!r}\n")
    start = time.perf_counter()
    fleet = load_fleet(inv)
    for node in fleet.nodes.values():
        node.expected_allocatable, node.expected_labels, node.device_plugin_config  # noqa: B018
    fleet.device_plugin_configs()
    return time.perf_counter() - start


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        results = {n: measure(n, Path(tmp)) for n in (10, 100, 1000)}
    for n, seconds in results.items():
        print(f"{n:>5} nodes: {seconds:7.3f} s  ({seconds / n * 1000:6.2f} ms/node)")
    print(f"ratio 1000/100 nodes: {results[1000] / results[100]:.1f}x (linear = 10x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
