"""Cordon, drain and wait-for-Ready (gpuready.maintenance) against the API simulator with the official client."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from gpuready import kube, maintenance
from gpuready.lab.apiserver import ApiServer

from .conftest import wait_for
from .test_replicaset import PAUSE

NODE = "virt-node-0000"


@pytest.fixture
def cluster(sim: ApiServer) -> kube.Cluster:
    return kube.connect(str(sim.kubeconfig_path))


def pod(name: str, gpus: int = 0, owner: str | None = None, node: str = NODE) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if owner:
        kind, owner_name = owner.split("/")
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": kind, "name": owner_name,
                                    "uid": f"uid-{owner_name}", "controller": True}]  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                            "command": ["sleep", "infinity"], "resources": resources}],
        },
    }  # fmt: skip


def names_on(cluster: kube.Cluster, node: str = NODE) -> set[str]:
    pods = cluster.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    return {p.metadata.name for p in pods}


def test_cordon_and_uncordon_record_the_step(cluster: kube.Cluster) -> None:
    maintenance.cordon(cluster, NODE, "cordoned")
    view = maintenance.read_node(cluster, NODE)
    assert (view.unschedulable, view.upgrade_state, view.available) == (True, "cordoned", False)
    maintenance.set_state(cluster, NODE, "failed", failure="gpu::test_xid: Xid 79")
    assert (
        maintenance.read_node(cluster, NODE).annotations[maintenance.FAILURE_ANNOTATION]
        == "gpu::test_xid: Xid 79"
    )
    maintenance.uncordon(cluster, NODE, "done")
    view = maintenance.read_node(cluster, NODE)
    assert (view.unschedulable, view.upgrade_state, view.available) == (False, "done", True)
    assert maintenance.FAILURE_ANNOTATION not in view.annotations  # a later success clears the old failure


def test_gpu_only_drain_evicts_gpu_pods_and_leaves_the_rest(cluster: kube.Cluster) -> None:
    for body in (
        pod("train-a", gpus=1, owner="ReplicaSet/train"),
        pod("train-b", gpus=2, owner="ReplicaSet/train"),
        pod("web", owner="ReplicaSet/web"),  # no GPU
        pod("plugin", gpus=0, owner="DaemonSet/plugin"),
        pod("elsewhere", gpus=1, owner="ReplicaSet/x", node="virt-node-0001"),
    ):
        cluster.core.create_namespaced_pod("default", body)
    evicted = maintenance.drain(cluster, NODE, gpu_only=True, timeout=10)
    assert sorted(evicted) == ["default/train-a", "default/train-b"]
    assert names_on(cluster) == {"web", "plugin"}
    assert names_on(cluster, "virt-node-0001") == {"elsewhere"}


def test_full_drain_keeps_daemonset_pods(cluster: kube.Cluster) -> None:
    cluster.core.create_namespaced_pod("default", pod("web", owner="ReplicaSet/web"))
    cluster.core.create_namespaced_pod("default", pod("plugin", owner="DaemonSet/plugin"))
    assert maintenance.drain(cluster, NODE, gpu_only=False, timeout=10) == ["default/web"]
    assert names_on(cluster) == {"plugin"}


def test_unmanaged_gpu_pod_stops_the_drain_before_any_eviction(cluster: kube.Cluster) -> None:
    cluster.core.create_namespaced_pod("default", pod("notebook", gpus=1))
    cluster.core.create_namespaced_pod("default", pod("train", gpus=1, owner="ReplicaSet/train"))
    with pytest.raises(maintenance.MaintenanceError) as info:
        maintenance.drain(cluster, NODE, timeout=10)
    assert str(info.value) == (
        f"{NODE}: not draining: pod(s) default/notebook have no controller and would be lost "
        "(delete them, or set drain_force = True to evict them anyway)"
    )
    assert names_on(cluster) == {"notebook", "train"}  # nothing evicted
    assert maintenance.drain(cluster, NODE, force=True, timeout=10) == ["default/notebook", "default/train"]
    assert names_on(cluster) == set()


def test_drain_honours_a_disruption_budget_and_names_it_when_it_times_out(cluster: kube.Cluster) -> None:
    body = pod("train-a", gpus=1, owner="ReplicaSet/train")
    body["metadata"]["labels"] = {"app": "train"}
    body["spec"]["containers"][0]["image"] = PAUSE  # an image the simulated nodes have
    cluster.core.create_namespaced_pod("default", body)
    # a Pending pod is evicted whatever its budget says (canIgnorePDB): wait until it runs
    wait_for(lambda: cluster.core.read_namespaced_pod("train-a", "default").status.phase == "Running",
             what="train-a Running")  # fmt: skip
    budget = {
        "metadata": {"name": "train"},
        "spec": {"selector": {"matchLabels": {"app": "train"}}, "maxUnavailable": 0},
    }
    client.PolicyV1Api(cluster.api).create_namespaced_pod_disruption_budget("default", budget)
    ticks = iter(range(100))
    with pytest.raises(maintenance.MaintenanceError) as info:
        maintenance.drain(cluster, NODE, timeout=3, clock=lambda: next(ticks), sleep=lambda _s: None)
    message = str(info.value)
    assert message.startswith(f"{NODE}: drain timed out after 3s with 1 pod(s) left: default/train-a: ")
    assert "disruption budget" in message
    assert names_on(cluster) == {"train-a"}  # the budget held: nothing was deleted
    client.PolicyV1Api(cluster.api).delete_namespaced_pod_disruption_budget("train", "default")
    assert maintenance.drain(cluster, NODE, timeout=10) == ["default/train-a"]
    assert names_on(cluster) == set()


def test_wait_ready_wants_the_boot_the_host_is_in(cluster: kube.Cluster) -> None:
    boot = maintenance.read_node(cluster, NODE).boot_id
    assert maintenance.wait_ready(cluster, NODE, timeout=5, boot_id=boot).ready
    ticks = iter(range(100))
    with pytest.raises(maintenance.MaintenanceError) as info:
        maintenance.wait_ready(cluster, NODE, timeout=3, boot_id="new-boot", clock=lambda: next(ticks),
                               sleep=lambda _s: None)  # fmt: skip
    assert (
        str(info.value)
        == f"{NODE}: not back after 3s: its kubelet still reports boot {boot}, not this boot (new-boot)"
    )
    with pytest.raises(maintenance.MaintenanceError, match="not back after 3s: it is not in the cluster"):
        maintenance.wait_ready(
            cluster, "no-such-node", timeout=3, clock=lambda: next(ticks), sleep=lambda _s: None
        )


def test_requests_gpu_sees_mig_resources_and_init_containers() -> None:
    mig = client.V1Pod(spec=client.V1PodSpec(containers=[client.V1Container(
        name="c", resources=client.V1ResourceRequirements(limits={"nvidia.com/mig-1g.10gb": "1"}))]))  # fmt: skip
    init = client.V1Pod(spec=client.V1PodSpec(containers=[client.V1Container(name="c")], init_containers=[
        client.V1Container(name="i", resources=client.V1ResourceRequirements(requests={"nvidia.com/gpu": "1"}))]))  # fmt: skip
    none = client.V1Pod(spec=client.V1PodSpec(containers=[client.V1Container(name="c")]))
    assert [maintenance.requests_gpu(p) for p in (mig, init, none)] == [True, True, False]
