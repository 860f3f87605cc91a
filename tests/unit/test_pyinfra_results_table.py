"""The lab tests read pyinfra's results table (tests/lab/pyinfra_runs.results_table) to assert what a deploy
changed: only the table's rows count, up to its Grand total, whatever is logged around it (CI at 84e96a5 crashed
on a line after the table)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HELPER = Path(__file__).resolve().parents[1] / "lab" / "pyinfra_runs.py"


def results_table(output: str) -> dict[str, tuple[int, int, int]]:
    spec = importlib.util.spec_from_file_location("pyinfra_runs_under_test", HELPER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    table: dict[str, tuple[int, int, int]] = module.results_table(output)
    return table


OUTPUT = """\
--> Starting operation: Install the driver
    [gpu-node-1] Success 1 2 3 4
--> Results:
    Operation                     Hosts   Success   Error   No Change
    Install the driver 580        2       1         -       1
    Refresh the apt lists         2       -         -       2
    Grand total                   4       1         -       3
    gpu-node-101  2  x  refused
gpu-node-102 1 2 3 4
"""


def test_only_the_rows_of_the_table_count_up_to_the_grand_total() -> None:
    assert results_table(OUTPUT) == {
        "Install the driver 580": (1, 0, 1),
        "Refresh the apt lists": (0, 0, 2),
        "Grand total": (1, 0, 3),
    }


def test_no_results_section_is_an_empty_table() -> None:
    assert results_table("--> Starting operation: x\n    a 1 2 3 4\n") == {}
