"""Rolling driver and toolkit upgrade: per batch, cordon, drain, upgrade, reboot if needed, validate, uncordon.

pyinfra runs one operation on all hosts before the next. Batches are made from that: every host calls the batch
gate of every batch (:func:`gpuready.deploy.upgrade.operations.batch_started`), so a batch's operations depend on the
previous batch's, and only the batch's own hosts get the upgrade operations. A node that fails stays cordoned;
the later batches' gates see it and do not start.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import gevent
from gevent.lock import Semaphore
from pyinfra import host, logger
from pyinfra.api import OperationError, State, deploy
from pyinfra.api.facts import get_fact
from pyinfra.api.state import BaseStateCallback, StateStage
from pyinfra.context import ctx_config, ctx_host, ctx_state
from pyinfra.facts.deb import DebPackages
from pyinfra.operations import systemd

from gpuready.deploy import upgrade
from gpuready.deploy.context import current_node, fleet_for, inventory_path
from gpuready.deploy.facts.nvidia import NvidiaSmi
from gpuready.deploy.operations import host as host_ops
from gpuready.deploy.operations.cluster_objects import cluster
from gpuready.deploy.tasks.driver import nvidia_driver
from gpuready.deploy.tasks.toolkit import container_toolkit
from gpuready.deploy.upgrade import maintenance
from gpuready.deploy.upgrade import operations as upgrade_ops
from gpuready.spec import UpgradePolicy, knobs

_CACHE_ATTR = "_gpuready_upgrade_plan"
# pyinfra loads the deploy file for all hosts at once (one greenlet each): the first computes the plan, the
# others wait for it instead of gathering the same facts again
_PLAN_LOCK = Semaphore()
REPORTS = Path("reports") / "upgrade"
VALIDATE = "Validate and uncordon"  # the operation whose success means the node is upgraded and back


@dataclass(frozen=True)
class UpgradePlan:
    nodes: list[str]  # this run's nodes (pyinfra's active hosts), in inventory order
    work: dict[str, upgrade.NodeWork]
    batches: list[list[str]]
    policy: UpgradePolicy
    kubeconfig: str | None


def upgrade_plan() -> UpgradePlan:
    """Decided once per run, from every host's packages and nvidia-smi (gathered in parallel) and one node list."""
    inventory = host.inventory
    with _PLAN_LOCK:
        cached = getattr(inventory, _CACHE_ATTR, None)
        if cached is None:
            cached = _make_plan(inventory)
            setattr(inventory, _CACHE_ATTR, cached)
            if isinstance(cached, UpgradePlan):
                ctx_state.get().add_callback_handler(RunSummary(cached))
    if isinstance(cached, Exception):  # reported once per host would be noise; the deploy file stops on it
        raise cached
    return cached


def _make_plan(inventory) -> UpgradePlan | Exception:
    fleet = fleet_for(inventory)
    active = {h.name for h in inventory.get_active_hosts()}
    specs = [spec for name, spec in fleet.nodes.items() if name in active]
    first = specs[0]
    kubeconfig = first.knobs["kubeconfig"]
    try:
        views = maintenance.read_nodes(cluster(kubeconfig, None))
    except OperationError as exc:
        return exc
    facts = _gather_facts(ctx_state.get(), (NvidiaSmi, DebPackages))
    # None: the host stopped answering (preflight refuses it)
    smi = {name: None if None in got else got[0] for name, got in facts.items()}
    packages = {name: got[1] for name, got in facts.items()}
    fleet_views = {s.name: views.get(s.name) or maintenance.NodeView(s.name, exists=False) for s in specs}
    try:
        upgrade.preflight(specs, smi, fleet_views)
    except upgrade.PlanError as exc:
        return exc
    work = {}
    for s in specs:
        state = smi[s.name]
        assert state is not None  # preflight refused every host that stopped answering
        work[s.name] = upgrade.node_work(s, packages[s.name], state, fleet_views[s.name])
    return UpgradePlan(
        nodes=[s.name for s in specs],
        work=work,
        batches=upgrade.batches([s.name for s in specs], work, first.upgrade.batch_size),
        policy=first.upgrade,
        kubeconfig=kubeconfig,
    )


class RunSummary(BaseStateCallback):
    """At the end of the run, what became of every node, printed and written to ``reports/upgrade/summary.json``.

    pyinfra has no end-of-run hook, but it disconnects every host when the run ends, also when it ends because
    every host failed ("No hosts remaining!", e.g. the first batch failing with batches of one). A reboot
    disconnects its host mid-run too: that one happens while the run is executing and some host is still active.
    Not after --dry, a declined prompt or Ctrl-C: nothing ran, or the annotations say where it stopped.
    """

    def __init__(self, plan: UpgradePlan) -> None:
        self.plan = plan
        self.validated: set[str] = set()
        self.reported = False

    def operation_host_success(self, state: State, host: Any, op_hash: str, retry_count: int = 0) -> None:  # type: ignore[override]
        if any(name.endswith(VALIDATE) for name in state.get_op_meta(op_hash).names):
            self.validated.add(host.name)

    def host_disconnect(self, state: State, host: Any) -> None:  # type: ignore[override]
        stage = state.current_stage
        ended = stage == StateStage.Disconnect or (stage == StateStage.Execute and not state.active_hosts)
        if ended and not self.reported:
            self.reported = True
            self.report()

    def report(self) -> None:
        try:
            after = maintenance.read_nodes(cluster(self.plan.kubeconfig, None))
        except Exception as exc:  # the run is over: a summary that cannot be made must not hide its errors
            logger.warning(f"--> Upgrade summary: cannot read the nodes: {exc}")
            return
        rows: dict[str, dict[str, Any]] = {}
        for name in self.plan.nodes:
            view = after.get(name) or maintenance.NodeView(name, exists=False)
            status, detail = upgrade.outcome(self.plan.work[name], view, name in self.validated)
            rows[name] = {"status": status, "detail": detail, "cordoned": view.unschedulable}
        REPORTS.mkdir(parents=True, exist_ok=True)
        (REPORTS / "summary.json").write_text(json.dumps({"nodes": rows}, indent=2) + "\n")
        width = max(len(n) for n in rows)
        logger.info("--> Upgrade summary:")
        for name, row in rows.items():
            colour = {upgrade.UPGRADED: "green", upgrade.SKIPPED: None}.get(row["status"], "red")
            status = click.style(f"{row['status']:<11}", fg=colour)
            logger.info(f"    {name:<{width}}  {status} {row['detail']}")


def _gather_facts(state: State, kinds: tuple[type, ...]) -> dict[str, list[Any]]:
    """Each active host's facts of ``kinds``, the hosts in parallel.

    Not pyinfra's ``get_facts``: that spawns into ``state.pool``, whose every slot holds a greenlet loading this
    deploy file (one per host, pool size = host count), so it would wait forever for a free one. ``fact_pool`` is
    pyinfra's pool of the same size that nothing else uses while deploy files load.
    """

    def one(target: Any) -> list[Any]:
        with ctx_config.use(state.config.copy()), ctx_host.use(target):
            return [get_fact(state, target, kind) for kind in kinds]

    greenlets = {h.name: state.fact_pool.spawn(one, h) for h in state.inventory.get_active_hosts()}
    gevent.joinall(list(greenlets.values()), raise_error=True)
    return {name: g.get() for name, g in greenlets.items()}


@deploy("Upgrade the node", data_defaults=knobs.defaults("deploy"))
def upgrade_node(plan: UpgradePlan, conformance_dir: Path) -> None:
    node = current_node()
    work = plan.work[node.name]
    kc = plan.kubeconfig
    upgrade_ops.cordoned(name="Cordon", node=node.name, kubeconfig=kc)
    upgrade_ops.drained(name="Drain", node=node.name, policy=plan.policy, kubeconfig=kc)
    if work.reboot:  # the driver's own services hold the module; the new one starts with them at boot
        systemd.service(name="Stop nvidia-persistenced", service="nvidia-persistenced", running=False)
        if node.nvswitch:
            systemd.service(name="Stop NVIDIA Fabric Manager", service="nvidia-fabricmanager", running=False)
    upgrade_ops.step(name="Record: upgrading", node=node.name, state=upgrade.UPGRADING, kubeconfig=kc)
    nvidia_driver(reboot_follows=work.reboot)
    container_toolkit()
    if work.reboot:
        upgrade_ops.step(name="Record: rebooting", node=node.name, state=upgrade.REBOOTING, kubeconfig=kc)
        host_ops.rebooted(name="Reboot to load the driver", reboot_timeout=plan.policy.node_ready_timeout)
    report_dir = REPORTS / node.name
    command = upgrade_ops.conformance_command(
        conformance_dir, inventory_path(), node.name, report_dir, kc, host.inventory.get_override_data()
    )
    upgrade_ops.validated(
        name=VALIDATE,
        node=node.name,
        policy=plan.policy,
        conformance=command,
        report_dir=str(report_dir),
        kubeconfig=kc,
        addons_namespace=host.data.get("addons_namespace", knobs.KNOBS["addons_namespace"].default),
        resources=list(node.expected_allocatable),
    )


def _say(message: str) -> None:
    logger.info(f"{host.print_prefix}{message}")


@deploy("Rolling upgrade", data_defaults=knobs.defaults("deploy"))
def rolling_upgrade(conformance_dir: Path) -> None:
    plan = upgrade_plan()
    work = plan.work[host.name]
    # The plan is printed without -v (unlike host.noop): which nodes go out of service, and why, is what the
    # user must see before anything is cordoned.
    if not plan.batches:
        _say("driver and toolkit at the pinned versions on every node: nothing to upgrade")
        return
    if work.needed:
        number = next(i for i, batch in enumerate(plan.batches, start=1) if host.name in batch)
        _say(f"batch {number}/{len(plan.batches)}: {'; '.join(work.reasons)}")
    else:
        _say("at the pinned driver and toolkit: skipped, not cordoned")
    earlier: list[str] = []
    for number, batch in enumerate(host.loop(plan.batches), start=1):
        upgrade_ops.batch_started(
            name=f"Batch {number}/{len(plan.batches)}: {', '.join(batch)}",
            batch=batch,
            earlier=list(earlier),
            fleet=plan.nodes,
            max_unavailable=plan.policy.max_unavailable,
            kubeconfig=plan.kubeconfig,
        )
        if host.name in batch:
            # pyinfra types a @deploy as its operations' global arguments, not the function's own
            upgrade_node(plan, conformance_dir)  # type: ignore[call-arg,arg-type]
        earlier.extend(batch)
