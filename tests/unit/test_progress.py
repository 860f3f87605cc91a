"""Progress lines while the suite waits on pods: what it waits for, how many are pending; shown unless -q."""

from __future__ import annotations

import logging

import pytest

from gpuready.conformance.checks import PodResult
from gpuready.conformance.workloads import PROGRESS_EVERY, progress_line

pytest_plugins = ["pytester"]


def test_the_line_names_the_checks_the_count_the_states_and_the_nodes():
    waiting = {
        "va-1": PodResult("va-1", "gpu-node-1", phase="Pending", reason="ContainerCreating"),
        "va-2": PodResult("va-2", "gpu-node-2", phase="Pending", reason="ContainerCreating"),
        "ts-1": PodResult("ts-1", "gpu-node-2", phase="Pending"),
    }
    goals = {"va-1": "finished", "va-2": "finished", "va-3": "finished", "ts-1": "running"}
    checks = {"va-1": "vector-add", "va-2": "vector-add", "va-3": "vector-add", "ts-1": "time-slicing"}
    line = progress_line("gpuready-conformance-1234", waiting, goals, checks, 4, 87.6)
    assert line == (
        "waiting for time-slicing to run; vector-add to finish in gpuready-conformance-1234: "
        "3 of 4 pods still pending (2 ContainerCreating, 1 Pending) on gpu-node-1, gpu-node-2; 87 s left"
    )
    assert PROGRESS_EVERY <= 10


def test_many_nodes_are_cut_short():
    waiting = {f"p{i}": PodResult(f"p{i}", f"n{i:02d}", phase="Pending") for i in range(12)}
    line = progress_line("ns", waiting, dict.fromkeys(waiting, "finished"), {}, 12, 5)
    assert "12 of 12 pods still pending (12 Pending) on n00, n01, n02, n03, n04 and 7 more; 5 s left" in line


TEST_FILE = """
import logging

def test_waits():
    logging.getLogger("gpuready.conformance.progress").info("waiting for vector-add to finish: 1 of 2 pods")
"""


@pytest.mark.parametrize(("args", "shown"), [((), True), (("-v",), True), (("-q",), False)])
def test_the_plugin_prints_progress_unless_quiet(pytester, args, shown):
    pytester.makepyfile(TEST_FILE)
    progress = logging.getLogger("gpuready.conformance.progress")
    before = list(progress.handlers)  # the outer session's own, where its plugin added one
    result = pytester.runpytest("-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=1)
    line = "gpuready: waiting for vector-add to finish: 1 of 2 pods"
    assert (line in result.stdout.str()) is shown
    assert progress.handlers == before  # the inner run's handler removed at the end of its run


class FakeCore:
    """A namespace whose pods never leave Pending: the watch sends nothing, as for pods waiting on a busy GPU."""

    def __init__(self) -> None:
        self.created: list[str] = []

    def create_namespace(self, body):
        pass

    def create_namespaced_pod(self, namespace, body):
        self.created.append(body["metadata"]["name"])

    def list_namespaced_pod(self, namespace, _preload_content=True, **kwargs):
        items = [
            {"metadata": {"name": n}, "status": {"phase": "Pending", "conditions": []}}
            for n in self.created[:1]
        ]
        body = {"items": items, "metadata": {"resourceVersion": "1"}}
        return type("Raw", (), {"data": __import__("json").dumps(body).encode()})()

    def list_namespaced_event(self, namespace, **kwargs):
        return type("Events", (), {"items": []})()


class SilentWatch:
    def __init__(self) -> None:
        self.get_return_type = None

    def stream(self, func, *args, timeout_seconds, **kwargs):
        import time

        time.sleep(0.05)  # the API server ends an idle watch after timeout_seconds (scaled down here)
        return iter(())

    def stop(self):
        pass


def test_a_wait_with_no_events_still_prints_progress(monkeypatch, caplog):
    from kubernetes import watch

    from gpuready.conformance import workloads

    monkeypatch.setattr(workloads, "PROGRESS_EVERY", 0.1)
    monkeypatch.setattr(watch, "Watch", SilentWatch)
    core = FakeCore()
    run = workloads.Workloads(type("Cluster", (), {"core": core, "request_timeout": 1.0})(), namespace="ns-1")
    pods = [
        ({"metadata": {"name": f"va-{i}", "labels": {"gpuready.io/check": "vector-add"},
                       "annotations": {"gpuready.io/node": f"gpu-node-{i}"}}}, "finished")
        for i in (1, 2)
    ]  # fmt: skip
    with caplog.at_level(logging.INFO, logger="gpuready.conformance.progress"):
        results = run.run(pods, timeout=0.5)
    assert all(r.timed_out for r in results.values())
    lines = [r.getMessage() for r in caplog.records if r.name == "gpuready.conformance.progress"]
    assert 2 <= len(lines) <= 6, lines  # about one per PROGRESS_EVERY, none more often
    assert lines[0].startswith(
        "waiting for vector-add to finish in ns-1: 2 of 2 pods still pending (1 Pending, 1 not seen yet) "
        "on gpu-node-1, gpu-node-2; "
    )
