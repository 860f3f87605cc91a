"""The rolling upgrade's cluster-side operations (drain, validate) against the real control plane: what a failure
leaves.

The operations' commands are run as pyinfra runs them (the function of the FunctionCommand they yield, with the
state and host), with a stand-in host that records what pyinfra would print.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuready import kube
from gpuready.deploy import upgrade
from gpuready.deploy.facts.host import BootId, BootTime
from gpuready.deploy.upgrade import maintenance
from gpuready.deploy.upgrade import operations as upgrade_ops
from gpuready.spec import UpgradePolicy

from .test_maintenance import bare_pod, replicaset, running_on, wait_running


class Host:
    """What the operations use of a pyinfra host: its name, print prefix, errors it logs, and its boot id fact."""

    def __init__(self, node: str, boot_id: str) -> None:
        self.name = node
        self.print_prefix = f"[{node}] "
        self.errors: list[str] = []
        self._boot_id = boot_id

    def log_styled(self, message: str, **_kw: Any) -> None:
        self.errors.append(message)

    def get_fact(self, fact: type) -> str | None:
        assert fact in (BootId, BootTime)
        return (
            self._boot_id if fact is BootId else None
        )  # boot time unknown: the pods' statuses are taken as read


def run(generator: Any, host: Host) -> bool:
    (command,) = list(generator)
    return command.function(None, host)


@pytest.fixture
def kubeconfig(lab_cluster: Any) -> str:
    return str(lab_cluster.kubeconfig)


@pytest.fixture
def node(virtual_nodes: Callable[..., list[str]]) -> str:
    return virtual_nodes(1)[0]


def test_a_drain_that_cannot_finish_leaves_the_node_failed_with_the_reason(
    kubeconfig: str, node: str, namespace: str
) -> None:
    cluster = kube.connect(kubeconfig)
    bare_pod(cluster, namespace, "notebook", node, gpus=1)  # no controller: refused
    wait_running(cluster, namespace, node, 1)
    maintenance.cordon(cluster, node, upgrade.CORDONED)
    host = Host(node, boot_id="")
    ok = run(upgrade_ops.drained._inner(node=node, policy=UpgradePolicy(), kubeconfig=kubeconfig), host)
    view = maintenance.read_node(cluster, node)
    assert not ok and view.unschedulable and view.upgrade_state == upgrade.FAILED
    assert f"{namespace}/notebook have no controller" in view.annotations[maintenance.FAILURE_ANNOTATION]
    assert host.errors == [f"{view.annotations[maintenance.FAILURE_ANNOTATION]}; the node stays cordoned"]
    assert "notebook" in running_on(cluster, node)


def test_a_drain_that_finishes_records_drained(kubeconfig: str, node: str, namespace: str) -> None:
    cluster = kube.connect(kubeconfig)
    replicaset(cluster, namespace, "train", node, gpus=1)
    wait_running(cluster, namespace, node, 1)
    maintenance.cordon(cluster, node, upgrade.CORDONED)
    host = Host(node, boot_id="")
    ok = run(
        upgrade_ops.drained._inner(node=node, policy=UpgradePolicy(drain_timeout=90), kubeconfig=kubeconfig),
        host,
    )
    view = maintenance.read_node(cluster, node)
    assert ok and host.errors == []
    assert (view.unschedulable, view.upgrade_state) == (True, upgrade.DRAINED)
    assert running_on(cluster, node) == {}


def test_validation_never_reads_an_earlier_runs_verdict(kubeconfig: str, node: str, tmp_path: Path) -> None:
    cluster = kube.connect(kubeconfig)
    maintenance.cordon(cluster, node, upgrade.REBOOTING)
    report_dir = tmp_path / node
    report_dir.mkdir()
    stale = {
        "nodes": {
            node: {"layers": {"gpu": {"checks": {"test_xid": {"status": "fail", "message": "Xid 79"}}}}}
        }
    }
    (report_dir / "verdict.json").write_text(json.dumps(stale))  # from the run before the fix
    crashing_suite = [sys.executable, "-c", "import sys; print('collection error'); sys.exit(3)"]
    host = Host(node, boot_id=maintenance.read_node(cluster, node).boot_id)
    ok = run(
        upgrade_ops.validated._inner(
            node=node,
            policy=UpgradePolicy(node_ready_timeout=5),
            conformance=crashing_suite,
            report_dir=str(report_dir),
            kubeconfig=kubeconfig,
        ),
        host,
    )
    view = maintenance.read_node(cluster, node)
    assert not ok and view.unschedulable and view.upgrade_state == upgrade.FAILED
    assert view.annotations[maintenance.FAILURE_ANNOTATION] == (
        f"conformance exited 3 without a verdict for {node}: collection error"
    )


def test_validation_of_a_node_from_an_earlier_boot_fails_without_running_the_suite(
    kubeconfig: str, node: str, tmp_path: Path
) -> None:
    cluster = kube.connect(kubeconfig)
    maintenance.cordon(cluster, node, upgrade.REBOOTING)
    marker = tmp_path / "suite-ran"
    suite = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    host = Host(node, boot_id="a-boot-the-node-never-reported")
    ok = run(
        upgrade_ops.validated._inner(
            node=node,
            policy=UpgradePolicy(node_ready_timeout=2),
            conformance=suite,
            report_dir=str(tmp_path / node),
            kubeconfig=kubeconfig,
        ),
        host,
    )
    view = maintenance.read_node(cluster, node)
    assert not ok and view.unschedulable and view.upgrade_state == upgrade.FAILED
    assert view.annotations[maintenance.FAILURE_ANNOTATION] == (
        f"{node}: not back after 2s: its kubelet still reports boot {view.boot_id}, not this boot "
        "(a-boot-the-node-never-reported)"
    )
    assert not marker.exists()


def test_a_passing_validation_uncordons(kubeconfig: str, node: str, tmp_path: Path) -> None:
    cluster = kube.connect(kubeconfig)
    maintenance.cordon(cluster, node, upgrade.REBOOTING)
    report_dir = tmp_path / node
    verdict = json.dumps({"nodes": {node: {"layers": {"gpu": {"checks": {"test_x": {"status": "pass"}}}}}}})
    suite = [
        sys.executable,
        "-c",
        f"import pathlib; p = pathlib.Path({str(report_dir)!r}); "
        f"p.mkdir(exist_ok=True); (p / 'verdict.json').write_text({verdict!r})",
    ]
    host = Host(node, boot_id=maintenance.read_node(cluster, node).boot_id)
    ok = run(
        upgrade_ops.validated._inner(
            node=node,
            policy=UpgradePolicy(node_ready_timeout=5),
            conformance=suite,
            report_dir=str(report_dir),
            kubeconfig=kubeconfig,
        ),
        host,
    )
    view = maintenance.read_node(cluster, node)
    assert ok and host.errors == []
    assert (view.unschedulable, view.upgrade_state) == (False, upgrade.DONE)
    assert cluster.core.read_node(node).spec.unschedulable is None
