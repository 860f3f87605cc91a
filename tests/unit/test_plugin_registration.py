"""The upgrade's wait for a rebooted node's device plugin resources, and its restart of a plugin the kubelet dropped
(kubernetes/kubernetes#121994): when it restarts, when it waits, when it gives up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from kubernetes import client

from gpuready.deploy.upgrade import registration

NOW = datetime.now(UTC)
MIG = "nvidia.com/mig-1g.10gb"


def _node(allocatable: dict[str, str]) -> client.V1Node:
    capacity = {k: "8" for k in allocatable}
    return client.V1Node(metadata=client.V1ObjectMeta(name="n1"),
                         status=client.V1NodeStatus(allocatable=allocatable, capacity=capacity))  # fmt: skip


def _plugin(name: str, ready_for_s: float, node: str = "n1") -> client.V1Pod:
    ready = client.V1PodCondition(
        type="Ready", status="True", last_transition_time=NOW - timedelta(seconds=ready_for_s)
    )
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name), spec=client.V1PodSpec(node_name=node, containers=[]),
                        status=client.V1PodStatus(phase="Running", conditions=[ready]))  # fmt: skip


class FakeCluster:
    """Node reads answered in turn (the last one repeated), the plugin pods listed, deletions recorded."""

    def __init__(self, nodes: list[client.V1Node], pods: list[client.V1Pod]) -> None:
        self.nodes, self.pods, self.deleted, self.selectors = list(nodes), pods, [], []
        self.core = SimpleNamespace(
            read_node=self.read_node, list_namespaced_pod=self.list_pods, delete_namespaced_pod=self.delete
        )

    def read_node(self, name: str) -> client.V1Node:
        return self.nodes.pop(0) if len(self.nodes) > 1 else self.nodes[0]

    def list_pods(self, namespace: str, label_selector: str) -> Any:
        self.selectors.append((namespace, label_selector))
        return SimpleNamespace(items=self.pods)

    def delete(self, name: str, namespace: str) -> None:
        self.deleted.append((namespace, name))
        self.pods = [p for p in self.pods if p.metadata.name != name]


class FakeClock:
    """Time that passes only when the code under test sleeps."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def _wait(cluster: FakeCluster, timeout: float = 300) -> tuple[list[str], list[str]]:
    clock, said = FakeClock(), []
    left = registration.wait_registered(
        cluster, "n1", [MIG, "nvidia.com/mig-3g.40gb"], "gpu-system", timeout, said.append,
        clock=clock, sleep=clock.sleep,
    )  # fmt: skip
    return left, said


def test_a_dropped_registration_restarts_the_plugin_once_and_the_wait_ends_when_it_is_back() -> None:
    dropped = _node({MIG: "0", "nvidia.com/mig-3g.40gb": "4"})
    back = _node({MIG: "8", "nvidia.com/mig-3g.40gb": "4"})
    # dropped for 12 polls (22 s of the fake clock): restarted at 20 s; then registered
    cluster = FakeCluster([dropped] * 12 + [back], [_plugin("nvidia-device-plugin-abc", 60)])
    left, said = _wait(cluster)
    assert left == []
    assert cluster.deleted == [("gpu-system", "nvidia-device-plugin-abc")]
    assert cluster.selectors == [("gpu-system", registration.DEVICE_PLUGIN_SELECTOR)]
    assert len(said) == 1
    assert "n1: nvidia.com/mig-1g.10gb in capacity, nothing allocatable for 20 s" in said[0]
    assert "nvidia-device-plugin-abc" in said[0] and "kubernetes/kubernetes#121994" in said[0]


def test_a_plugin_still_starting_is_not_restarted_and_a_lasting_loss_is_reported_after_the_restarts() -> None:
    dropped = _node({MIG: "0", "nvidia.com/mig-3g.40gb": "4"})
    # Ready for 5 s only (a registration takes a second or two): never due; the wait runs out and names the resource
    starting, clock = FakeCluster([dropped], [_plugin("p", 5)]), FakeClock()
    restarts = registration.PluginRestarts(starting.core, "gpu-system", print, clock=clock, now=lambda: NOW)  # type: ignore[arg-type]
    for _ in range(20):
        restarts.observe({"n1": [MIG]})
        clock.sleep(2)
    assert starting.deleted == []
    # a plugin that stays dropped after every restart (GPUs it found unhealthy): the wait gives up early
    lasting = FakeCluster([dropped], [_plugin(f"p{i}", 60) for i in range(5)])
    left, said = _wait(lasting, timeout=10_000)
    assert left == [MIG]
    assert len(lasting.deleted) == registration.MAX_RESTARTS == len(said)


def test_a_node_with_everything_allocatable_or_no_device_plugin_needs_no_wait() -> None:
    fine = FakeCluster([_node({MIG: "8", "nvidia.com/mig-3g.40gb": "4"})], [])
    assert _wait(fine) == ([], [])
    assert registration.wait_registered(fine, "n1", [], "gpu-system", 300, print) == []  # a DRA node
    assert fine.selectors == [] and fine.deleted == []
    assert registration.unregistered(_node({}), [MIG]) == [MIG]  # absent: after the kubelet's grace
