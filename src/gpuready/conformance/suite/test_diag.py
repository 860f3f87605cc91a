"""Diag layer: node acceptance beyond "it runs": copy bandwidth against floors, DCGM's diagnostics.

Runs after the workloads layer, on every node still in the running at once: over SSH it runs NVIDIA's
``nvbandwidth`` and ``dcgmi diag`` where they are installed (each missing tool is a skip with the reason); with
``--connection local`` the bandwidth comes from the CUDA driver API (``python -m gpuready.conformance.cuda.bandwidth``).
Skip the layer with ``-m "not diag"``; ``diag_dcgm_level`` picks the DCGM run level. Every figure (measured,
floor, unit) is in the test's JUnit properties, ``verdict.json`` and the fleet table. The judging is in
:mod:`gpuready.conformance.checks.diag`.
"""

import pytest

from gpuready.conformance.checks import diag
from gpuready.conformance.plugin import judge, judge_measured

pytestmark = pytest.mark.diag


@pytest.fixture(scope="module", autouse=True)
def _whole_fleet_at_once(gpuready_suite):
    """Every node still in the running measures at once: the layer costs the slowest node's time."""
    gpuready_suite.prefetch("diag", lambda node: diag.commands(node, gpuready_suite.connection))


@pytest.fixture
def copies(node, node_shell, gpuready_suite):
    return node_shell.run(diag.bandwidth_command(gpuready_suite.connection))


def test_host_to_device_bandwidth(node, copies, request):
    judge_measured(node, request.node, diag.host_to_device, node, copies)


def test_device_to_host_bandwidth(node, copies, request):
    judge_measured(node, request.node, diag.device_to_host, node, copies)


def test_peer_bandwidth(node, copies, request):
    judge_measured(node, request.node, diag.peer, node, copies)


def test_dcgm_diagnostics(node, node_shell):
    judge(node, diag.dcgm, node, node_shell.run(diag.dcgm_command(node)))
