"""Fixtures: the test run's real control plane (tests/conftest.py: kubeadm-made, in the lab's network namespace),
and the cached binaries for the tests that start a second one on 127.0.0.1.

They need root (kubeadm's ``--rootfs`` chroot) and the binaries in the lab cache (``make control-plane``);
without them every test here is skipped with the reason (shown by -ra).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuready.lab import network
from gpuready.lab.cluster.binaries import KubeBinaries, cached_etcd, cached_kube

VERSION = "1.36.3"
ETC_KUBERNETES = Path("/etc/kubernetes")

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def kubectl_path() -> str | None:
    venv = Path(sys.executable).parent / "kubectl"
    return str(venv) if venv.exists() else shutil.which("kubectl")


def binaries() -> tuple[KubeBinaries, Path]:
    """The cached binaries, or skip with what is missing and how to get it."""
    if os.geteuid() != 0:
        pytest.skip(f"the real control plane needs root for kubeadm --rootfs (running as uid {os.geteuid()})")
    kube, etcd = cached_kube(VERSION), cached_etcd()
    if kube is None:
        pytest.skip(
            f"Kubernetes v{VERSION} is not in the lab cache: gpuready.lab.cluster.binaries.build_kube builds it"
        )
    if etcd is None:
        pytest.skip("etcd is not in the lab cache: gpuready.lab.cluster.binaries.ensure_etcd builds it")
    return kube, etcd


def etc_kubernetes() -> list[str] | None:
    """What the machine's /etc/kubernetes holds (None: there is none), to prove the control plane leaves it be."""
    if not ETC_KUBERNETES.exists():
        return None
    return sorted(str(p.relative_to(ETC_KUBERNETES)) for p in ETC_KUBERNETES.rglob("*"))


@pytest.fixture(scope="session")
def etc_before() -> list[str] | None:
    return etc_kubernetes()


@pytest.fixture(scope="session")
def control_plane(lab_cluster: Any, etc_before: list[str] | None) -> dict[str, Any]:
    """The test run's lab cluster (tests/conftest.py): its control plane's state entry."""
    return lab_cluster.entry


@pytest.fixture
def own_network(tmp_path: Path) -> Iterator[network.LabNetwork]:
    """A lab network namespace of the test's own (another subnet than the session lab's), removed afterwards."""
    net = network.plan(tmp_path / "net")
    network.ensure(net)
    try:
        yield net
    finally:
        network.destroy(net.netns, net.root_veth, net.subnet)
