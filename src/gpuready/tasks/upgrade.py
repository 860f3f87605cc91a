"""Rolling driver and toolkit upgrade: per batch, cordon, drain, upgrade, reboot if needed, validate, uncordon.

pyinfra runs one operation on all hosts before the next. Batches are made from that: every host calls the batch
gate of every batch (:func:`gpuready.operations.upgrade.batch_started`), so a batch's operations depend on the
previous batch's, and only the batch's own hosts get the upgrade operations. A node that fails stays cordoned;
the later batches' gates see it and do not start.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gevent
from gevent.lock import Semaphore
from pyinfra import host
from pyinfra.api import OperationError, State, deploy
from pyinfra.api.facts import get_fact
from pyinfra.context import ctx_config, ctx_host, ctx_state
from pyinfra.facts.deb import DebPackages
from pyinfra.operations import systemd

from gpuready import maintenance, upgrade
from gpuready.deploy_context import current_node, fleet_for, inventory_path
from gpuready.facts.nvidia import NvidiaSmi
from gpuready.operations import host as host_ops
from gpuready.operations import upgrade as upgrade_ops
from gpuready.operations.kubernetes import cluster
from gpuready.spec import UpgradePolicy
from gpuready.tasks.driver import nvidia_driver
from gpuready.tasks.toolkit import container_toolkit

_CACHE_ATTR = "_gpuready_upgrade_plan"
# pyinfra loads the deploy file for all hosts at once (one greenlet each): the first computes the plan, the
# others wait for it instead of gathering the same facts again
_PLAN_LOCK = Semaphore()
REPORTS = Path("reports") / "upgrade"


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
    if isinstance(cached, Exception):  # reported once per host would be noise; the deploy file stops on it
        raise cached
    return cached


def _make_plan(inventory) -> UpgradePlan | Exception:
    fleet = fleet_for(inventory)
    active = {h.name for h in inventory.get_active_hosts()}
    specs = [spec for name, spec in fleet.nodes.items() if name in active]
    first = specs[0]
    kubeconfig = first.data.get("kubeconfig")
    try:
        views = maintenance.read_nodes(cluster(kubeconfig, None))
    except OperationError as exc:
        return exc
    facts = _gather_facts(ctx_state.get(), (NvidiaSmi, DebPackages))
    smi = {name: got[0] for name, got in facts.items()}
    packages = {name: got[1] for name, got in facts.items()}
    fleet_views = {s.name: views.get(s.name) or maintenance.NodeView(s.name, exists=False) for s in specs}
    try:
        upgrade.preflight(specs, smi, fleet_views)
    except upgrade.PlanError as exc:
        return exc
    work = {s.name: upgrade.node_work(s, packages[s.name], smi[s.name], fleet_views[s.name]) for s in specs}
    return UpgradePlan(
        nodes=[s.name for s in specs],
        work=work,
        batches=upgrade.batches([s.name for s in specs], work, first.upgrade.effective_batch_size),
        policy=first.upgrade,
        kubeconfig=kubeconfig,
    )


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


@deploy("Upgrade the node")
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
        name="Validate and uncordon",
        node=node.name,
        policy=plan.policy,
        conformance=command,
        report_dir=str(report_dir),
        kubeconfig=kc,
    )


@deploy("Rolling upgrade")
def rolling_upgrade(conformance_dir: Path) -> None:
    plan = upgrade_plan()
    work = plan.work[host.name]
    if not plan.batches:
        host.noop("driver and toolkit at the pinned versions on every node: nothing to upgrade")
        return
    if work.needed:
        number = next(i for i, batch in enumerate(plan.batches, start=1) if host.name in batch)
        host.noop(f"batch {number}/{len(plan.batches)}: {'; '.join(work.reasons)}")
    else:
        host.noop("at the pinned driver and toolkit: skipped, not cordoned")
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
            upgrade_node(plan, conformance_dir)
        earlier.extend(batch)
