"""The fleet verdict: one record per (node, layer, check), written as junit-xml, JSON, HTML and a terminal table.

Why a report of its own besides pytest's ``--junitxml``: a fleet owner asks "which nodes are not ready, and why",
so every output here is grouped by node (one junit testsuite per node, one JSON entry per node, one table row
per node), while pytest's report is grouped by test file.

``verdict.json`` is versioned (``schema_version``) and described by ``verdict.schema.json`` beside this module
(shipped in the package: :func:`schema`). Within a major version fields are only added, never renamed or removed.

Statuses, the same words at every level: ``pass``, ``fail``, ``skip``. A check that skipped proves nothing, so a layer
whose every check skipped is ``skip``; a node is ``fail`` when one of its checks failed, ``pass`` when none failed and
at least one passed, else ``skip``; the run is ``fail`` when a node failed or pytest's exit status is not 0,
``pass`` when every node passed, else ``skip`` (nothing failed, but some node has no passing check: every one of its
checks skipped or none was selected). pytest's exit status stays 0 for a ``skip`` run: read the verdict.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata, resources
from pathlib import Path
from typing import Any

import junit_xml

# "site": the checks of a --site directory (a team's own test_*.py, run per node like the layers), last
LAYERS = ("host", "gpu", "node", "workloads", "metrics", "policy", "diag", "site")
STATUSES = ("pass", "fail", "skip")
# verdict.json's format: the major number changes when a field is renamed or removed, the minor when one is added.
SCHEMA_VERSION = "1.1"  # 1.1: the "site" layer
SCHEMA_FILE = "verdict.schema.json"

# pytest's exit statuses, as a CI job reading verdict.json needs them explained.
EXIT_CODES = {
    0: "every check ran passed (skipped checks do not fail a node)",
    1: "at least one check failed on at least one node",
    2: "the run was interrupted (Ctrl-C or a fatal error): the verdict is incomplete",
    3: "internal error in pytest or the suite: the verdict is incomplete",
    4: "usage error (bad inventory or options): nothing was checked",
    5: "no checks were collected (no nodes selected?)",
}


@dataclass(frozen=True)
class Measurement:
    """A figure a check measured and judged: a diag check's bandwidth against its floor."""

    name: str  # what was measured, e.g. "GPU 3 host->device"
    measured: float
    floor: float | None
    unit: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "measured": self.measured, "floor": self.floor, "unit": self.unit}

    def __str__(self) -> str:
        floor = f" (floor {self.floor:g})" if self.floor is not None else ""
        return f"{self.name} {self.measured:g} {self.unit}{floor}"


@dataclass(frozen=True)
class CheckResult:
    layer: str
    check: str
    status: str  # pass | fail | skip
    message: str
    seconds: float
    measurements: tuple[Measurement, ...] = ()


class FleetResults:
    """Results per node, in inventory order; a check reported twice (setup error, then teardown) keeps the worst."""

    def __init__(self, nodes: list[str], inventory: str = "", started: datetime | None = None) -> None:
        self.inventory = inventory
        self.nodes = list(nodes)
        self._checks: dict[str, dict[tuple[str, str], CheckResult]] = {n: {} for n in nodes}
        self.started = started or _now()  # the run's start: --discover passes it on, its discovery counts
        self.finished: datetime | None = (
            None  # set by finish(); verdict() uses the time it is called until then
        )
        self.api_server: str | None = (
            None  # the cluster's API server URL, when the run used one (see public_url)
        )

    def finish(self) -> None:
        self.finished = _now()

    def record(
        self,
        node: str,
        layer: str,
        check: str,
        status: str,
        message: str = "",
        seconds: float = 0.0,
        measurements: tuple[Measurement, ...] = (),
    ) -> None:
        if status not in ("pass", "fail", "skip"):
            raise ValueError(f"status must be pass, fail or skip, not {status!r}")
        checks = self._checks.setdefault(node, {})
        if node not in self.nodes:
            self.nodes.append(node)
        previous = checks.get((layer, check))
        if previous is not None and previous.status == "fail":
            return
        total = seconds + (previous.seconds if previous else 0.0)
        figures = measurements or (previous.measurements if previous else ())
        checks[(layer, check)] = CheckResult(layer, check, status, message, total, figures)

    def checks(self, node: str, layer: str | None = None) -> list[CheckResult]:
        return [r for r in self._checks.get(node, {}).values() if layer is None or r.layer == layer]

    def layer_status(self, node: str, layer: str) -> str:
        """FAIL if a check failed, PASS if one passed, SKIP if all were skipped, '-' if none ran."""
        statuses = {r.status for r in self.checks(node, layer)}
        if not statuses:
            return "-"
        if "fail" in statuses:
            return "FAIL"
        return "PASS" if "pass" in statuses else "SKIP"

    def node_verdict(self, node: str) -> str:
        """fail if a check failed, pass if none failed and one passed, skip when nothing passed (all skipped, or
        no check of the node ran): a node whose every check skipped is not proven ready."""
        statuses = {r.status for r in self.checks(node)}
        if "fail" in statuses:
            return "fail"
        return "pass" if "pass" in statuses else "skip"

    def verdict(self, exit_code: int) -> dict[str, Any]:
        """verdict.json's content (see verdict.schema.json and the module docstring for the statuses)."""
        nodes = {}
        for node in self.nodes:
            layers = {}
            for layer in LAYERS:
                checks = self.checks(node, layer)
                if not checks:
                    continue
                layers[layer] = {
                    "status": self.layer_status(node, layer).lower(),
                    "counts": _counts(r.status for r in checks),
                    "seconds": round(sum(r.seconds for r in checks), 3),
                    "checks": {r.check: _check_entry(r) for r in checks},
                }
            nodes[node] = {
                "verdict": self.node_verdict(node),
                "counts": _counts(r.status for r in self.checks(node)),
                "layers": layers,
            }
        verdicts = [n["verdict"] for n in nodes.values()]
        if exit_code != 0 or "fail" in verdicts:
            overall = "fail"
        elif verdicts and all(v == "pass" for v in verdicts):
            overall = "pass"
        else:
            overall = "skip"
        finished = self.finished or _now()
        return {
            "schema_version": SCHEMA_VERSION,
            "gpuready_version": gpuready_version(),
            "inventory": self.inventory,
            "api_server": public_url(self.api_server),
            "started_at": _iso(self.started),
            "finished_at": _iso(finished),
            "seconds": round(max(0.0, (finished - self.started).total_seconds()), 3),
            "verdict": overall,
            "exit_code": exit_code,
            "exit_code_meaning": EXIT_CODES.get(exit_code, "unknown exit status"),
            "counts": _counts(r.status for node in self.nodes for r in self.checks(node)),
            "node_counts": _counts(verdicts),
            "nodes": nodes,
        }

    def junit_suites(self) -> list[junit_xml.TestSuite]:
        suites = []
        for node in self.nodes:
            cases = []
            # junit-xml has properties per testsuite only: "<layer>/<check>/<name>" -> "measured unit floor"
            properties = {
                f"{r.layer}/{r.check}/{m.name}": f"measured={m.measured:g} floor={m.floor} unit={m.unit}"
                for r in self.checks(node)
                for m in r.measurements
            }
            for r in self.checks(node):
                case = junit_xml.TestCase(
                    name=f"{r.layer} / {r.check}",
                    classname=f"{node}.{r.layer}",
                    elapsed_sec=round(r.seconds, 3),
                )
                if r.status == "fail":
                    case.add_failure_info(message=r.message)
                elif r.status == "skip":
                    case.add_skipped_info(message=r.message)
                cases.append(case)
            suites.append(junit_xml.TestSuite(node, cases, hostname=node, properties=properties or None))
        return suites


def _check_entry(r: CheckResult) -> dict[str, Any]:
    entry: dict[str, Any] = {"status": r.status, "message": r.message, "seconds": round(r.seconds, 3)}
    if r.measurements:
        entry["measurements"] = [m.as_dict() for m in r.measurements]
    return entry


def _counts(statuses: Any) -> dict[str, int]:
    counts = dict.fromkeys(STATUSES, 0)
    for status in statuses:
        counts[status] += 1
    return counts


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(when: datetime) -> str:
    """UTC, ISO 8601, to the millisecond: 2025-01-31T12:00:00.123Z."""
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def gpuready_version() -> str:
    try:
        return metadata.version("gpuready")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        from gpuready import __version__

        return __version__


def public_url(url: str | None) -> str | None:
    """The API server's address without what may be a credential: no user:password@, query or fragment.
    (A regular expression, not urllib: checks import this module, and checks import no network library.)"""
    if not url:
        return None
    m = re.match(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)?(?:[^/?#@]*@)?(?P<rest>[^?#]*)", url.strip())
    return (m.group("scheme") or "") + m.group("rest") if m else None


def schema() -> dict[str, Any]:
    """verdict.json's JSON Schema (draft 2020-12), as shipped in the package."""
    text = resources.files("gpuready.conformance").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def write_reports(results: FleetResults, directory: str | Path, exit_code: int) -> list[Path]:
    """``fleet.xml`` (one testsuite per node), ``verdict.json`` and ``report.html`` under ``directory``."""
    from gpuready.conformance.html_report import render_html

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    if results.finished is None:
        results.finish()
    xml_path = out / "fleet.xml"
    with xml_path.open("w", encoding="utf-8") as f:
        junit_xml.to_xml_report_file(f, results.junit_suites(), prettyprint=True, encoding="utf-8")
    verdict = results.verdict(exit_code)
    json_path = out / "verdict.json"
    json_path.write_text(json.dumps(verdict, indent=2) + "\n", encoding="utf-8")
    html_path = out / "report.html"
    html_path.write_text(render_html(verdict), encoding="utf-8")
    return [xml_path, json_path, html_path]


def render_table(results: FleetResults) -> str:
    """Nodes x layers, PASS/FAIL/SKIP/-, and the first failure of each failed node underneath."""
    layers = [x for x in LAYERS if x != "site" or any(results.checks(n, x) for n in results.nodes)]
    header = ["node", *layers]
    rows = [[node, *(results.layer_status(node, layer) for layer in layers)] for node in results.nodes]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    for node in results.nodes:
        failed = [r for r in results.checks(node) if r.status == "fail"]
        if failed:
            lines.append(f"{node}: {failed[0].layer}/{failed[0].check}: {failed[0].message}")
    for node in results.nodes:
        figures = [m for r in results.checks(node) for m in r.measurements if m.name.startswith("lowest ")]
        if figures:
            lines.append(f"{node} figures: " + "; ".join(str(m) for m in figures))
    return "\n".join(lines)
