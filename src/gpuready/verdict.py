"""Reading a conformance ``verdict.json`` (written by :mod:`gpuready.conformance.report`, described by its
``verdict.schema.json``): the one reader for whoever acts on a verdict, such as the rolling upgrade, which may
import nothing of the conformance side. Pure: a parsed document in, words out."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class VerdictError(ValueError):
    """The file is missing, unreadable, or not a verdict."""


def read(path: str | Path) -> dict[str, Any]:
    """The verdict at ``path``; :class:`VerdictError` naming the file and what is wrong."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise VerdictError(f"{path}: cannot read the verdict ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise VerdictError(f"{path}: not JSON ({exc})") from None
    if not isinstance(document, dict) or not isinstance(document.get("nodes"), dict):
        raise VerdictError(f"{path}: not a gpuready verdict (no 'nodes' object)")
    return document


def failed_checks(verdict: Mapping[str, Any], node: str) -> list[str]:
    """``layer::check: message`` for each failed check of ``node`` (messages on one line, at most 300 chars)."""
    out = []
    entry = (verdict.get("nodes") or {}).get(node) or {}
    for layer, result in (entry.get("layers") or {}).items():
        for check, outcome in (result.get("checks") or {}).items():
            if outcome.get("status") == "fail":
                message = " ".join((outcome.get("message") or "").split())
                out.append(f"{layer}::{check}: {message[:300]}")
    return out


def not_proven(verdict: Mapping[str, Any], node: str) -> list[str]:
    """Why the verdict does not prove ``node`` ready: its failed checks, or, with none failed, that it is not in
    the verdict or that no check of it passed (every check skipped: a node nothing was proven about is not
    ready). Empty when the node's verdict is pass."""
    failed = failed_checks(verdict, node)
    if failed:
        return failed
    entry = (verdict.get("nodes") or {}).get(node)
    if not isinstance(entry, Mapping):
        return [f"{node} is not in the verdict: no check of it ran"]
    status = entry.get("verdict")
    if status is None:  # a verdict of before schema 1.0: its checks' statuses say it
        statuses = {
            c.get("status")
            for layer in (entry.get("layers") or {}).values()
            for c in (layer.get("checks") or {}).values()
        }
        status = "pass" if "pass" in statuses else "skip"
    if status != "pass":
        return [f"no check of {node} passed (its verdict is {status!r}): nothing was proven"]
    return []
