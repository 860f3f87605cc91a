"""``--discover`` on the lab's real control plane: no inventory at all, the expectations from the cluster itself.

A fleet of virtual nodes with stand-in hosts (as test_kube_probe.py) and gpuready's add-ons, or the add-ons laid
out as the GPU Operator lays them out (namespace gpu-operator, nvidia-device-plugin-daemonset, the config in
time-slicing-config). The suite discovers the GPU nodes from GFD's labels, the device plugin's config (found from
its pods, whatever their namespace) and one probe per node, then runs every layer against that. A healthy fleet
passes; a node whose allocatable disagrees with its (stale) labels and a node whose driver differs from its pool
each fail that node only, naming the label or version and what was expected; ``gpuready discover`` writes an
inventory that, fed back with ``--inventory``, passes."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from kube_fleet import OPERATOR_NAMESPACE, make_fleet
from polling import wait_for
from shims import read_verdict
from static_tools import static_tools
from test_kube_probe import assert_cleaned_up, failures, statuses

from gpuready.conformance import SUITE_DIR

TS = {"gpu_sharing": "time-slicing", "sharing_replicas": 4, "nvidia_cdi": False}
# one H100 and a pool of three time-sliced L4s; runtime-class mode (the stand-ins' containerd 1.6 has no CDI)
HOSTS = [("h100-sxm-8", {"nvidia_cdi": False}), ("l4-1", TS), ("l4-1", TS), ("l4-1", TS)]
OTHER_DRIVER = "580.95.05"
LAYERS = (
    "test_discovery.py",
    "test_host.py",
    "test_gpu.py",
    "test_node.py",
    "test_workloads.py",
    "test_metrics.py",
)


@pytest.fixture
def suite_dir(pytester):
    target = pytester.path / "conformance"
    target.mkdir()
    for name in LAYERS:
        shutil.copy(SUITE_DIR / name, target / name)
    return target


@pytest.fixture
def fleets(lab_cluster, api, virtual_nodes, tmp_path):
    started = []

    def make(**kw):
        fleet = make_fleet(
            lab_cluster,
            api,
            virtual_nodes,
            tmp_path / f"fleet{len(started)}",
            HOSTS,
            stand_ins=True,
            **kw,
        )
        started.append(fleet)
        fleet.converged()
        return fleet

    yield make
    for fleet in started:
        fleet.delete()
    if any(f.namespace == OPERATOR_NAMESPACE for f in started):  # the next one must not find it Terminating
        wait_for(lambda: OPERATOR_NAMESPACE not in {n.metadata.name for n in started[0].core.list_namespace().items},
                 what="namespace gpu-operator gone")  # fmt: skip


def run(pytester, fleet, *more):
    report = pytester.path / "report"
    shutil.rmtree(report, ignore_errors=True)
    result = pytester.runpytest_inprocess(
        "conformance", "--kubeconfig", str(fleet.kubeconfig), "--command-timeout", "20", "--pod-timeout", "90",
        "--report-dir", str(report), "-p", "no:cacheprovider", "-rs", *more,
    )  # fmt: skip
    return result, read_verdict(report)


def test_discover_with_no_inventory_passes_a_healthy_fleet(pytester, suite_dir, fleets):
    fleet = fleets()
    result, verdict = run(pytester, fleet, "--discover")
    assert failures(verdict) == {}, result.stdout.str()[-3000:]
    assert result.ret == 0
    assert set(verdict["nodes"]) == set(fleet.nodes)  # the GPU nodes, found by their capacity and labels
    for node in fleet.nodes:
        got = statuses(verdict, node)
        for check in ("host/test_labels_agree", "host/test_labels_match_nvidia_smi", "host/test_versions_match_pool",
                      "host/test_driver_version", "gpu/test_gpus_match_spec", "node/test_allocatable",
                      "node/test_gfd_labels", "workloads/test_vector_add"):  # fmt: skip
            assert got[check] == "pass", (node, check, got)
    # the H100's GPUs report an NVSwitch fabric: Fabric Manager and NVLinks are checked
    h100 = next(iter(fleet.nodes))
    assert statuses(verdict, h100)["host/test_fabric_manager_active"] == "pass"
    assert statuses(verdict, h100)["gpu/test_nvlink_up"] == "pass"
    text = result.stdout.str()
    assert (
        "--discover: pools (product + sharing): NVIDIA-H100-80GB-HBM3: 1 node(s); NVIDIA-L4-SHARED time-slicing x4: 3 node(s)"
        in text
    )
    inventory = (pytester.path / "report" / "discovered-inventory.py").read_text()
    assert all(f"({node!r}, {{" in inventory for node in fleet.nodes)
    assert_cleaned_up(fleet)


def test_discover_catches_allocatable_against_labels_and_a_driver_against_its_pool(
    pytester, suite_dir, fleets
):
    fleet = fleets(configs={"time-slicing-2-envvar": TIME_SLICING_2})
    h100, stale, odd, fine = fleet.nodes
    # GFD stops: its labels stay as they were; the device plugin then takes another config (2 replicas)
    fleet.delete_daemonset("gpu-feature-discovery")
    fleet.core.patch_node(
        stale, {"metadata": {"labels": {"nvidia.com/device-plugin.config": "time-slicing-2-envvar"}}}
    )
    wait_for(
        lambda: fleet.node(stale)["status"]["allocatable"].get("nvidia.com/gpu") == "2", what="2 replicas"
    )
    # one L4 of the pool was upgraded to another driver (and rebooted into it, persistence mode set again)
    stand_in = fleet.stand_ins[odd]
    (stand_in.bin / "nvidia-smi").write_text(
        f"#!/bin/sh\nexport GPUREADY_LAB_DRIVER_VERSION={OTHER_DRIVER} GPUREADY_LAB_BOOT_ID=upgraded\n"
        f'exec "{static_tools()}" nvidia-smi "$@"\n'
    )
    stand_in.prepare_driver()
    result, verdict = run(pytester, fleet, "--discover", "-m", "host or gpu or node")
    bad = failures(verdict)
    assert {key.split(":")[0] for key in bad} == {stale, odd}, bad
    assert bad[f"{stale}:host/test_labels_agree"].startswith(
        f"{stale}: allocatable nvidia.com/gpu = 2, but the labels say 4 (nvidia.com/gpu.count = 1 x "
        "nvidia.com/gpu.replicas = 4)"
    ), bad
    assert "has replicas 2" in bad[f"{stale}:host/test_labels_agree"]
    pool = "NVIDIA-L4-SHARED time-slicing x4"
    assert bad[f"{odd}:host/test_versions_match_pool"] == (
        f"{odd}: NVIDIA driver is {OTHER_DRIVER}, but 2 of 3 nodes of pool {pool!r} run 580.178.04"
    )
    assert f"but nvidia-smi says driver {OTHER_DRIVER!r}" in bad[f"{odd}:host/test_labels_match_nvidia_smi"]
    assert "the inventory pins 580.178.04" in bad[f"{odd}:host/test_driver_version"]
    assert statuses(verdict, odd)["node/test_allocatable"] == "skip"  # gated: the host layer failed
    assert result.ret == 1
    # pinned to the odd one out: the other two L4s (and the H100) differ from the pin
    _result, verdict = run(pytester, fleet, "--discover", "-m", "host", "--expect-driver", OTHER_DRIVER)
    pinned = {k for k in failures(verdict) if k.endswith("test_versions_match_pool")}
    assert {k.split(":")[0] for k in pinned} == {h100, stale, fine}
    assert_cleaned_up(fleet)


TIME_SLICING_2 = """\
version: v1
flags:
  migStrategy: none
  plugin:
    deviceListStrategy: envvar
sharing:
  timeSlicing:
    renameByDefault: false
    failRequestsGreaterThanOne: false
    resources:
    - name: nvidia.com/gpu
      replicas: 2
"""


def test_gpu_operator_layout_discovered_inventory_fed_back_passes(pytester, suite_dir, fleets, tmp_path):
    fleet = fleets(layout="gpu-operator")
    plugin = [
        p
        for p in fleet.pods(OPERATOR_NAMESPACE)
        if p["metadata"]["name"].startswith("nvidia-device-plugin-daemonset-")
    ]
    assert len(plugin) == len(fleet.nodes)
    out = subprocess.run(
        [sys.executable, "-m", "gpuready.cli", "discover", "--kubeconfig", str(fleet.kubeconfig),
         "--command-timeout", "20", "--pod-timeout", "90"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"{len(fleet.nodes)} GPU node(s) in 2 pool(s), 0 problem(s)" in out.stderr, out.stderr
    inventory = tmp_path / "discovered.py"
    inventory.write_text(out.stdout)
    assert "'kube_join': False" in out.stdout and "ssh_" not in out.stdout
    assert (
        "'sharing_replicas': 4" in out.stdout and "'nvidia_cdi': False" in out.stdout
    )  # from time-slicing-config
    assert_cleaned_up(fleet)  # the CLI's probes too
    result, verdict = run(pytester, fleet, "--inventory", str(inventory), "--connection", "pod")
    assert failures(verdict) == {}, result.stdout.str()[-3000:]
    assert result.ret == 0
    for node in fleet.nodes:
        got = statuses(verdict, node)
        assert (
            got["node/test_device_plugin_ready"] == "pass" and got["workloads/test_vector_add"] == "pass"
        ), got
        assert "host/test_labels_agree" not in got  # discovery checks only run with --discover
    # and --discover itself on that layout
    result, verdict = run(pytester, fleet, "--discover", "-m", "host or node")
    assert failures(verdict) == {}, result.stdout.str()[-3000:]
    # no inventory names the labels to join with: test_labels_agree judges them instead
    for node in fleet.nodes:
        assert statuses(verdict, node)["node/test_inventory_labels"] == "skip"
    assert_cleaned_up(fleet)


def test_discover_is_a_usage_error_with_an_inventory_or_ssh(pytester, suite_dir, tmp_path):
    inv = tmp_path / "inv.py"
    inv.write_text("gpu_nodes = ([], {})\n")
    result = pytester.runpytest_inprocess(
        "conformance", "--discover", "--inventory", str(inv), "-p", "no:cacheprovider"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "give it or --inventory, not both" in result.stderr.str()
    result = pytester.runpytest_inprocess(
        "conformance", "--discover", "--connection", "ssh", "-p", "no:cacheprovider"
    )
    assert "discovered nodes have no SSH data" in result.stderr.str()
