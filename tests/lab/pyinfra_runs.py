"""Running the real pyinfra CLI against the lab, and reading its results table."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PYINFRA = REPO / ".venv" / "bin" / "pyinfra"


@dataclass
class PyinfraRun:
    """One real `pyinfra` CLI run: exit status, output, and its results table (operation -> success/error/no change)."""

    returncode: int
    output: str
    table: dict[str, tuple[int, int, int]]

    @property
    def total(self) -> tuple[int, int, int]:
        return self.table["Grand total"]

    @property
    def failure(self) -> str:
        """For an assertion message: the lines that name an error (a failed command's stderr comes before the
        results table, which fills the end of the output), then the end of the output."""
        marks = ("rror", "ailed", "ERROR", "fatal")
        errors = [line for line in self.output.splitlines() if any(m in line for m in marks)][-40:]
        return "\n".join(errors) + "\n...\n" + self.output[-2500:]

    def changed_operations(self) -> set[str]:
        return {op for op, (success, _, _) in self.table.items() if success and op != "Grand total"}


def _count(cell: str) -> int:
    return 0 if cell == "-" else int(cell)


def run_pyinfra(
    lab: Any,
    *args: str,
    inventory: str = "inventory/lab.py",
    deploy: str = "deploys/gpu_node.py",
    env: dict[str, str] | None = None,
) -> PyinfraRun:
    """Run the pyinfra CLI as a user does, from the repository root (where its config.py lives)."""
    result = subprocess.run(
        [str(PYINFRA if PYINFRA.exists() else "pyinfra"), "-y", *args, inventory, deploy],
        cwd=REPO,
        env={**lab.env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = result.stdout + result.stderr
    return PyinfraRun(result.returncode, output, results_table(output))


def results_table(output: str) -> dict[str, tuple[int, int, int]]:
    """pyinfra's results table (operation -> success, error, no change; pyinfra logs it to stderr): the rows after
    "--> Results:" whose last four cells are counts ("-" for none), up to its "Grand total" row. A line logged
    after the table is no row of it (CI at 84e96a5 crashed on one: a count cell "x")."""
    table: dict[str, tuple[int, int, int]] = {}
    in_results = False
    for line in output.splitlines():
        if line.startswith("--> Results:"):
            in_results = True
            continue
        cells = line.split()
        if in_results and len(cells) >= 5 and all(c == "-" or c.isdigit() for c in cells[-4:]):
            name = " ".join(cells[:-4])
            table[name] = (_count(cells[-3]), _count(cells[-2]), _count(cells[-1]))
            if name == "Grand total":
                break
    return table
