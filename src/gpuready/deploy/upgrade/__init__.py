"""What a rolling driver/toolkit upgrade must do, decided once per run from the fleet's state.

Pure decisions, no I/O: the deploy gathers each host's packages and ``nvidia-smi`` state and reads every Node once,
then asks here which nodes need work, whether they need a reboot, and in which batches they go. A node needs work
when a pinned package differs, when the loaded driver is not the pinned one (installed but not yet rebooted), or
when an earlier run left it part-way (the ``gpuready.io/upgrade-state`` annotation): such nodes go first, so that a
cordoned node left by an interrupted run is finished before anything else is taken out of service.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuready.deploy.facts.nvidia import NvidiaSmiState
from gpuready.deploy.upgrade.maintenance import FAILURE_ANNOTATION, STATE_ANNOTATION, NodeView
from gpuready.spec import NodeSpec

# The steps recorded in the annotation, in order; "done" once uncordoned, "failed" when the drain, the wait for
# Ready or the validation failed (the failure annotation says which and why).
CORDONED, DRAINED, UPGRADING, REBOOTING, VALIDATING = (
    "cordoned",
    "drained",
    "upgrading",
    "rebooting",
    "validating",
)
DONE, FAILED = "done", "failed"


class PlanError(ValueError):
    """The fleet is not in a state the upgrade can start from; one line per node and why."""


@dataclass(frozen=True)
class NodeWork:
    name: str
    reasons: tuple[str, ...]  # why the node is taken out of service; empty: it is skipped, not cordoned
    reboot: bool  # the driver changes or the loaded one is not the pinned one
    resume: str | None  # the step an earlier run reached, when it did not finish

    @property
    def needed(self) -> bool:
        return bool(self.reasons)


def _split_pin(pin: str) -> tuple[str, str]:
    name, _, version = pin.partition("=")
    return name, version


def node_work(
    spec: NodeSpec, packages: Mapping[str, list[str]], smi: NvidiaSmiState, view: NodeView
) -> NodeWork:
    """What ``spec``'s node needs, from its installed packages, what nvidia-smi says, and its Node object."""
    reasons: list[str] = []
    driver_changes = False
    for step in ("driver", "toolkit"):
        for name, version in map(_split_pin, spec.apt_packages[step]):
            have = packages.get(name) or []
            if version not in have:
                reasons.append(f"{name} {', '.join(have) or 'not installed'} -> {version}")
                driver_changes = driver_changes or step == "driver"
    loaded = smi.report.driver_version if smi.report else None
    stale_module = loaded != spec.versions.driver
    if stale_module and not driver_changes:
        seen = loaded or (smi.error or "no answer").strip().splitlines()[-1]
        reasons.append(f"loaded driver is not {spec.versions.driver} ({seen}): a reboot loads it")
    resume = view.upgrade_state if view.upgrade_state not in (None, DONE) else None
    if resume:
        reasons.append(f"an earlier run stopped at {STATE_ANNOTATION}={resume}: finishing it")
    return NodeWork(spec.name, tuple(reasons), driver_changes or stale_module, resume)


def preflight(
    specs: list[NodeSpec], smi: Mapping[str, NvidiaSmiState | None], views: Mapping[str, NodeView]
) -> None:
    """Refuse, before anything changes, nodes this deploy cannot upgrade (the node deploy has to run first) or
    cannot see (a fact that pyinfra could not read is None: the host stopped answering after it connected)."""
    problems = []
    for spec in specs:
        state = smi[spec.name]
        if state is None:
            step = views[spec.name].upgrade_state
            problems.append(
                f"{spec.name}: stopped answering over SSH while its state was read"
                + (f" ({STATE_ANNOTATION}={step}: an earlier run may have left it rebooting)" if step else "")
                + ": run again once it answers, or leave it out with --limit"
            )
        elif not state.installed:
            problems.append(f"{spec.name}: no NVIDIA driver installed: run deploys/gpu_node.py first")
        if not views[spec.name].exists:
            problems.append(
                f"{spec.name}: no Node of that name in the cluster: join it with deploys/gpu_node.py"
            )
    if problems:
        raise PlanError("the upgrade cannot start:\n" + "\n".join(f"  - {p}" for p in problems))


def batches(order: list[str], work: Mapping[str, NodeWork], batch_size: int) -> list[list[str]]:
    """Nodes needing work in batches of ``batch_size``: those an earlier run left part-way first, then inventory order."""
    todo = [name for name in order if work[name].needed]
    todo.sort(key=lambda name: work[name].resume is None)  # stable: inventory order within each group
    return [todo[i : i + batch_size] for i in range(0, len(todo), batch_size)]


def over_budget(batch: list[str], views: Mapping[str, NodeView], max_unavailable: int) -> list[str]:
    """Nodes outside ``batch`` already out of service, when they and the batch together exceed the budget."""
    others = sorted(n for n, v in views.items() if n not in batch and v.exists and not v.available)
    return others if len(others) + len(batch) > max_unavailable else []


# What became of each node in a run, for the end-of-run summary.
UPGRADED, SKIPPED, FAILED_NODE, STOPPED, NOT_STARTED = (
    "upgraded",
    "skipped",
    "failed",
    "stopped",
    "not-started",
)


def outcome(work: NodeWork, after: NodeView, validated: bool) -> tuple[str, str]:
    """(status, detail) of one node once the run is over, from its plan, its Node afterwards, and whether this run
    validated it (the annotation alone cannot tell "upgraded now" from "done by an earlier run, not reached now")."""
    if not work.needed:
        return SKIPPED, "at the pinned driver and toolkit: skipped, not cordoned"
    if validated:
        return UPGRADED, f"validated and uncordoned ({'; '.join(work.reasons)})"
    state = after.upgrade_state
    if state == FAILED:
        return (
            FAILED_NODE,
            f"stays cordoned: {after.annotations.get(FAILURE_ANNOTATION) or 'see the error above'}",
        )
    if state in (None, DONE) and not work.resume:
        return NOT_STARTED, "not started: the run stopped before its batch"
    cordoned = ", cordoned" if after.unschedulable else ""
    return STOPPED, f"stopped at {STATE_ANNOTATION}={state}{cordoned}: run the deploy again to finish"
