"""deploys/cluster_addons.py with a kubeconfig pointing at an unreachable API server fails fast with a clear message
(the real pyinfra CLI, on @local)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYINFRA = Path(sys.executable).with_name("pyinfra")


def test_unreachable_api_server_stops_the_addons_deploy(tmp_path):
    shutil.copytree(REPO / "inventory" / "group_data", tmp_path / "group_data")
    shutil.copy(REPO / "config.py", tmp_path / "config.py")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    data = {"gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": False}
    fleet = {"kubeconfig": str(kubeconfig)}  # fleet-wide: group data, never one host's
    (tmp_path / "inv.py").write_text(f"nodes = ([('@local', {data!r})], {fleet!r})\n")
    result = subprocess.run(
        [str(PYINFRA), "-y", "inv.py", str(REPO / "deploys" / "cluster_addons.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "gpuready: cannot reach the Kubernetes API at https://127.0.0.1:1" in result.stderr
    assert f"(kubeconfig: {kubeconfig})" in result.stderr
    assert "Starting operation" not in result.stderr
