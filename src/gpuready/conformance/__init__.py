"""The conformance side: the pytest plugin, how it reaches nodes (runners), the workloads it runs, the
pure checks and the fleet report.

It never imports the deploy side (an import contract in pyproject.toml says so).
"""

from pathlib import Path

SUITE_DIR = Path(__file__).parent / "suite"
"""The suite's layer files (``test_<layer>.py``) and their conftest, shipped inside the package so that an
installed gpuready has its suite: ``gpuready check`` runs pytest on this directory."""
