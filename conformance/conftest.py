"""Fixtures of the suite's own directory (the rest come from gpuready's pytest plugin).

``host`` is the node under test as a testinfra host, on the suite's one connection to it (SSH with strict host
keys, or this machine with ``--connection local``). It replaces pytest-testinfra's ``host`` here only: in this
directory a host is a node of the inventory, not a ``--hosts`` entry. A site check file beside the layer files
gets it too (see README.md, "Your own checks").
"""

import pytest

from gpuready.conformance.plugin import node_host


@pytest.fixture
def host(node, gpuready_suite):
    return node_host(node, gpuready_suite)
