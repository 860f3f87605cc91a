"""report.html: the fleet verdict as one static page (nodes x layers, failing nodes first, every check's message and
figures), rendered from verdict.json's content.

Self-contained: inline CSS, no script, font or image from anywhere, so it opens from a CI artifact store or an
air-gapped laptop. Every text that came from a node, a message or the inventory is escaped (``html.escape``): a
message may hold anything a tool printed.
"""

from __future__ import annotations

from html import escape
from typing import Any

from gpuready.conformance.report import LAYERS

# failing nodes first, then nodes nothing proved (every check skipped), then passing ones; inventory order within
ORDER = {"fail": 0, "skip": 1, "pass": 2}

CSS = """
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em; color: #1d1d1f; }
h1 { font-size: 1.5em; margin: 0 0 .3em; } h2 { font-size: 1.2em; margin: 1.5em 0 .4em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #c9c9c9; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
.pass { background: #d9f2dc; color: #14571f; }
.fail { background: #f8d0d0; color: #8b0000; font-weight: bold; }
.skip { background: #f4eec9; color: #6b5800; }
.none { color: #999; }
.verdict { display: inline-block; padding: .2em .8em; border-radius: .3em; font-weight: bold; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: .1em 1em; margin: .5em 0; }
dl.meta dt { font-weight: bold; } dl.meta dd { margin: 0; }
td.message { white-space: pre-wrap; word-break: break-word; max-width: 70em; font-family: ui-monospace, monospace; }
tr.node-fail td.name, tr.node-fail td.name a { color: #b00000; font-weight: bold; }
section.node-fail h2 { color: #b00000; }
a { color: inherit; }
"""


def sorted_nodes(verdict: dict[str, Any]) -> list[str]:
    """The verdict's nodes, failing first, then skipped, then passing (inventory order within each)."""
    nodes = verdict.get("nodes", {})
    return sorted(nodes, key=lambda name: ORDER.get(nodes[name].get("verdict", "skip"), 1))


def _status_cell(status: str | None, label: str | None = None) -> str:
    if status is None:
        return '<td class="none">-</td>'
    return f'<td class="{escape(status)}">{escape(label or status.upper())}</td>'


def _counts(counts: dict[str, int] | None) -> str:
    counts = counts or {}
    return ", ".join(
        f"{counts.get(s, 0)} {word}"
        for s, word in (("fail", "failed"), ("pass", "passed"), ("skip", "skipped"))
    )


def _anchor(node: str) -> str:
    return "node-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in node)


def _figures(check: dict[str, Any]) -> str:
    lines = []
    for m in check.get("measurements") or []:
        floor = f" (floor {m['floor']:g})" if m.get("floor") is not None else ""
        lines.append(escape(f"{m['name']}: {m['measured']:g} {m['unit']}{floor}"))
    return "<br>".join(lines)


def render_html(verdict: dict[str, Any]) -> str:
    """The page for one verdict (the dict verdict.json holds)."""
    nodes = verdict.get("nodes", {})
    order = sorted_nodes(verdict)
    overall = str(verdict.get("verdict", "skip"))
    meta = [
        ("verdict", f'<span class="verdict {escape(overall)}">{escape(overall.upper())}</span>'),
        ("exit status", escape(f"{verdict.get('exit_code')}: {verdict.get('exit_code_meaning', '')}")),
        ("nodes", escape(_counts(verdict.get("node_counts")))),
        ("checks", escape(_counts(verdict.get("counts")))),
        ("inventory", escape(str(verdict.get("inventory") or "-"))),
        ("API server", escape(str(verdict.get("api_server") or "-"))),
        ("started", escape(str(verdict.get("started_at", "-")))),
        ("finished", escape(f"{verdict.get('finished_at', '-')} ({verdict.get('seconds', 0):.1f} s)")),
        (
            "gpuready",
            escape(
                f"{verdict.get('gpuready_version', '?')} (verdict schema {verdict.get('schema_version', '?')})"
            ),
        ),
    ]
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>gpuready fleet verdict: {escape(overall.upper())}</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>gpuready fleet verdict</h1>",
        '<dl class="meta">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in meta) + "</dl>",
        "<h2>Nodes x layers</h2>",
        '<table class="matrix"><thead><tr><th>node</th><th>verdict</th>'
        + "".join(f"<th>{layer}</th>" for layer in LAYERS)
        + "<th>checks</th></tr></thead><tbody>",
    ]
    for name in order:
        node = nodes[name]
        status = str(node.get("verdict", "skip"))
        cells = "".join(
            _status_cell(node["layers"][layer]["status"])
            if layer in node.get("layers", {})
            else _status_cell(None)
            for layer in LAYERS
        )
        out.append(
            f'<tr class="node-{escape(status)}"><td class="name"><a href="#{_anchor(name)}">{escape(name)}</a></td>'
            f"{_status_cell(status)}{cells}<td>{escape(_counts(node.get('counts')))}</td></tr>"
        )
    out.append("</tbody></table>")
    for name in order:
        node = nodes[name]
        status = str(node.get("verdict", "skip"))
        out.append(
            f'<section class="node-{escape(status)}" id="{_anchor(name)}">'
            f"<h2>{escape(name)}: {escape(status.upper())}</h2>"
        )
        rows = [
            (layer, check_name, check)
            for layer in LAYERS
            for check_name, check in node.get("layers", {}).get(layer, {}).get("checks", {}).items()
        ]
        if not rows:
            out.append("<p>no check of this node ran</p></section>")
            continue
        rows.sort(
            key=lambda row: ORDER.get(row[2].get("status", "skip"), 1)
        )  # its failures first, then gate order
        out.append(
            "<table><thead><tr><th>layer</th><th>check</th><th>status</th><th>seconds</th><th>message</th>"
            "<th>figures</th></tr></thead><tbody>"
        )
        for layer, check_name, check in rows:
            out.append(
                f"<tr><td>{layer}</td><td>{escape(check_name)}</td>{_status_cell(check.get('status'))}"
                f'<td>{check.get("seconds", 0):.2f}</td><td class="message">{escape(check.get("message", ""))}</td>'
                f"<td>{_figures(check)}</td></tr>"
            )
        out.append("</tbody></table></section>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
