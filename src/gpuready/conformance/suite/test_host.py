"""Host layer: the node's driver, services and container runtime, through testinfra's ``host`` (over SSH, or on
this machine with ``--connection local``). Expectations come from the inventory's NodeSpec; the judging is in
:mod:`gpuready.conformance.checks.host`. Every node's commands run at once before the first check (the services'
``systemctl`` questions included), so the checks read testinfra's answers from the cache."""

import pytest

from gpuready.conformance.checks import Output
from gpuready.conformance.checks import host as checks
from gpuready.conformance.plugin import judge

pytestmark = pytest.mark.host


@pytest.fixture(scope="module", autouse=True)
def _whole_fleet_at_once(gpuready_suite):
    """Every node's host commands run at once, before the first check reads them."""
    gpuready_suite.prefetch("host")


def output(host, command: str) -> Output:
    """What a command printed, through testinfra's ``host.run`` (cached for the run)."""
    result = host.run(command)
    return Output(result.rc, result.stdout, result.stderr)


def unit(host, name: str) -> checks.Unit:
    """testinfra's view of a systemd unit, with systemctl's word for its state for the message."""
    state = host.run("systemctl is-active %s", name)  # the question service.is_running asks: one answer
    if state.rc == 127:
        return checks.Unit(name, False, None, (state.stderr or state.stdout).strip(), systemd=False)
    service = host.service(name)
    try:
        enabled = service.is_enabled
    except RuntimeError:  # testinfra: systemd knows no such unit file
        enabled = None
    return checks.Unit(name, service.is_running, enabled, state.stdout.strip() or state.stderr.strip())


@pytest.fixture
def smi(node, host, gpuready_suite):
    """nvidia-smi's parsed report of the node, parsed once per run (the gpu layer shares it): call it inside
    ``judge``, so a node without a report skips (CannotCheck) the checks that read it."""
    return lambda: gpuready_suite.cached(
        node, checks.SMI_REPORT, lambda: checks.smi_report(output(host, checks.NVIDIA_SMI_COMMAND))
    )


def test_connection(node, node_shell):
    judge(node, node_shell.connection_problems)


def test_nvidia_smi_runs(node, host):
    judge(node, checks.nvidia_smi_runs, output(host, checks.NVIDIA_SMI_COMMAND))


def test_driver_version(node, smi):
    judge(node, lambda: checks.driver_version(node, smi()))


def test_no_driver_library_mismatch(node, host):
    judge(node, checks.driver_library_mismatch, output(host, checks.NVIDIA_SMI_COMMAND))


def test_persistence_mode(node, smi):
    judge(node, lambda: checks.persistence_mode(smi()))


def test_fabric_manager_active(node, host):
    if not node.nvswitch:
        pytest.skip(
            f"{node.name}: not applicable: the inventory says this node has no NVSwitch (nvswitch = False)"
        )
    judge(node, checks.fabric_manager, node, unit(host, checks.FABRIC_MANAGER))


def test_toolkit_version(node, host):
    judge(node, checks.toolkit_version, node, output(host, checks.TOOLKIT_COMMAND))


def test_driver_security_floor(node, smi):
    judge(node, lambda: checks.driver_security(smi()))


def test_toolkit_security_floor(node, host):
    judge(node, checks.toolkit_security, output(host, checks.TOOLKIT_COMMAND))


def test_containerd_nvidia_handler(node, host):
    judge(node, checks.containerd_nvidia_handler, output(host, checks.CONTAINERD_COMMAND))


def test_containerd_cdi(node, host):
    if not node.cdi:
        pytest.skip(f"{node.name}: not applicable: runtime-class mode (nvidia_cdi = False)")
    judge(node, checks.containerd_cdi, output(host, checks.CONTAINERD_COMMAND))


def test_cdi_spec_names_every_device(node, host):
    if not node.cdi:
        pytest.skip(f"{node.name}: not applicable: runtime-class mode (nvidia_cdi = False)")
    judge(
        node,
        checks.cdi_spec,
        output(host, checks.CDI_SPEC_COMMAND),
        output(host, checks.SMI_LIST_COMMAND),
        output(host, checks.NVIDIA_SMI_COMMAND),
    )


def test_kubelet_active(node, host):
    if not node.join.enabled:
        pytest.skip(f"{node.name}: not applicable: the inventory does not join this node (kube_join = False)")
    judge(node, checks.kubelet_active, node, unit(host, checks.KUBELET))
