"""Cordon, drain and wait-for-Ready (gpuready.deploy.upgrade.maintenance) against the real control plane with the official client.

The pods a drain meets are made by real controllers (ReplicaSets, a DaemonSet) pinned to this test's virtual
node, so the Eviction API, the garbage collector, the disruption controller and the scheduler all see what they
would see on a real cluster: an evicted ReplicaSet pod is replaced, and the replacement stays Pending while the
node is cordoned, as the upgrade's drain always follows its cordon.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from polling import wait_for

from gpuready import kube
from gpuready.deploy.upgrade import maintenance

from .conftest import PAUSE

TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.fixture
def cluster(lab_cluster: Any) -> kube.Cluster:
    return kube.connect(str(lab_cluster.kubeconfig))


@pytest.fixture
def node(virtual_nodes: Callable[..., list[str]]) -> str:
    return virtual_nodes(1)[0]


def template(app: str, node: str, gpus: int = 0) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": TOLERATE_GPU,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": PAUSE, "resources": resources}],
        },
    }


def replicaset(cluster: kube.Cluster, ns: str, app: str, node: str, replicas: int = 1, gpus: int = 0) -> None:
    body = {
        "metadata": {"name": app},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": template(app, node, gpus),
        },
    }
    client.AppsV1Api(cluster.api).create_namespaced_replica_set(ns, body)


def daemonset(cluster: kube.Cluster, ns: str, app: str, node: str) -> None:
    body = {
        "metadata": {"name": app},
        "spec": {"selector": {"matchLabels": {"app": app}}, "template": template(app, node)},
    }
    client.AppsV1Api(cluster.api).create_namespaced_daemon_set(ns, body)


def bare_pod(cluster: kube.Cluster, ns: str, name: str, node: str, gpus: int = 0) -> None:
    body = {"apiVersion": "v1", "kind": "Pod", **template(name, node, gpus)}
    body["metadata"]["name"] = name
    cluster.core.create_namespaced_pod(ns, body)


def running_on(cluster: kube.Cluster, node: str) -> dict[str, str]:
    """name -> app label of the pods bound to `node` that are not being deleted."""
    pods = cluster.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    return {p.metadata.name: p.metadata.labels["app"] for p in pods if p.metadata.deletion_timestamp is None}


def wait_running(cluster: kube.Cluster, ns: str, node: str, count: int) -> dict[str, str]:
    def ready() -> dict[str, str] | None:
        pods = cluster.core.list_namespaced_pod(ns, field_selector=f"spec.nodeName={node}").items
        ok = [p for p in pods if p.status.phase == "Running"]
        return {p.metadata.name: p.metadata.labels["app"] for p in ok} if len(ok) == count else None

    return wait_for(ready, 90, f"{count} pod(s) Running on {node}")


def test_cordon_and_uncordon_record_the_step(cluster: kube.Cluster, node: str) -> None:
    maintenance.cordon(cluster, node, "cordoned")
    view = maintenance.read_node(cluster, node)
    assert (view.unschedulable, view.upgrade_state, view.available) == (True, "cordoned", False)
    assert cluster.core.read_node(node).spec.unschedulable is True
    maintenance.set_state(cluster, node, "failed", failure="gpu::test_xid: Xid 79")
    assert (
        maintenance.read_node(cluster, node).annotations[maintenance.FAILURE_ANNOTATION]
        == "gpu::test_xid: Xid 79"
    )
    maintenance.uncordon(cluster, node, "done")
    view = maintenance.read_node(cluster, node)
    assert (view.unschedulable, view.upgrade_state, view.available) == (False, "done", True)
    assert maintenance.FAILURE_ANNOTATION not in view.annotations  # a later success clears the old failure
    assert (
        cluster.core.read_node(node).spec.unschedulable is None
    )  # the field is gone, as kubectl uncordon leaves it


def test_gpu_only_drain_evicts_gpu_pods_and_leaves_the_rest(
    cluster: kube.Cluster, namespace: str, virtual_nodes: Callable[..., list[str]]
) -> None:
    node, other = virtual_nodes(2)
    replicaset(cluster, namespace, "train", node, replicas=2, gpus=1)
    replicaset(cluster, namespace, "web", node)  # no GPU
    daemonset(cluster, namespace, "plugin", node)
    replicaset(cluster, namespace, "elsewhere", other, gpus=1)
    before = wait_running(cluster, namespace, node, 4)
    wait_running(cluster, namespace, other, 1)
    trains = sorted(f"{namespace}/{name}" for name, app in before.items() if app == "train")
    maintenance.cordon(cluster, node, "cordoned")
    evicted = maintenance.drain(cluster, node, gpu_only=True, timeout=90)
    assert sorted(evicted) == trains and len(trains) == 2
    left = running_on(cluster, node)
    assert sorted(left.values()) == ["plugin", "web"]
    assert {name for name, app in before.items() if app != "train"} == set(left)  # the very same pods
    assert list(running_on(cluster, other).values()) == ["elsewhere"]
    # the ReplicaSet replaced what was evicted; the cordon keeps the replacements off the node
    pending = cluster.core.list_namespaced_pod(namespace, label_selector="app=train").items
    assert len(pending) == 2 and all(p.status.phase == "Pending" and not p.spec.node_name for p in pending)


def test_full_drain_keeps_daemonset_pods(cluster: kube.Cluster, namespace: str, node: str) -> None:
    replicaset(cluster, namespace, "web", node)
    daemonset(cluster, namespace, "plugin", node)
    before = wait_running(cluster, namespace, node, 2)
    maintenance.cordon(cluster, node, "cordoned")
    web = next(name for name, app in before.items() if app == "web")
    assert maintenance.drain(cluster, node, gpu_only=False, timeout=90) == [f"{namespace}/{web}"]
    assert list(running_on(cluster, node).values()) == ["plugin"]


def test_unmanaged_gpu_pod_stops_the_drain_before_any_eviction(
    cluster: kube.Cluster, namespace: str, node: str
) -> None:
    bare_pod(cluster, namespace, "notebook", node, gpus=1)
    replicaset(cluster, namespace, "train", node, gpus=1)
    before = wait_running(cluster, namespace, node, 2)
    train = next(name for name, app in before.items() if app == "train")
    maintenance.cordon(cluster, node, "cordoned")
    with pytest.raises(maintenance.MaintenanceError) as info:
        maintenance.drain(cluster, node, timeout=90)
    assert str(info.value) == (
        f"{node}: not draining: pod(s) {namespace}/notebook have no controller and would be lost "
        "(delete them, or set drain_force = True to evict them anyway)"
    )
    assert running_on(cluster, node) == before  # nothing evicted
    evicted = maintenance.drain(cluster, node, force=True, timeout=90)
    assert sorted(evicted) == sorted([f"{namespace}/notebook", f"{namespace}/{train}"])
    assert running_on(cluster, node) == {}


def test_drain_honours_a_disruption_budget_and_names_it_when_it_times_out(
    cluster: kube.Cluster, namespace: str, node: str
) -> None:
    replicaset(cluster, namespace, "train", node, gpus=1)
    # a Pending pod is evicted whatever its budget says (canIgnorePDB): wait until it runs
    (train,) = wait_running(cluster, namespace, node, 1)
    budget = {
        "metadata": {"name": "train"},
        "spec": {"selector": {"matchLabels": {"app": "train"}}, "maxUnavailable": 0},
    }
    policy = client.PolicyV1Api(cluster.api)
    policy.create_namespaced_pod_disruption_budget(namespace, budget)
    # the real disruption controller counts the budget's pods (until then evictions are refused as "still being
    # processed"); the drain must then be refused for the budget itself
    wait_for(
        lambda: (
            (
                policy.read_namespaced_pod_disruption_budget("train", namespace).status
                or client.V1PodDisruptionBudgetStatus(0, 0, 0, 0)
            ).expected_pods
            == 1
        ),
        60,
        "the disruption controller to count the budget's pod",
    )
    maintenance.cordon(cluster, node, "cordoned")
    ticks = iter(range(100))
    with pytest.raises(maintenance.MaintenanceError) as info:
        maintenance.drain(cluster, node, timeout=3, clock=lambda: next(ticks), sleep=lambda _s: None)
    assert str(info.value) == (
        f"{node}: drain timed out after 3s with 1 pod(s) left: {namespace}/{train}: Cannot evict pod as it would "
        "violate the pod's disruption budget. The disruption budget train needs 1 healthy pods and has 1 currently"
    )
    assert running_on(cluster, node) == {train: "train"}  # the budget held: nothing was deleted
    policy.delete_namespaced_pod_disruption_budget("train", namespace)
    assert maintenance.drain(cluster, node, timeout=90) == [f"{namespace}/{train}"]
    assert running_on(cluster, node) == {}


def test_wait_ready_wants_the_boot_the_host_is_in(cluster: kube.Cluster, node: str, lab_cluster: Any) -> None:
    boot = maintenance.read_node(cluster, node).boot_id
    assert boot
    assert maintenance.wait_ready(cluster, node, timeout=5, boot_id=boot).ready
    ticks = iter(range(100))
    with pytest.raises(maintenance.MaintenanceError) as info:
        maintenance.wait_ready(
            cluster, node, timeout=3, boot_id="new-boot", clock=lambda: next(ticks), sleep=lambda _s: None
        )
    assert (
        str(info.value)
        == f"{node}: not back after 3s: its kubelet still reports boot {boot}, not this boot (new-boot)"
    )
    with pytest.raises(maintenance.MaintenanceError, match="not back after 3s: it is not in the cluster"):
        maintenance.wait_ready(
            cluster, "no-such-node", timeout=3, clock=lambda: next(ticks), sleep=lambda _s: None
        )
    # a node whose kubelet stopped: the real node lifecycle controller marks it NotReady, and wait_ready says so
    lab_cluster.stop_heartbeat(node)
    wait_for(lambda: not maintenance.read_node(cluster, node).ready, 60, f"{node} NotReady")
    with pytest.raises(maintenance.MaintenanceError) as stale:
        maintenance.wait_ready(cluster, node, timeout=3, clock=lambda: next(ticks), sleep=lambda _s: None)
    assert str(stale.value) == f"{node}: not back after 3s: it is not Ready"
    lab_cluster.resume_heartbeat(node)
    assert maintenance.wait_ready(cluster, node, timeout=60, boot_id=boot).ready


def test_requests_gpu_sees_mig_resources_and_init_containers() -> None:
    mig = client.V1Pod(
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="c", resources=client.V1ResourceRequirements(limits={"nvidia.com/mig-1g.10gb": "1"})
                )
            ]
        )
    )
    init = client.V1Pod(
        spec=client.V1PodSpec(
            containers=[client.V1Container(name="c")],
            init_containers=[
                client.V1Container(
                    name="i", resources=client.V1ResourceRequirements(requests={"nvidia.com/gpu": "1"})
                )
            ],
        )
    )
    none = client.V1Pod(spec=client.V1PodSpec(containers=[client.V1Container(name="c")]))
    claim = client.V1Pod(  # a dra node's GPU pod: its devices come from a ResourceClaim
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="c", resources=client.V1ResourceRequirements(claims=[{"name": "gpu"}])
                )
            ],
            resource_claims=[client.V1PodResourceClaim(name="gpu", resource_claim_template_name="gpu")],
        )
    )
    assert [maintenance.requests_gpu(p) for p in (mig, init, none, claim)] == [True, True, False, True]
