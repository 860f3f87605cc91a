"""pytest plugin entry point for the conformance suite.

Registered under the ``pytest11`` entry point so ``pytest conformance --inventory ...`` works from any directory.
Nothing here may connect to a host or a cluster at import or ``--help`` time.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpuready", "gpuready conformance")
    group.addoption(
        "--inventory",
        default=None,
        help="pyinfra inventory file describing the fleet (e.g. inventory/lab.py)",
    )
