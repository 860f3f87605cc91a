"""`gpuready plan` on bad inventories written in many styles (tests/unit/bad_inventories/*/inventory.py): each
exits 2, names every bad key its first line lists (``# expect: key, ...``) and prints no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuready.cli import main

HERE = Path(__file__).parent / "bad_inventories"
CASES = sorted(p.name for p in HERE.iterdir() if (p / "inventory.py").is_file())


def test_there_are_forty_or_more():
    assert len(CASES) >= 40


def expected(case: str) -> list[str]:
    first = (HERE / case / "inventory.py").read_text().splitlines()[0]
    assert first.startswith("# expect: "), case
    return [word.strip() for word in first.removeprefix("# expect: ").split(",")]


@pytest.mark.parametrize("case", CASES)
def test_plan_names_the_bad_key_and_exits_2(case, capsys):
    code = main(["plan", str(HERE / case / "inventory.py")])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "Traceback" not in err and "Traceback" not in out
    assert out == ""
    for word in expected(case):
        assert word in err, (word, err)
