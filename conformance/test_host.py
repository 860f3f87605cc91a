"""Host layer: the node's driver, services and container runtime (over SSH, or on this machine with
``--connection local``). Expectations come from the inventory's NodeSpec; the judging is in
:mod:`gpuready.conformance.checks.host`."""

import pytest

from gpuready.conformance.checks import host
from gpuready.conformance.plugin import judge

pytestmark = pytest.mark.host


@pytest.fixture(scope="module", autouse=True)
def _whole_fleet_at_once(gpuready_suite):
    """Every node's host commands run at once, before the first check reads them."""
    gpuready_suite.prefetch("host", lambda node: ["true", *host.commands(node)])


def test_connection(node, node_shell):
    judge(node, node_shell.connection_problems)


def test_nvidia_smi_runs(node, node_shell):
    judge(node, host.nvidia_smi_runs, node_shell.run(host.NVIDIA_SMI_COMMAND))


def test_driver_version(node, node_shell):
    judge(node, host.driver_version, node, node_shell.run(host.NVIDIA_SMI_COMMAND))


def test_no_driver_library_mismatch(node, node_shell):
    judge(node, host.driver_library_mismatch, node_shell.run(host.NVIDIA_SMI_COMMAND))


def test_persistence_mode(node, node_shell):
    judge(node, host.persistence_mode, node_shell.run(host.NVIDIA_SMI_COMMAND))


def test_fabric_manager_active(node, node_shell):
    if not node.nvswitch:
        pytest.skip(
            f"{node.name}: not applicable: the inventory says this node has no NVSwitch (nvswitch = False)"
        )
    judge(node, host.fabric_manager, node, node_shell.run(host.FABRIC_MANAGER_COMMAND))


def test_toolkit_version(node, node_shell):
    judge(node, host.toolkit_version, node, node_shell.run(host.TOOLKIT_COMMAND))


def test_driver_security_floor(node, node_shell):
    judge(node, host.driver_security, node_shell.run(host.NVIDIA_SMI_COMMAND))


def test_toolkit_security_floor(node, node_shell):
    judge(node, host.toolkit_security, node_shell.run(host.TOOLKIT_COMMAND))


def test_containerd_nvidia_handler(node, node_shell):
    judge(node, host.containerd_nvidia_handler, node_shell.run(host.CONTAINERD_COMMAND))


def test_kubelet_active(node, node_shell):
    if not node.join.enabled:
        pytest.skip(f"{node.name}: not applicable: the inventory does not join this node (kube_join = False)")
    judge(node, host.kubelet_active, node, node_shell.run(host.KUBELET_COMMAND))
