"""The cluster side of a rolling upgrade as pyinfra operations: batch gate, cordon, drain, validate, uncordon.

They run on the machine running pyinfra, against the cluster named by ``kubeconfig``, and record every step in the
node's ``gpuready.io/upgrade-state`` annotation before taking it, so that an interrupted run can be finished. A
failure is reported on the host's line (pyinfra marks the host failed) with the reason, not a traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, operation

from gpuready import verdict as verdicts
from gpuready.deploy import upgrade
from gpuready.deploy.facts.host import BootId, BootTime
from gpuready.deploy.operations.cluster_objects import cluster
from gpuready.deploy.upgrade import maintenance, registration
from gpuready.spec import UpgradePolicy, knobs

CONFORMANCE_LAYERS = (
    "host",
    "gpu",
    "node",
    "workloads",
)  # metrics need the exporter's scrape interval: not here
# --data values that must not travel on a command line (the conformance run is a process anyone can list)
_SECRET_WORDS = ("password", "token", "secret")


def _fail(host: Any, message: str) -> bool:
    host.log_styled(message, fg="red", log_func=logger.error)
    return False


def _stays_cordoned(c: Any, host: Any, node: str, failure: str, message: str | None = None) -> bool:
    """Record the failure on the Node (the next run resumes it) and fail the host with the reason."""
    maintenance.set_state(c, node, upgrade.FAILED, failure=failure[:1000])
    return _fail(host, message or f"{failure}; the node stays cordoned")


@operation(is_idempotent=False)
def batch_started(
    batch: list[str],
    earlier: list[str],
    fleet: list[str],
    max_unavailable: int,
    kubeconfig: str | None = None,
):
    """
    Start a batch: every host calls this for every batch, so that pyinfra runs a batch's operations only after
    the previous batch's last one; the batch's own hosts check that no earlier node failed and that the batch
    keeps the fleet within ``max_unavailable``.

    + batch: the nodes of this batch
    + earlier: the nodes of the batches before it
    + fleet: every node of this run (what max_unavailable counts)
    + max_unavailable: nodes allowed out of service at once
    """
    if host.name not in batch:
        return

    def gate(state: Any, host: Any) -> bool:
        failed = sorted(h.name for h in state.failed_hosts if h.name in earlier)
        if failed:
            return _fail(
                host,
                f"not started: the upgrade stopped after {', '.join(failed)} failed in an earlier batch "
                "(that node is left cordoned); fix it and run the deploy again to finish",
            )
        views = {n: v for n, v in maintenance.read_nodes(cluster(kubeconfig, None)).items() if n in fleet}
        over = upgrade.over_budget(batch, views, max_unavailable)
        if over:
            return _fail(
                host,
                f"not started: {', '.join(over)} already out of service (cordoned or NotReady); with this batch "
                f"({', '.join(batch)}) that is more than upgrade_max_unavailable = {max_unavailable}",
            )
        return True

    yield FunctionCommand(gate, (), {})


@operation(is_idempotent=False)
def step(node: str, state: str, kubeconfig: str | None = None):
    """
    Record the step a node is at in its ``gpuready.io/upgrade-state`` annotation.

    + node: the Node's name
    + state: one of the steps of gpuready.deploy.upgrade (CORDONED ... DONE, FAILED)
    """
    yield FunctionCommand(maintenance.set_state, (cluster(kubeconfig, None), node, state), {})


@operation(is_idempotent=False)
def cordoned(node: str, kubeconfig: str | None = None):
    """
    Mark the node unschedulable (``kubectl cordon``) and record the step.

    + node: the Node's name
    """
    yield FunctionCommand(maintenance.cordon, (cluster(kubeconfig, None), node, upgrade.CORDONED), {})


@operation(is_idempotent=False)
def drained(node: str, policy: UpgradePolicy, kubeconfig: str | None = None):
    """
    Evict the pods that must leave the node (GPU pods only, or all but DaemonSet pods) and wait until they are
    gone, honouring PodDisruptionBudgets, within ``policy.drain_timeout``.

    + node: the Node's name
    + policy: drain_gpu_pods_only, drain_force, drain_timeout
    """

    def drain(state: Any, host: Any) -> bool:
        c = cluster(kubeconfig, None)
        try:
            evicted = maintenance.drain(
                c,
                node,
                gpu_only=policy.drain_gpu_pods_only,
                force=policy.drain_force,
                timeout=policy.drain_timeout,
                progress=lambda msg: logger.info(f"{host.print_prefix}{msg}"),
            )
        except maintenance.MaintenanceError as exc:
            return _stays_cordoned(c, host, node, str(exc))
        maintenance.set_state(c, node, upgrade.DRAINED)
        logger.info(f"{host.print_prefix}drained: {len(evicted)} pod(s) evicted")
        return True

    yield FunctionCommand(drain, (), {})


def conformance_command(
    conformance_dir: Path,
    inventory: str,
    node: str,
    report_dir: Path,
    kubeconfig: str | None,
    override_data: dict[str, Any],
) -> list[str]:
    """The conformance suite for one node's host, gpu, node and workloads layers, as a user would run it."""
    cmd = [sys.executable, "-m", "pytest", str(conformance_dir), "-q", "-p", "no:cacheprovider"]
    cmd += ["--inventory", inventory, "--nodes", node, "-m", " or ".join(CONFORMANCE_LAYERS)]
    cmd += ["--report-dir", str(report_dir)]
    if kubeconfig:
        cmd += ["--kubeconfig", kubeconfig]
    for key, value in sorted(override_data.items()):
        if any(word in key.lower() for word in _SECRET_WORDS):
            continue
        cmd += ["--data", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
    return cmd


@operation(is_idempotent=False)
def validated(
    node: str,
    policy: UpgradePolicy,
    conformance: list[str],
    report_dir: str,
    kubeconfig: str | None = None,
    addons_namespace: str = knobs.KNOBS["addons_namespace"].default,
    resources: list[str] | None = None,
):
    """
    Wait for the node to be Ready in its current boot, its add-on pods (``addons_namespace``) Ready again and its
    ``resources`` allocatable, run the conformance layers for it, and uncordon it only if they pass; otherwise
    leave it cordoned with ``upgrade-state=failed`` and the failed checks.

    + node: the Node's name
    + policy: node_ready_timeout
    + conformance: the command that runs the conformance suite for this node (see conformance_command)
    + report_dir: where that command writes verdict.json
    + addons_namespace: where the GPU add-ons run (the addons_namespace knob)
    + resources: the nvidia.com/* resources the node's device plugin serves (none on a DRA node); a plugin whose
      registration the kubelet dropped after the reboot is restarted (see ``registration``)
    """

    def validate(state: Any, host: Any) -> bool:
        c = cluster(kubeconfig, None)
        maintenance.set_state(c, node, upgrade.VALIDATING)
        try:
            maintenance.wait_ready(c, node, policy.node_ready_timeout, boot_id=host.get_fact(BootId))
        except maintenance.MaintenanceError as exc:
            return _stays_cordoned(c, host, node, str(exc))
        booted = host.get_fact(BootTime)
        waiting = maintenance.wait_pods_ready(
            c, node, addons_namespace, policy.node_ready_timeout,
            since=None if booted is None else datetime.fromtimestamp(booted, UTC),
        )  # fmt: skip
        if waiting:  # the suite says what is wrong with each
            logger.warning(f"{host.print_prefix}add-on pods still not Ready after {policy.node_ready_timeout}s: "
                           f"{', '.join(waiting)}")  # fmt: skip
        unregistered = registration.wait_registered(
            c, node, resources or [], addons_namespace, policy.node_ready_timeout,
            say=lambda line: logger.warning(f"{host.print_prefix}{line}"),
        )  # fmt: skip
        if unregistered:  # node/test_allocatable says why
            logger.warning(f"{host.print_prefix}nothing allocatable of: {', '.join(unregistered)}")
        logger.info(f"{host.print_prefix}Ready; running conformance ({', '.join(CONFORMANCE_LAYERS)})")
        verdict_path = Path(report_dir) / "verdict.json"
        verdict_path.unlink(missing_ok=True)  # an earlier run's verdict must not stand in for this one
        run = subprocess.run(conformance, capture_output=True, text=True, check=False)
        try:
            found = verdicts.read(verdict_path)
            failures = verdicts.failed_checks(found, node) or verdicts.not_proven(found, node)
        except verdicts.VerdictError as exc:
            found, failures = None, [str(exc)]
        if run.returncode != 0 and not (found and verdicts.failed_checks(found, node)):
            tail = " / ".join((run.stdout + run.stderr).strip().splitlines()[-5:])
            failures = [f"conformance exited {run.returncode} without a verdict for {node}: {tail}"]
        if failures:
            return _stays_cordoned(
                c,
                host,
                node,
                "; ".join(failures),
                f"conformance failed after the upgrade; {node} stays cordoned "
                f"({maintenance.STATE_ANNOTATION}={upgrade.FAILED}, report: {verdict_path}):\n  "
                + "\n  ".join(failures),
            )
        maintenance.uncordon(c, node, upgrade.DONE)
        logger.info(f"{host.print_prefix}conformance passed: uncordoned")
        return True

    yield FunctionCommand(validate, (), {})
