"""GPU layer: every GPU the inventory promises is there, healthy and configured as the spec says.

GPU facts come from ``nvidia-smi -q -x`` on the node; with ``--connection local`` they are read through NVML
(pynvml) when this machine has the NVML library, and each GPU also runs a vectorAdd kernel through the CUDA
driver API. The judging is in :mod:`gpuready.conformance.checks.gpu`.
"""

import sys
from typing import Any, NamedTuple

import pytest

from gpuready.conformance.checks import CannotCheck, gpu, host
from gpuready.conformance.plugin import judge

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def _whole_fleet_at_once(gpuready_suite):
    """Every node still in the running runs the gpu layer's commands at once."""
    gpuready_suite.prefetch("gpu")


class GpuFacts(NamedTuple):
    report: Any  # nvidia-smi's report (NVML's with --connection local where it answers)
    pstates: Any  # performance state per GPU
    lost: list[str]  # GPUs nvidia-smi could not reach


@pytest.fixture
def facts(node, node_shell, gpuready_suite):
    """The node's GpuFacts, once per node per run."""
    return gpuready_suite.cached(node, "gpu-facts", lambda: _read_facts(node, node_shell, gpuready_suite))


def _read_facts(node, node_shell, suite):
    connection = suite.connection
    smi = node_shell.run(host.NVIDIA_SMI_COMMAND)
    lost = gpu.lost_gpus(smi)
    if connection == "local":
        from gpuready.conformance import local_gpu

        nvml = local_gpu.nvml_report()
        if nvml is not None:
            report, pstates = nvml
            return GpuFacts(report, pstates, lost)
    try:
        report = suite.cached(node, host.SMI_REPORT, lambda: host.smi_report(smi))
    except CannotCheck as exc:  # the host layer owns nvidia-smi failures
        pytest.skip(f"{node.name}: {exc}")
    return GpuFacts(report, gpu.performance_states(smi.stdout), lost)


def test_gpus_match_spec(node, facts):
    judge(node, gpu.gpus_match_spec, node, facts.report, facts.lost)


def test_no_uncorrectable_ecc_errors(node, facts):
    judge(node, gpu.ecc_errors, facts.report)


def test_no_pending_memory_repairs(node, facts):
    judge(node, gpu.memory_repairs, facts.report)


def test_pcie_link_at_max(node, facts):
    judge(node, gpu.pcie_link, facts.report, facts.pstates)


def test_no_xid_errors(node, node_shell, facts):
    journal = [node_shell.run(command) for command in gpu.JOURNAL_COMMANDS]
    ring = node_shell.run(gpu.RING_BUFFER_COMMAND) if gpu.needs_ring_buffer(journal) else None
    judge(node, gpu.xid_errors, facts.report, journal, ring)


def test_no_clock_throttling(node, facts):
    judge(node, gpu.clock_event_reasons, facts.report)


def test_compute_mode(node, facts):
    judge(node, gpu.compute_mode, node, facts.report)


def test_nvlink_up(node, node_shell, facts):
    if not node.nvswitch:
        pytest.skip(
            f"{node.name}: not applicable: the inventory says this node has no NVSwitch (nvswitch = False)"
        )
    judge(node, gpu.nvlink, node, facts.report, node_shell.run(gpu.NVLINK_COMMAND))


def test_mig_layout(node, node_shell, facts):
    lgi = node_shell.run(gpu.MIG_INSTANCES_COMMAND) if node.mig_enabled_gpus else None
    judge(node, gpu.mig_layout, node, facts.report, lgi)


def test_vector_add(node, node_shell, gpuready_suite):
    if gpuready_suite.connection != "local":
        pytest.skip(
            f"{node.name}: vectorAdd runs on this machine only (--connection local); the workloads layer runs it as a pod"
        )
    out = node_shell.run(f"{sys.executable} -m gpuready.conformance.cuda.vector_add")
    judge(node, gpu.vector_add, node, out)


def test_images_cuda_within_the_driver(node, facts):
    judge(node, gpu.image_cuda, node, facts.report)
