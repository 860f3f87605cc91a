"""The Kubernetes layers' command line without a cluster: what a run says when there is none to reach, and the
options ``--discover`` refuses. (The layers themselves run on the lab's real hosts: tests/lab.)"""

from __future__ import annotations

import shutil

import pytest
from shims import GROUP_DATA, JOIN, PROFILE_INVENTORY

from gpuready.conformance import SUITE_DIR


def copy_suite(pytester, *layers: str) -> None:
    target = pytester.path / "conformance"
    target.mkdir()
    for name in layers:
        shutil.copy(SUITE_DIR / name, target / name)


def test_without_a_cluster_the_kubernetes_layers_are_deselected_and_said_so(pytester, tmp_path, monkeypatch):
    copy_suite(pytester, "test_node.py", "test_workloads.py", "test_metrics.py")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    (tmp_path / "group_data").mkdir()
    shutil.copy(GROUP_DATA, tmp_path / "group_data" / "all.py")
    inventory = tmp_path / "inventory.py"
    data = {**PROFILE_INVENTORY["l4-1"], **JOIN, "gpu_sharing": "time-slicing", "sharing_replicas": 4}
    inventory.write_text(f"gpu_nodes = ([('gpu-node-1', {data!r})], {{}})\n")
    result = pytester.runpytest_inprocess(
        "conformance", "--inventory", str(inventory), "-p", "no:cacheprovider"
    )
    result.assert_outcomes(deselected=22)
    result.stdout.fnmatch_lines(
        ["node, workloads, metrics and policy layers not run: no cluster given (--kubeconfig,*"]
    )


def test_discover_is_a_usage_error_with_an_inventory_or_ssh(pytester, tmp_path):
    copy_suite(pytester, "test_host.py", "test_gpu.py", "test_node.py", "test_discovery.py")
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
