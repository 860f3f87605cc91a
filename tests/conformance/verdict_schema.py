"""Validate a verdict.json against the schema the package ships (gpuready/conformance/verdict.schema.json).

Every test that produces a verdict calls :func:`assert_valid_verdict` (``shims.read_verdict`` does, so every
suite run on a fake node is checked)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema

from gpuready.conformance.report import schema


@functools.cache
def validator() -> jsonschema.protocols.Validator:
    loaded = schema()
    cls = jsonschema.validators.validator_for(loaded)
    cls.check_schema(loaded)
    return cls(loaded, format_checker=cls.FORMAT_CHECKER)


def assert_valid_verdict(verdict: dict[str, Any]) -> None:
    errors = sorted(validator().iter_errors(verdict), key=lambda e: list(e.absolute_path))
    assert not errors, "verdict.json does not match its schema:\n" + "\n".join(
        f"  {'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in errors[:20]
    )


def read_valid_verdict(report_dir: Path) -> dict[str, Any]:
    verdict = json.loads((Path(report_dir) / "verdict.json").read_text())
    assert_valid_verdict(verdict)
    return verdict
