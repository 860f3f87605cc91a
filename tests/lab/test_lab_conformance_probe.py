"""``--connection pod`` on the deployed session lab: the host and gpu layers through probe pods only (the suite
opens no SSH session; the node agent runs each probe's command on its lab host, so the answers are the hosts' real
state). Healthy, every node passes; with a fault injected on one host, the matching check fails on that node only.
"""

from __future__ import annotations

import pytest
from suite_runs import failed, node_of, run_suite

from gpuready import kube
from gpuready.conformance import workloads as wl
from gpuready.lab import hosts
from gpuready.lab.state import load_state

pytestmark = pytest.mark.lab

POD = ("--connection", "pod", "-m", "host or gpu")


def probe_namespaces(deployed_lab) -> list[str]:
    state = load_state(deployed_lab.lab.paths) or {}
    cluster = kube.connect(state["apiserver"]["kubeconfig"])
    return [
        n.metadata.name
        for n in cluster.core.list_namespace().items
        if n.metadata.name.startswith(wl.NAMESPACE_PREFIX + "probe-") and n.status.phase == "Active"
    ]


def test_healthy_lab_passes_the_host_and_gpu_layers_through_probe_pods(deployed_lab, tmp_path):
    verdict = run_suite(deployed_lab, tmp_path, *POD)
    assert failed(verdict) == {}
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


FAULTS = [
    # (fault, GPU, lab profile, the check that must fail, words its message must carry)
    ("driver-mismatch", None, "l4-1", "host/test_no_driver_library_mismatch", "mismatch"),
    ("ecc-uncorrectable", 0, "a100-80gb-4", "gpu/test_no_uncorrectable_ecc_errors", "ECC"),
    ("pcie-downgrade", 0, "l4-1", "gpu/test_pcie_link_at_max", "PCIe"),
]


@pytest.mark.parametrize(("fault", "gpu", "profile", "check", "words"), FAULTS, ids=[f[0] for f in FAULTS])
def test_a_fault_fails_its_check_through_the_probe_on_that_node_only(
    deployed_lab, tmp_path, fault, gpu, profile, check, words
):
    node = node_of(deployed_lab, profile)
    hosts.inject_fault(deployed_lab.lab.paths, node, fault, gpu)
    try:
        verdict = run_suite(deployed_lab, tmp_path, *POD)
    finally:
        hosts.inject_fault(deployed_lab.lab.paths, node, None)
    bad = failed(verdict)
    assert list(bad) == [node], bad
    assert check in bad[node], bad[node]
    assert bad[node][check].startswith(f"{node}: ") and words in bad[node][check]
    assert not probe_namespaces(deployed_lab)
