"""Pod/service proxy dispatch to in-process handlers, and the `python -m gpuready.lab.apiserver` process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from gpuready.lab.apiserver import NodeBackend, ProxyResponse

from .conftest import KUBECTL, pod_phase, wait_for


def _exporter_pod(name: str, app: str = "exporter") -> dict:
    return {"metadata": {"name": name, "labels": {"app": app}}, "spec": {"containers": [
        {"name": "c", "image": "registry.k8s.io/pause:3.10", "ports": [{"name": "metrics", "containerPort": 9400}]}]}}  # fmt: skip


def test_pod_proxy_without_listener_is_503(api, sim) -> None:
    v1 = client.CoreV1Api(api)
    v1.create_namespaced_pod("default", _exporter_pod("exp"))
    wait_for(lambda: pod_phase(sim, "exp") == "Running", what="exp Running")
    with pytest.raises(ApiException) as exc:
        v1.connect_get_namespaced_pod_proxy_with_path("exp:9400", "default", "metrics")
    body = json.loads(exc.value.body)
    assert (exc.value.status, body["reason"]) == (503, "ServiceUnavailable")
    ip = sim.store.get("pods", "default", "exp")["status"]["podIP"]
    assert (
        body["message"] == f"error trying to reach service: dial tcp {ip}:9400: connect: connection refused"
    )


def test_registered_handler_and_backend_proxy(api, sim, kubectl) -> None:
    v1 = client.CoreV1Api(api)
    calls = []

    def handler(method: str, path: str, query: str, body: bytes) -> ProxyResponse:
        calls.append((method, path, query))
        return ProxyResponse(200, b"DCGM_FI_DEV_GPU_UTIL 0\n")

    v1.create_namespaced_pod("default", _exporter_pod("exp"))
    wait_for(lambda: pod_phase(sim, "exp") == "Running", what="exp Running")
    sim.register_proxy("default", "exp", "9400", handler)
    out = v1.connect_get_namespaced_pod_proxy_with_path("exp:9400", "default", "metrics")
    assert out == "DCGM_FI_DEV_GPU_UTIL 0\n"
    assert calls == [("GET", "/metrics", "")]
    raw = kubectl("get", "--raw", "/api/v1/namespaces/default/pods/exp:9400/proxy/metrics?x=1").stdout
    assert raw == "DCGM_FI_DEV_GPU_UTIL 0\n" and calls[-1] == ("GET", "/metrics", "x=1")

    class Backend(NodeBackend):
        def proxy(self, pod, port, method, path, query, body):
            return ProxyResponse(200, f"{pod['metadata']['name']}:{port}{path}".encode())

    node = sim.store.get("pods", "default", "exp")["spec"]["nodeName"]
    sim.set_backend(node, Backend())
    exp2 = _exporter_pod("exp2", app="exporter2")
    exp2["spec"]["nodeName"] = node
    v1.create_namespaced_pod("default", exp2)
    wait_for(lambda: pod_phase(sim, "exp2") == "Running", what="exp2 Running")
    v1.create_namespaced_service("default", {"metadata": {"name": "dcgm"}, "spec": {
        "selector": {"app": "exporter2"}, "ports": [{"name": "metrics", "port": 80, "targetPort": "metrics"}]}})  # fmt: skip
    via_service = v1.connect_get_namespaced_service_proxy_with_path("dcgm:metrics", "default", "metrics")
    assert via_service == "exp2:9400/metrics"  # service port name -> targetPort name -> containerPort


def test_process_writes_files_and_stops_on_sigterm(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = subprocess.Popen([sys.executable, "-m", "gpuready.lab.apiserver", "--state-dir", str(state), "--port", "0",
                             "--virtual-nodes", "2", "--virtual-profile", "a100-pcie-4"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        info_path = state / "apiserver.json"
        wait_for(info_path.exists, timeout=20, what="apiserver.json")
        info = json.loads(info_path.read_text())
        assert info["pid"] == proc.pid
        assert info["url"].startswith("https://127.0.0.1:")
        assert Path(info["ca"]).read_text().startswith("-----BEGIN CERTIFICATE-----")
        kubeconfig = yaml.safe_load((state / "kubeconfig").read_text())
        assert kubeconfig["clusters"][0]["cluster"]["server"] == info["url"]
        assert kubeconfig["users"][0]["user"]["token"]
        if KUBECTL.exists():
            env = {"KUBECONFIG": str(state / "kubeconfig"), "HOME": str(tmp_path)}

            def two_nodes() -> list[str] | None:
                out = subprocess.run([str(KUBECTL), "get", "nodes", "-o", "name"], env=env, capture_output=True,
                                     text=True, timeout=30).stdout.split()  # fmt: skip
                return out if len(out) == 2 else None

            assert wait_for(two_nodes, timeout=20, what="2 nodes") == [
                "node/virt-node-0000",
                "node/virt-node-0001",
            ]
    finally:
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        code = proc.wait(timeout=20)
    assert code == 0
    assert time.monotonic() - started < 20
