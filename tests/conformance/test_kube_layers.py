"""The node, workloads and metrics layers (conformance/) in-process against the API simulator: a healthy fleet
passes every check; each fault fails the matching check on that node only, with a message naming the cause;
the run's namespace is gone after success, failure, timeout and Ctrl-C."""

from __future__ import annotations

import json
import shutil

import pytest
from kube_fleet import make_fleet, wait_for
from shims import REPO, read_verdict

from gpuready import workloads as wl

KUBE_LAYERS = ("node", "workloads", "metrics")


@pytest.fixture
def kube_suite(pytester):
    target = pytester.path / "conformance"
    target.mkdir()
    for name in ("test_node.py", "test_workloads.py", "test_metrics.py"):
        shutil.copy(REPO / "conformance" / name, target / name)
    return target


@pytest.fixture
def fleets(tmp_path):
    started = []

    def make(**kw):
        fleet = make_fleet(tmp_path / f"fleet{len(started)}", **kw)
        started.append(fleet)
        fleet.converged()
        return fleet

    yield make
    for fleet in started:
        fleet.sim.stop()


def run(pytester, fleet, *args):
    report = pytester.path / "report"
    result = pytester.runpytest_inprocess(
        "conformance", "--inventory", str(fleet.inventory), "--kubeconfig", str(fleet.sim.kubeconfig_path),
        "--timeout", "20", "--report-dir", str(report), "-p", "no:cacheprovider", "-rs", *args,
    )  # fmt: skip
    return result, read_verdict(report)


def checks(verdict, node):
    return {
        f"{layer}/{check}": (r["status"], r["message"])
        for layer, data in verdict["nodes"][node]["layers"].items()
        for check, r in data["checks"].items()
    }


def failures(verdict):
    return {
        f"{node}:{key}": message
        for node in verdict["nodes"]
        for key, (status, message) in checks(verdict, node).items()
        if status == "fail"
    }


def run_namespaces(fleet):
    return [
        ns for ns in fleet.sim.store.list("namespaces", "")[0]
        if ns["metadata"]["name"].startswith(wl.NAMESPACE_PREFIX)
    ]  # fmt: skip


def assert_cleaned_up(fleet):
    wait_for(lambda: not run_namespaces(fleet), what="the run's namespace deleted")
    assert not [
        p for p in fleet.sim.store.list("pods", "")[0] if p["metadata"]["namespace"].startswith("gpuready-")
    ]


def test_healthy_fleet_passes_every_check(pytester, kube_suite, fleets):
    fleet = fleets()
    result, verdict = run(pytester, fleet)
    assert failures(verdict) == {}
    assert result.ret == 0
    h100, a100, l4 = fleet.nodes
    assert checks(verdict, l4)["workloads/test_time_slicing"][0] == "pass"
    assert checks(verdict, a100)["workloads/test_mig_devices"][0] == "pass"
    assert checks(verdict, h100)["workloads/test_time_slicing"][0] == "skip"
    for node in fleet.nodes:
        statuses = {k: s for k, (s, _m) in checks(verdict, node).items()}
        assert statuses["workloads/test_vector_add"] == "pass"
        assert statuses["metrics/test_running_pod_in_labels"] == "pass"
        assert statuses["node/test_allocatable"] == "pass"
    assert_cleaned_up(fleet)
