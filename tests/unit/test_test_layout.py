"""The test tree cannot shadow the conformance suite: pytester runs ``conformance/`` in-process, where a
top-level test module already imported under the same name (tests/unit has no __init__.py) makes its layer file
fail to import ("import file mismatch"), and every in-process suite run with it."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_no_top_level_test_module_shares_a_conformance_file_name():
    layers = {path.name for path in (REPO / "conformance").glob("test_*.py")}
    clashing = [
        str(path.relative_to(REPO))
        for path in (REPO / "tests").rglob("test_*.py")
        if path.name in layers and not (path.parent / "__init__.py").exists()
    ]
    assert clashing == [], f"rename these: they shadow conformance/ layer files of the same name: {clashing}"
