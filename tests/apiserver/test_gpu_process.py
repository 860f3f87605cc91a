"""`python -m gpuready.lab.apiserver --lab-state DIR`: lab hosts and virtual nodes get GPU behaviour."""

from __future__ import annotations

import functools
import json
import signal
import subprocess
import sys
from pathlib import Path

from kubernetes import client, config

from gpuready import addons
from gpuready.lab.apiserver.gpu import lab_host_views
from gpuready.lab.apiserver.virtual import node_object

from .conftest import wait_for
from .test_gpu_cluster import CONFIGS, deploy_addons, make_host

wait = functools.partial(wait_for, timeout=30.0)  # generous: the suite shares a small machine


def test_lab_state_hosts_and_virtual_nodes(tmp_path: Path) -> None:
    lab = tmp_path / "lab"
    make_host(lab / "hosts", "gpu-host-a", "l4-1")
    (lab / "state.json").write_text(json.dumps({"version": 1, "hosts": {"gpu-host-a": {"index": 0}}}))
    assert [(v.name, v.root) for v in lab_host_views(lab)] == [
        ("gpu-host-a", lab / "hosts/gpu-host-a/merged")
    ]
    state = tmp_path / "state"
    proc = subprocess.Popen([sys.executable, "-m", "gpuready.lab.apiserver", "--state-dir", str(state),
                             "--lab-state", str(lab), "--virtual-nodes", "1", "--node-grace-period", "120"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait(lambda: (state / "apiserver.json").exists() and proc.stdout.readline(), what="serving line")
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(state / "kubeconfig"), client_configuration=cfg)
        with client.ApiClient(cfg) as api:
            v1 = client.CoreV1Api(api)
            # the host's kubelet registers its Node (what the lab's kubelet service does)
            labels = {"nvidia.com/gpu.present": "true", addons.DEVICE_PLUGIN_CONFIG_LABEL: "ts4"}
            v1.create_node(node_object("gpu-host-a", "cpu", 7, labels))
            deploy_addons(api, configs={**CONFIGS, "default": CONFIGS["none"]})

            def allocatable(name: str) -> str | None:
                return v1.read_node(name).status.allocatable.get("nvidia.com/gpu")

            wait(lambda: allocatable("gpu-host-a") == "4", timeout=20, what="L4 x 4 replicas on the lab host")
            wait(lambda: allocatable("virt-node-0000") == "8", timeout=20, what="virtual H100 node")
            count = wait(lambda: v1.read_node("virt-node-0000").metadata.labels.get("nvidia.com/gpu.count"))
            assert count == "8"
            product = wait(lambda: v1.read_node("gpu-host-a").metadata.labels.get("nvidia.com/gpu.product"))
            assert product == "NVIDIA-L4-SHARED"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
