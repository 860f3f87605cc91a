"""The rolling upgrade's cluster-side operations (drain, validate) against the API simulator: what a failure leaves.

The operations' commands are run as pyinfra runs them (the function of the FunctionCommand they yield, with the
state and host), with a stand-in host that records what pyinfra would print.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gpuready import kube, maintenance, upgrade
from gpuready.facts.host import BootId
from gpuready.lab.apiserver import ApiServer
from gpuready.operations import upgrade as upgrade_ops
from gpuready.spec import UpgradePolicy

from .test_maintenance import NODE, pod


class Host:
    """What the operations use of a pyinfra host: its name, print prefix, errors it logs, and its boot id fact."""

    def __init__(self, boot_id: str) -> None:
        self.name = NODE
        self.print_prefix = f"[{NODE}] "
        self.errors: list[str] = []
        self._boot_id = boot_id

    def log_styled(self, message: str, **_kw: Any) -> None:
        self.errors.append(message)

    def get_fact(self, fact: type) -> str:
        assert fact is BootId
        return self._boot_id


def run(generator: Any, host: Host) -> bool:
    (command,) = list(generator)
    return command.function(None, host)


def test_a_drain_that_cannot_finish_leaves_the_node_failed_with_the_reason(sim: ApiServer) -> None:
    cluster = kube.connect(str(sim.kubeconfig_path))
    cluster.core.create_namespaced_pod("default", pod("notebook", gpus=1))  # no controller: refused
    maintenance.cordon(cluster, NODE, upgrade.CORDONED)
    host = Host(boot_id="")
    ok = run(upgrade_ops.drained._inner(node=NODE, policy=UpgradePolicy(), kubeconfig=str(sim.kubeconfig_path)),
             host)  # fmt: skip
    view = maintenance.read_node(cluster, NODE)
    assert not ok and view.unschedulable and view.upgrade_state == upgrade.FAILED
    assert "default/notebook have no controller" in view.annotations[maintenance.FAILURE_ANNOTATION]
    assert host.errors == [f"{view.annotations[maintenance.FAILURE_ANNOTATION]}; the node stays cordoned"]


def test_validation_never_reads_an_earlier_runs_verdict(sim: ApiServer, tmp_path: Path) -> None:
    cluster = kube.connect(str(sim.kubeconfig_path))
    maintenance.cordon(cluster, NODE, upgrade.REBOOTING)
    report_dir = tmp_path / NODE
    report_dir.mkdir()
    stale = {
        "nodes": {
            NODE: {"layers": {"gpu": {"checks": {"test_xid": {"status": "fail", "message": "Xid 79"}}}}}
        }
    }
    (report_dir / "verdict.json").write_text(json.dumps(stale))  # from the run before the fix
    crashing_suite = [sys.executable, "-c", "import sys; print('collection error'); sys.exit(3)"]
    host = Host(boot_id=maintenance.read_node(cluster, NODE).boot_id)
    ok = run(upgrade_ops.validated._inner(node=NODE, policy=UpgradePolicy(node_ready_timeout=5),
                                          conformance=crashing_suite, report_dir=str(report_dir),
                                          kubeconfig=str(sim.kubeconfig_path)), host)  # fmt: skip
    view = maintenance.read_node(cluster, NODE)
    assert not ok and view.unschedulable and view.upgrade_state == upgrade.FAILED
    assert view.annotations[maintenance.FAILURE_ANNOTATION] == (
        f"conformance exited 3 without a verdict for {NODE}: collection error"
    )


def test_a_passing_validation_uncordons(sim: ApiServer, tmp_path: Path) -> None:
    cluster = kube.connect(str(sim.kubeconfig_path))
    maintenance.cordon(cluster, NODE, upgrade.REBOOTING)
    report_dir = tmp_path / NODE
    verdict = json.dumps({"nodes": {NODE: {"layers": {"gpu": {"checks": {"test_x": {"status": "pass"}}}}}}})
    suite = [sys.executable, "-c", f"import pathlib; p = pathlib.Path({str(report_dir)!r}); "
             f"p.mkdir(exist_ok=True); (p / 'verdict.json').write_text({verdict!r})"]  # fmt: skip
    host = Host(boot_id=maintenance.read_node(cluster, NODE).boot_id)
    ok = run(upgrade_ops.validated._inner(node=NODE, policy=UpgradePolicy(node_ready_timeout=5),
                                          conformance=suite, report_dir=str(report_dir),
                                          kubeconfig=str(sim.kubeconfig_path)), host)  # fmt: skip
    view = maintenance.read_node(cluster, NODE)
    assert ok and host.errors == []
    assert (view.unschedulable, view.upgrade_state) == (False, upgrade.DONE)
