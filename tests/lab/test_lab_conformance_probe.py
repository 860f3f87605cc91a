"""``--connection pod`` on the deployed session lab: the host and gpu layers through probe pods only (the suite opens
no SSH session; the kubelet runs each probe pod on its lab host, so the answers are the hosts' real state). Healthy,
every node passes, each through one probe pod (with ``--discover`` too). Then every fault of ``gpuready.lab.faults``
that the host or gpu layer judges (all but the diag layer's slow-gpu and dcgm-memory, and retired-pages-pending,
which needs a pre-Ampere board the session lab has none of: tests/conformance/test_suite_on_mock_silicon.py proves
it on a T4) is injected on a real host, three at once, one per host: each faulted node fails the check that names
its fault, with the node and the cause in the message, and the failing nodes are exactly the faulted ones.

    off-bus, xid-79            a GPU off the bus: gpus_match_spec names it lost / its XID 79 in the journal
    xid-48                     the XID 48 kernel line (double-bit ECC) from the host's journal
    ecc-uncorrectable          nvidia-smi's uncorrectable ECC count
    row-remap-pending          nvidia-smi's pending row remapping
    pcie-downgrade             nvidia-smi's PCIe link below its maximum
    nvlink-down                `nvidia-smi nvlink -s` on the NVSwitch node
    fabricmanager-failed       the host's systemd: Fabric Manager failed to (re)start
    driver-mismatch            nvidia-smi's "Driver/library version mismatch"
"""

from __future__ import annotations

from typing import NamedTuple

import pytest
from suite_runs import (
    DISCOVER,
    INVENTORY,
    failed,
    gpu_allocatable,
    lab_cluster,
    node_of,
    restore_allocatable,
    run_suite,
    suite_namespaces,
    wait_until_settled,
)

from gpuready.conformance import probe
from gpuready.conformance import workloads as wl
from gpuready.lab import faults, hosts
from gpuready.lab.state import load_state

pytestmark = pytest.mark.lab

POD = ("--connection", "pod", "-m", "host or gpu")
# Every test runs twice: the expectations from inventory/lab.py, and with --discover from the cluster itself (the
# lab's mixed MIG A100 among them: a discovery that could not read its layout once dropped it and passed the run).
SOURCES = pytest.mark.parametrize("source", [INVENTORY, DISCOVER], ids=["inventory", "discover"])


def lab_hosts(deployed_lab) -> list[str]:
    return sorted((load_state(deployed_lab.lab.paths) or {})["hosts"])


def probe_namespaces(deployed_lab) -> set[str]:
    return suite_namespaces(lab_cluster(deployed_lab), "Active", prefix=wl.NAMESPACE_PREFIX + "probe-")


def probe_pods_since(deployed_lab, resource_version: str) -> dict[str, dict[str, str | None]]:
    """The pods created in probe namespaces since ``resource_version``: {namespace: {pod: its node}}, from the API
    server's own record (a watch from that version replays every pod event since, then ends after its timeout)."""
    from kubernetes import watch

    prefix = wl.NAMESPACE_PREFIX + "probe-"
    core = lab_cluster(deployed_lab).core
    created: dict[str, dict[str, str | None]] = {}
    for event in watch.Watch().stream(
        core.list_pod_for_all_namespaces, resource_version=resource_version, timeout_seconds=5
    ):
        pod = event["object"]
        if pod.metadata.namespace.startswith(prefix):
            pods = created.setdefault(pod.metadata.namespace, {})
            pods[pod.metadata.name] = pod.spec.node_name or pods.get(pod.metadata.name)
    return created


@SOURCES
def test_healthy_lab_passes_the_host_and_gpu_layers_through_probe_pods(deployed_lab, tmp_path, source):
    """Healthy, every node passes both layers, and the run made one probe pod per node (one namespace for the run):
    the host and gpu layers share each node's probe, whatever the number of checks."""
    wait_until_settled(deployed_lab)  # a module before may have restarted a kubelet or an add-on
    before = lab_cluster(deployed_lab).core.list_pod_for_all_namespaces(limit=1).metadata.resource_version
    verdict = run_suite(deployed_lab, tmp_path, *POD, source=source)
    created = probe_pods_since(deployed_lab, before)
    print(f"probe pods ({source[0]}): {created}")  # a number for the closing note
    assert failed(verdict) == {}
    # with --discover too: discovery's probe asks the layers' commands (an NVSwitch node's among them) in one pod
    (namespace,) = created
    assert created[namespace] == {probe.pod_name(n, 1): n for n in lab_hosts(deployed_lab)}, created
    assert sorted(verdict["nodes"]) == lab_hosts(deployed_lab), "every lab host is in the verdict"
    for node, data in verdict["nodes"].items():
        for layer in ("host", "gpu"):
            checks = data["layers"][layer]["checks"]
            assert (
                checks["test_connection" if layer == "host" else "test_gpus_match_spec"]["status"] == "pass"
            )
            assert {r["status"] for r in checks.values()} <= {"pass", "skip"}, (node, layer, checks)
    h100 = verdict["nodes"][node_of(deployed_lab, "h100-sxm-8")]["layers"]
    assert h100["host"]["checks"]["test_fabric_manager_active"]["status"] == "pass"  # the host's systemd
    assert h100["gpu"]["checks"]["test_nvlink_up"]["status"] == "pass"
    assert not probe_namespaces(deployed_lab)


class Injected(NamedTuple):
    profile: str  # the session lab's host of this profile gets the fault
    fault: str
    gpu: int | None
    check: str  # the check that must fail on that node
    words: str  # what its message must carry


# The session lab's hosts: h100-sxm-8 (NVSwitch, Fabric Manager), a100-80gb-4 (NVLink, MIG on every GPU), l4-1 (one
# PCIe GPU, time-sliced). NVLink and Fabric Manager faults need the NVSwitch node, so it carries one in every round.
# A pending row remapping goes to the L4: a MIG-enabled GPU's nvidia-smi report has no remapped rows (N/A, as in
# the real A100 capture telegraf__a100-sxm4-v12.xml), so on the A100 only its XID 63 would show it.
ROUNDS = [
    (
        Injected("h100-sxm-8", "fabricmanager-failed", None, "host/test_fabric_manager_active",
                 "Fabric Manager is failed"),
        Injected("a100-80gb-4", "ecc-uncorrectable", 1, "gpu/test_no_uncorrectable_ecc_errors",
                 "GPU 1: 2 uncorrectable ECC error(s)"),
        Injected("l4-1", "driver-mismatch", None, "host/test_no_driver_library_mismatch",
                 "Driver/library version mismatch"),
    ),
    (
        Injected("h100-sxm-8", "nvlink-down", 3, "gpu/test_nvlink_up", "GPU 3: NVLink down"),
        Injected("a100-80gb-4", "xid-48", 2, "gpu/test_no_xid_errors", "XID 48 on GPU 2 (PCI:0000:47:00)"),
        Injected("l4-1", "pcie-downgrade", 0, "gpu/test_pcie_link_at_max", "GPU 0: PCIe link trained at"),
    ),
    (
        Injected("h100-sxm-8", "xid-79", 5, "gpu/test_no_xid_errors",
                 "XID 79 on a GPU not in nvidia-smi's report (PCI:0000:ab:00)"),
        Injected("a100-80gb-4", "off-bus", 3, "gpu/test_gpus_match_spec",
                 "GPU 0000:4E:00.0 (Unknown Error): fallen off the bus?"),
        Injected("l4-1", "row-remap-pending", 0, "gpu/test_no_pending_memory_repairs",
                 "GPU 0: a row remapping is pending"),
    ),
]  # fmt: skip
# With --discover, a fault that makes the node contradict its own declarations fails the discovery's check first
# (host layer: the gpu layer is then skipped on that node). The device plugin takes a GPU that raised a critical XID
# out of the allocatable, as the real one does on its health events: fewer devices than GFD's labels count.
FOUND_BY_DISCOVERY: dict[str, tuple[str, str]] = {
    "nvlink-down": ("host/test_labels_agree", "allocatable nvidia.com/gpu = 7, but the labels say 8"),
    "xid-48": ("host/test_labels_agree", "allocatable nvidia.com/mig-1g.10gb = 6, but the labels say 8"),
    "row-remap-pending": (
        "host/test_labels_agree",
        "allocatable nvidia.com/gpu = absent, but the labels say 4",
    ),
}
# On real kubelets the cluster learns of a fault at the real components' pace: NVIDIA's plugin takes an XID'd GPU
# out of the allocatable after its health event (seconds), GFD relabels every 60 s (its sleep-interval). A discover
# run just after the injection may read the labels and allocatable from before the fault, so the node fails by the
# check that finds the host and its (stale) labels disagreeing, or by the fault's own check; any of them names it.
STALE_LABELS: dict[str, tuple[str, str]] = {
    "xid-79": (
        "host/test_labels_match_nvidia_smi",
        "GFD label nvidia.com/gpu.count = 8, but nvidia-smi lists 7",
    ),
    "off-bus": ("host/test_expectations_read", "fit no layout of 3 GPU(s)"),
}
NOT_HERE = {"slow-gpu", "dcgm-memory", "retired-pages-pending"}  # diag layer; a pre-Ampere board (see above)

# Fabric Manager fails when it starts (after a reboot or a driver upgrade): the lab restarts the unit once the fault
# is in, and starts it again once the fault is cleared.
AFTER_INJECT = {"fabricmanager-failed": "systemctl restart nvidia-fabricmanager"}
AFTER_CLEAR = {
    "fabricmanager-failed": "systemctl reset-failed nvidia-fabricmanager; systemctl start nvidia-fabricmanager"
}


def test_every_host_and_gpu_fault_is_injected_once():
    injected = [i.fault for round_ in ROUNDS for i in round_]
    assert sorted(injected) == sorted(set(faults.FAULTS) - NOT_HERE)
    for round_ in ROUNDS:
        assert len({i.profile for i in round_}) == len(round_)  # one fault per host per round


@SOURCES
@pytest.mark.parametrize("round_", ROUNDS, ids=["+".join(i.fault for i in r) for r in ROUNDS])
def test_faults_fail_their_checks_through_the_probe_on_the_faulted_nodes_only(
    deployed_lab, tmp_path, round_, source
):
    lab = deployed_lab.lab
    where = {node_of(deployed_lab, i.profile): i for i in round_}
    before = {node: gpu_allocatable(deployed_lab, node) for node in where}
    try:
        for node, i in where.items():
            hosts.inject_fault(lab.paths, node, i.fault, i.gpu)
            if i.fault in AFTER_INJECT:
                lab.ssh(node, AFTER_INJECT[i.fault], check=False)
        verdict = run_suite(deployed_lab, tmp_path, *POD, source=source)
    finally:
        for node, i in where.items():
            hosts.inject_fault(lab.paths, node, None)
            if i.fault in AFTER_CLEAR:
                lab.ssh(node, AFTER_CLEAR[i.fault])
            restore_allocatable(deployed_lab, node, i.fault, before[node])
    bad = failed(verdict)
    faulted = {node: f"{i.fault} on {i.profile}" for node, i in where.items()}
    assert set(bad) == set(where), f"faulted {faulted}; failing nodes: {bad}"
    assert sorted(verdict["nodes"]) == lab_hosts(deployed_lab), "every lab host is in the verdict"
    for node, i in where.items():
        what = f"{i.fault} on {node} ({i.profile}, GPU {i.gpu})"
        if source == DISCOVER:  # the cluster's view may still be from before the fault: any of these
            ways = [
                (i.check, i.words),
                *(w[i.fault] for w in (FOUND_BY_DISCOVERY, STALE_LABELS) if i.fault in w),
            ]
            caught = [(c, w) for c, w in ways if w in bad[node].get(c, "")]
            assert caught, f"{what}: none of {ways} failed; what failed there: {bad[node]}"
            continue
        assert i.check in bad[node], f"{what}: {i.check} did not fail; what failed there: {bad[node]}"
        message = bad[node][i.check]
        assert message.startswith(f"{node}: ") and i.words in message, f"{what}: {i.check} says {message!r}"
    assert not probe_namespaces(deployed_lab)
