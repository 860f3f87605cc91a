"""The verdict goes back: a Node condition, a label and (asked for) a taint per checked node, and a metrics file.

Off by default; the plugin's ``--write-back``, ``--taint-failed``, ``--taint-max-fraction`` and ``--metrics-file``
turn it on (conformance/README.md, "The verdict in the cluster").

What a node gets, from this run's results only:

* a condition ``GPUConformance`` through the Node's status subresource: ``True``/``ChecksPassed`` when every check
  that ran on it passed, ``False``/``ChecksFailed`` when one failed, its message naming the failed checks
  (``layer/check``, at most :data:`MESSAGE_MAX` characters); ``lastTransitionTime`` changes only when the status
  does (``lastHeartbeatTime`` is the run's time);
* a label ``gpuready.io/conformance=pass|fail``;
* with ``--taint-failed``: the ``gpuready.io/conformance-failed:NoSchedule`` taint on a failing node, taken off a
  passing one, never on more than ``floor(fraction x the run's nodes)`` nodes (:func:`plan_taints`).

A node on which no check ran or every check skipped (unreachable through a skipped layer, deselected, gated) has
no verdict: its condition, label and taint are left as they are. A run that did not finish (interrupted, internal
or usage error: exit status other than 0 or 1) changes nothing.

Requests grow with the nodes, not with the checks: per node one GET, at most one PATCH of ``nodes/status``
(the condition, a strategic merge keyed by condition type) and at most one PATCH of the Node (label and taints
together, guarded by the ``resourceVersion`` read, re-read and retried on a conflict). RBAC: ``nodes``: get,
patch; ``nodes/status``: patch.

The metrics file is Prometheus's text exposition format for node_exporter's textfile collector (written to a
temporary file beside it, then renamed): checks per node, layer and outcome, each node's verdict, the run's time
and exit status, and every figure a check measured (the diag layer's bandwidths, with their floors).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuready import atomic
from gpuready.conformance.report import LAYERS, FleetResults

CONDITION_TYPE = "GPUConformance"
LABEL = "gpuready.io/conformance"
TAINT_KEY = "gpuready.io/conformance-failed"
TAINT_EFFECT = "NoSchedule"
MESSAGE_MAX = (
    1024  # characters of a condition message (the kubelet's own stay far below; kubectl shows it whole)
)
DEFAULT_TAINT_MAX_FRACTION = 0.1
FINISHED = (0, 1)  # exit statuses of a run whose verdict is complete (pytest's 0: passed, 1: a check failed)
STATUSES = ("pass", "fail", "skip")


@dataclass(frozen=True)
class NodeVerdict:
    """One node's verdict from this run: ``pass``, ``fail``, or None (no check ran, or every one skipped)."""

    node: str
    verdict: str | None
    failed: tuple[str, ...] = ()  # "layer/check" of each failed check, in the run's order
    passed: int = 0
    skipped: int = 0


def node_verdicts(results: FleetResults) -> list[NodeVerdict]:
    """Each node of the run, in its order, with its verdict (read from the checks, not from a report format)."""
    out = []
    for node in results.nodes:
        checks = results.checks(node)
        failed = tuple(f"{r.layer}/{r.check}" for r in checks if r.status == "fail")
        passed = sum(r.status == "pass" for r in checks)
        skipped = sum(r.status == "skip" for r in checks)
        verdict = "fail" if failed else "pass" if passed else None
        out.append(NodeVerdict(node, verdict, failed, passed, skipped))
    return out


def condition_message(verdict: NodeVerdict, limit: int = MESSAGE_MAX) -> str:
    """What the condition says: the failed checks by name (as many as fit in ``limit``, then how many more), or
    how many passed."""
    if verdict.verdict == "pass":
        skipped = f" ({verdict.skipped} skipped)" if verdict.skipped else ""
        return f"all {verdict.passed} checks that ran passed{skipped}"
    total = verdict.passed + verdict.skipped + len(verdict.failed)
    head = f"{len(verdict.failed)} of {total} checks failed: "
    names: list[str] = []
    for i, name in enumerate(verdict.failed):
        rest = len(verdict.failed) - i - 1
        # this name, and the " and N more" that ends the message should the next one not fit
        more = f" and {rest} more" if rest else ""
        if len(head) + len(", ".join([*names, name])) + len(more) > limit:
            return head + ", ".join(names) + f" and {len(verdict.failed) - i} more"
        names.append(name)
    text = head + ", ".join(names)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def condition(verdict: NodeVerdict, previous: dict[str, Any] | None, now: str) -> dict[str, Any]:
    """The ``GPUConformance`` condition for a node with a verdict; ``previous`` is the node's current one (if
    any): its ``lastTransitionTime`` is kept when the status stays the same."""
    status = "True" if verdict.verdict == "pass" else "False"
    same = previous is not None and previous.get("status") == status and previous.get("lastTransitionTime")
    return {
        "type": CONDITION_TYPE,
        "status": status,
        "reason": "ChecksPassed" if status == "True" else "ChecksFailed",
        "message": condition_message(verdict),
        "lastHeartbeatTime": now,
        "lastTransitionTime": previous["lastTransitionTime"] if same and previous else now,
    }


def status_patch(verdict: NodeVerdict, node: dict[str, Any], now: str) -> dict[str, Any]:
    """The strategic merge patch of ``nodes/<name>/status`` that sets the node's condition (conditions merge by
    type: the kubelet's own are left alone)."""
    conditions = (node.get("status") or {}).get("conditions") or []
    previous = next((c for c in conditions if c.get("type") == CONDITION_TYPE), None)
    return {"status": {"conditions": [condition(verdict, previous, now)]}}


def has_taint(node: dict[str, Any]) -> bool:
    return any(t.get("key") == TAINT_KEY for t in (node.get("spec") or {}).get("taints") or [])


def node_patch(verdict: NodeVerdict, node: dict[str, Any], taint: bool | None) -> dict[str, Any] | None:
    """The patch of the Node object: the label, and with ``taint`` True/False the taint put on/taken off (None:
    taints untouched); None when the node already says all of it. Taints are one list without a merge key, so the
    patch carries the whole new list and the ``resourceVersion`` it was computed from (a conflict, not a lost
    taint, when someone else changed the node in between)."""
    meta = node.get("metadata") or {}
    patch: dict[str, Any] = {}
    value = "pass" if verdict.verdict == "pass" else "fail"
    if (meta.get("labels") or {}).get(LABEL) != value:
        patch["metadata"] = {"labels": {LABEL: value}}
    if taint is not None and taint != has_taint(node):
        taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != TAINT_KEY]
        if taint:
            taints.append({"key": TAINT_KEY, "value": "true", "effect": TAINT_EFFECT})
        patch["spec"] = {"taints": taints}
        patch.setdefault("metadata", {})["resourceVersion"] = meta.get("resourceVersion")
    return patch or None


@dataclass
class TaintPlan:
    """Which nodes carry the taint after the run: ``taint`` (failing nodes, within the cap), ``untaint`` (passing
    nodes that carry it), ``refused`` (failing nodes left untainted by the cap), ``cap`` the most allowed."""

    cap: int
    fleet: int
    taint: list[str] = field(default_factory=list)
    untaint: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    kept: list[str] = field(
        default_factory=list
    )  # tainted nodes without a verdict this run: left, and counted

    def note(self, fraction: float) -> str | None:
        if not self.refused:
            return None
        shown = ", ".join(self.refused[:10]) + (
            f" and {len(self.refused) - 10} more" if len(self.refused) > 10 else ""
        )
        return (
            f"--taint-failed: refused to taint {len(self.refused)} failing node(s) ({shown}): "
            f"--taint-max-fraction {fraction:g} of the run's {self.fleet} nodes allows at most {self.cap} "
            f"tainted, {len(self.kept) + len(self.taint)} are (a fleet-wide failure is more likely the cluster's "
            "or the suite's than every node's); their condition and label say they failed"
        )


def plan_taints(verdicts: Iterable[NodeVerdict], tainted_now: set[str], fraction: float) -> TaintPlan:
    """The cap rule: at most ``floor(fraction x N)`` of the run's N nodes carry the taint after it. Tainted nodes
    without a verdict this run keep it and count first; then failing nodes that already carry it (no churn), then
    the other failing nodes in the run's order, until the cap; every failing node beyond it is refused (and said
    so: :meth:`TaintPlan.note`). Passing nodes lose the taint, whatever the cap."""
    verdicts = list(verdicts)
    cap = math.floor(fraction * len(verdicts) + 1e-9)
    plan = TaintPlan(cap=cap, fleet=len(verdicts))
    plan.kept = [v.node for v in verdicts if v.verdict is None and v.node in tainted_now]
    plan.untaint = [v.node for v in verdicts if v.verdict == "pass" and v.node in tainted_now]
    failing = [v.node for v in verdicts if v.verdict == "fail"]
    room = max(0, cap - len(plan.kept))
    ordered = [n for n in failing if n in tainted_now] + [n for n in failing if n not in tainted_now]
    plan.taint, plan.refused = ordered[:room], ordered[room:]
    return plan


# --- against the cluster ----------------------------------------------------------------------------------------


@dataclass
class WriteBack:
    taint_failed: bool = False
    taint_max_fraction: float = DEFAULT_TAINT_MAX_FRACTION
    workers: int = 16
    retries: int = 3


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_back(
    cluster: Any, results: FleetResults, exit_code: int, options: WriteBack, now: str | None = None
) -> list[str]:
    """Write each node's verdict into the cluster (see the module docstring); the lines the run's summary shows.
    A node that cannot be read or patched is named in a line; the others are still written."""
    from concurrent.futures import ThreadPoolExecutor

    if exit_code not in FINISHED:
        return [f"--write-back: the run did not finish (exit status {exit_code}): no node's verdict written"]
    now = now or now_rfc3339()
    verdicts = node_verdicts(results)
    core = cluster.core
    timeout = getattr(cluster, "request_timeout", 10.0)
    workers = max(1, min(options.workers, len(verdicts) or 1))

    def read(name: str) -> dict[str, Any] | str:
        import json

        from kubernetes.client.exceptions import ApiException

        try:
            return json.loads(core.read_node(name, _preload_content=False, _request_timeout=timeout).data)
        except ApiException as exc:
            return f"{name}: cannot read the Node ({exc.status} {exc.reason})"
        except Exception as exc:
            return f"{name}: cannot read the Node ({exc})"

    with ThreadPoolExecutor(max_workers=workers) as pool:
        live = dict(zip((v.node for v in verdicts), pool.map(read, (v.node for v in verdicts)), strict=True))
    problems = [x for x in live.values() if isinstance(x, str)]
    nodes = {name: obj for name, obj in live.items() if isinstance(obj, dict)}
    plan = None
    if options.taint_failed:
        tainted = {name for name, obj in nodes.items() if has_taint(obj)}
        plan = plan_taints([v for v in verdicts if v.node in nodes], tainted, options.taint_max_fraction)
    taint_of: dict[str, bool | None] = {}
    if plan is not None:
        taint_of.update({n: True for n in plan.taint})
        taint_of.update({n: False for n in plan.untaint + plan.refused})

    def write(verdict: NodeVerdict) -> str | None:
        return _write_node(
            core, verdict, nodes[verdict.node], taint_of.get(verdict.node), now, timeout, options
        )

    todo = [v for v in verdicts if v.verdict is not None and v.node in nodes]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        problems += [p for p in pool.map(write, todo) if p]
    lines = []
    undecided = [v.node for v in verdicts if v.verdict is None]
    passed = sum(v.verdict == "pass" for v in todo)
    lines.append(
        f"--write-back: {CONDITION_TYPE} condition and {LABEL} label written on {len(todo) - len(problems)} "
        f"node(s) ({passed} pass, {len(todo) - passed} fail)"
        + (
            f"; {len(undecided)} without a verdict (no check ran or all skipped) left as they were"
            if undecided
            else ""
        )
    )
    if plan is not None:
        lines.append(
            f"--taint-failed: {TAINT_KEY}:{TAINT_EFFECT} on {len(plan.taint)} failing node(s), taken off "
            f"{len(plan.untaint)} passing node(s) (at most {plan.cap} of {plan.fleet})"
        )
        refused = plan.note(options.taint_max_fraction)
        if refused:
            lines.append(refused)
    lines += [f"--write-back: {p}" for p in problems]
    return lines


def _write_node(
    core: Any,
    verdict: NodeVerdict,
    node: dict[str, Any],
    taint: bool | None,
    now: str,
    timeout: float,
    options: WriteBack,
) -> str | None:
    """One node: its status patch (the condition), then its object patch (label, taint) retried on a conflict
    with the node re-read; a problem's line, else None."""
    import json

    from kubernetes.client.exceptions import ApiException

    name = verdict.node
    try:
        core.patch_node_status(name, status_patch(verdict, node, now), _request_timeout=timeout)
    except ApiException as exc:
        return f"{name}: condition not written ({exc.status} {exc.reason})"
    except Exception as exc:
        return f"{name}: condition not written ({exc})"
    for _attempt in range(options.retries):
        patch = node_patch(verdict, node, taint)
        if patch is None:
            return None
        try:
            core.patch_node(name, patch, _request_timeout=timeout)
            return None
        except ApiException as exc:
            if exc.status != 409:
                return f"{name}: label/taint not written ({exc.status} {exc.reason})"
        except Exception as exc:
            return f"{name}: label/taint not written ({exc})"
        try:
            node = json.loads(core.read_node(name, _preload_content=False, _request_timeout=timeout).data)
        except Exception as exc:
            return f"{name}: label/taint not written (re-reading after a conflict: {exc})"
    return f"{name}: label/taint not written (the node kept changing: {options.retries} conflicts)"


# --- metrics ----------------------------------------------------------------------------------------------------


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def render_metrics(results: FleetResults, exit_code: int, timestamp: float) -> str:
    """The run in Prometheus's text exposition format (one HELP and TYPE per family, every family's samples
    together, no sample timestamps: node_exporter's textfile collector refuses them)."""
    families: list[tuple[str, str, list[str]]] = []

    def family(name: str, help_text: str, samples: list[str]) -> None:
        families.append((name, help_text, samples))

    counts = []
    verdicts = []
    figures = []
    floors = []
    decided = {v.node: v.verdict for v in node_verdicts(results)}
    for node in results.nodes:
        for layer in LAYERS:
            checks = results.checks(node, layer)
            if not checks:
                continue
            for status in STATUSES:
                n = sum(r.status == status for r in checks)
                counts.append(
                    f"gpuready_conformance_checks{_labels(node=node, layer=layer, status=status)} {n}"
                )
        for verdict in ("pass", "fail", "none"):
            value = int((decided[node] or "none") == verdict)
            verdicts.append(f"gpuready_conformance_node_verdict{_labels(node=node, verdict=verdict)} {value}")
        for r in results.checks(node):
            for m in r.measurements:
                labels = _labels(node=node, layer=r.layer, check=r.check, name=m.name, unit=m.unit)
                figures.append(f"gpuready_conformance_measurement{labels} {_number(m.measured)}")
                if m.floor is not None:
                    floors.append(f"gpuready_conformance_measurement_floor{labels} {_number(m.floor)}")
    family(
        "gpuready_conformance_checks",
        "Checks of the last gpuready conformance run per node, layer and outcome (pass, fail, skip).",
        counts,
    )
    family(
        "gpuready_conformance_node_verdict",
        "1 for the node's verdict in the last run (pass, fail, or none: no check ran or all skipped), 0 otherwise.",
        verdicts,
    )
    family(
        "gpuready_conformance_measurement",
        "A figure a check measured in the last run (e.g. the diag layer's copy bandwidth), in the unit label's unit.",
        figures,
    )
    family(
        "gpuready_conformance_measurement_floor",
        "The floor the check judged that figure against, in the same unit.",
        floors,
    )
    family(
        "gpuready_conformance_last_run_timestamp_seconds",
        "When the last gpuready conformance run finished (Unix time).",
        [f"gpuready_conformance_last_run_timestamp_seconds {_number(round(timestamp, 3))}"],
    )
    family(
        "gpuready_conformance_last_run_exit_code",
        "pytest's exit status of the last run (0 passed, 1 a check failed, 2 interrupted, 3 internal error, "
        "4 usage error, 5 nothing collected).",
        [f"gpuready_conformance_last_run_exit_code {exit_code}"],
    )
    lines = []
    for name, help_text, samples in families:
        if not samples:
            continue
        lines += [f"# HELP {name} {_escape_help(help_text)}", f"# TYPE {name} gauge", *samples]
    return "\n".join(lines) + "\n"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def write_metrics(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` atomically, so the textfile collector never reads half a file."""
    return atomic.write_text(path, text)


# --- the plugin's options and its call at the session's end ------------------------------------------------------


def fraction(text: str) -> float:
    """An argparse ``type``: a fraction of the fleet, 0 to 1 (``--taint-max-fraction``)."""
    import argparse

    try:
        value = float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 1:  # NaN fails too
        raise argparse.ArgumentTypeError(f"{text!r}: a fraction of the fleet, from 0 to 1")
    return value


def add_options(group: Any) -> None:
    """``--write-back``, ``--taint-failed``, ``--taint-max-fraction``, ``--metrics-file`` (pytest_addoption)."""
    group.addoption(
        "--write-back",
        action="store_true",
        default=False,
        help=f"after the run, write each checked node's verdict into the cluster: the Node condition "
        f"{CONDITION_TYPE} (True/ChecksPassed, False/ChecksFailed naming the failed checks) and the label "
        f"{LABEL}=pass|fail; nodes without a verdict (no check ran or all skipped) are left alone. Needs "
        "nodes get/patch and nodes/status patch",
    )
    group.addoption(
        "--taint-failed",
        action="store_true",
        default=False,
        help=f"with --write-back: put the {TAINT_KEY}:{TAINT_EFFECT} taint on failing nodes and take it off "
        "passing ones, on at most --taint-max-fraction of the run's nodes",
    )
    group.addoption(
        "--taint-max-fraction",
        default=DEFAULT_TAINT_MAX_FRACTION,
        type=fraction,
        metavar="FRACTION",
        help="with --taint-failed: at most floor(FRACTION x the run's nodes) nodes carry the taint after the run; "
        "failing nodes beyond it are refused the taint and named in the summary "
        f"(default {DEFAULT_TAINT_MAX_FRACTION:g})",
    )
    group.addoption(
        "--metrics-file",
        default=None,
        metavar="PATH",
        help="write the run's metrics here (Prometheus text format for node_exporter's textfile collector, e.g. "
        ".../textfile/gpuready.prom): checks per node, layer and outcome, node verdicts, the run's time, the "
        "measured figures",
    )


def option_problem(config: Any) -> str | None:
    """Why the options cannot work together (None when they can): checked when the session starts."""
    if config.getoption("taint_failed") and not config.getoption("write_back"):
        return "--taint-failed taints through the verdict written back: add --write-back"
    path = config.getoption("metrics_file")
    if path:
        target = Path(path).expanduser()
        if target.is_dir():
            return f"--metrics-file {path}: a directory (name the .prom file)"
        parent = target.parent
        if parent.exists() and not os.access(parent, os.W_OK | os.X_OK):
            return f"--metrics-file {path}: cannot write to {parent}"
    return None


def finish(config: Any, suite: Any, exit_code: int) -> None:
    """At the session's end: the metrics file, then the write-back; what they did goes to the summary notes."""
    import time

    from gpuready.spec.secrets import mask

    results = suite.results
    path = config.getoption("metrics_file")
    if path and results.nodes:
        try:
            suite.report_paths.append(write_metrics(path, render_metrics(results, exit_code, time.time())))
        except OSError as exc:
            suite.notes.append(f"--metrics-file {path}: not written: {exc.strerror or exc}")
    if not config.getoption("write_back") or not results.nodes:
        return
    options = WriteBack(config.getoption("taint_failed"), config.getoption("taint_max_fraction"))
    try:
        lines = write_back(suite.connect(), results, exit_code, options)
    except Exception as exc:  # an unreachable cluster: said, and the run's own outcome kept
        lines = [f"--write-back: nothing written: {exc}"]
    suite.notes.extend(mask(line) for line in lines)
