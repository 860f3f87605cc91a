"""GPU workloads through the real controllers, which a simulator could only imitate: the Job controller's
completion, a Deployment's rollout, the real scheduler's verdict on a time-sliced GPU that is full, the eviction
API's refusal under a PodDisruptionBudget; and a virtual node's GPU behaviour from its hardware profile.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from polling import wait_for as wait

from gpuready import kube
from gpuready.deploy import addons
from gpuready.deploy.upgrade import maintenance
from gpuready.lab.agent.gpu import virtual_hardware
from gpuready.lab.agent.gpu_images import VECTOR_ADD_OK
from gpuready.lab.hardware import make_hardware

from .conftest import CONFIGS, CUDA_BASE, GPU, VECTOR_ADD, Gpus, gpu_pod

SMI_AND_SLEEP = ["bash", "-c", "nvidia-smi -L; sleep infinity"]


def _template(
    node: str,
    image: str,
    command: list[str] | None,
    gpus: int,
    labels: dict[str, str],
    restart: str = "Always",
) -> dict:
    pod = gpu_pod("x", image, node, gpus=gpus, command=command, restart=restart)
    return {"metadata": {"labels": labels}, "spec": pod["spec"]}


def _uuids(logs: str) -> list[str]:
    return [line.split("(UUID: ")[1].rstrip(")") for line in logs.splitlines() if line.startswith("GPU ")]


def test_virtual_node_gpus_come_from_its_profile(
    gpus: Gpus, virtual_nodes: Any, gpu_host: Any, kubectl: Any
) -> None:
    """A virtual dgx-h100 node gets its device plugin, GFD and allocation from its profile's hardware, beside a
    node with a lab host's files; the plugin and GFD run there as pods of the real DaemonSets."""
    (virtual,) = virtual_nodes(1, "dgx-h100")
    host = gpu_host("l4-1", config_key="ts4")
    gpus.deploy_addons(configs=CONFIGS)  # no label: the config manager's default
    wait(lambda: gpus.resources(host) == ("4", "4"), what="L4 x 4 replicas on the host node")
    wait(
        lambda: gpus.labels(host).get("nvidia.com/gpu.product") == "NVIDIA-L4-SHARED", what="host GFD labels"
    )
    # GFD's own labels (the profile registers the node with product and count, not these)
    labels = wait(
        lambda: (lb := gpus.labels(virtual)).get("nvidia.com/gfd.timestamp") and lb, what="GFD labels"
    )
    assert labels["nvidia.com/cuda.driver-version.full"] == "580.178.04"
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.product"]) == (
        "8",
        "NVIDIA-H100-80GB-HBM3",
    )
    assert gpus.resources(virtual) == ("8", "8")
    # the label picks time-slicing: the plugin reloads and advertises 4 replicas of each of the 8 GPUs
    kubectl("label", "node", virtual, f"{addons.DEVICE_PLUGIN_CONFIG_LABEL}=ts4")
    wait(lambda: gpus.resources(virtual) == ("32", "32"), what="8 H100s x 4 replicas")
    wait(
        lambda: gpus.labels(virtual).get("nvidia.com/gpu.product") == "NVIDIA-H100-80GB-HBM3-SHARED",
        what="shared",
    )
    gpus.create_pod(gpu_pod("smi", CUDA_BASE, virtual, gpus=2, command=["nvidia-smi", "-L"]))
    try:
        done = wait(lambda: gpus.finished("smi"), what="smi done")
    except (
        AssertionError
    ) as exc:  # say where the pod got to (seen once under heavy load: not finished in 120 s)
        raise AssertionError(f"{exc}; the pod: {(gpus.pod('smi') or {}).get('status')}") from None
    assert done["status"]["phase"] == "Succeeded"
    hardware = virtual_hardware("dgx-h100", int(virtual.rsplit("-", 1)[1]))
    assert hardware is not None
    seen = _uuids(gpus.logs("smi"))
    # distributed: two replicas on two different GPUs of this node's hardware
    assert len(set(seen)) == 2 and set(seen) <= {g["uuid"] for g in hardware["gpus"]}


def test_gpu_job_completes(gpus: Gpus, virtual_nodes: Any) -> None:
    """A batch/v1 Job of two vectorAdd pods, one GPU each, on a virtual DGX: the Job controller marks it Complete."""
    (node,) = virtual_nodes(1, "dgx-h100")
    gpus.runtime_class()
    template = _template(node, VECTOR_ADD, None, 1, {"app": "vector-add"}, restart="Never")
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "vector-add"},
        "spec": {"completions": 2, "parallelism": 2, "backoffLimit": 0, "template": template},
    }
    batch = client.BatchV1Api(gpus.api)
    batch.create_namespaced_job(gpus.ns, job)

    def done() -> Any:
        status = batch.read_namespaced_job_status("vector-add", gpus.ns).status
        conditions = {c.type: c.status for c in status.conditions or []}
        return (conditions.get("Complete") == "True" or conditions.get("Failed") == "True") and status

    status = wait(done, what="the Job controller to finish the Job")
    assert {c.type: c.status for c in status.conditions}.get("Complete") == "True"
    assert (status.succeeded, status.failed or 0) == (2, 0)
    pods = gpus.core.list_namespaced_pod(gpus.ns, label_selector="job-name=vector-add").items
    assert len(pods) == 2 and {p.spec.node_name for p in pods} == {node}
    for pod in pods:
        assert pod.status.phase == "Succeeded"
        assert gpus.logs(pod.metadata.name) == VECTOR_ADD_OK


def test_gpu_deployment_rolls_out(gpus: Gpus, virtual_nodes: Any, kubectl: Any) -> None:
    """Two replicas of four GPUs each on a virtual DGX with the device plugin: the rollout completes and the
    plugin gives the replicas disjoint GPUs."""
    (node,) = virtual_nodes(1, "dgx-h100")
    gpus.deploy_addons(configs=CONFIGS)
    wait(
        lambda: gpus.running(gpus.plugin_pod(node)["metadata"]["name"]) if gpus.plugin_pod(node) else None,
        what="the device plugin running",
    )
    labels = {"app": "trainer"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "trainer"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": _template(node, CUDA_BASE, SMI_AND_SLEEP, 4, labels),
        },
    }
    client.AppsV1Api(gpus.api).create_namespaced_deployment(gpus.ns, deployment)
    out = kubectl("rollout", "status", "-n", gpus.ns, "deployment/trainer", "--timeout=120s", timeout=150)
    assert 'deployment "trainer" successfully rolled out' in out.stdout
    status = client.AppsV1Api(gpus.api).read_namespaced_deployment_status("trainer", gpus.ns).status
    assert (status.ready_replicas, status.available_replicas, status.updated_replicas) == (2, 2, 2)
    pods = gpus.core.list_namespaced_pod(gpus.ns, label_selector="app=trainer").items
    seen = [set(_uuids(gpus.logs(p.metadata.name))) for p in pods]
    hardware = virtual_hardware("dgx-h100", int(node.rsplit("-", 1)[1]))
    assert hardware is not None
    assert [len(s) for s in seen] == [4, 4] and not seen[0] & seen[1]
    assert seen[0] | seen[1] <= {g["uuid"] for g in hardware["gpus"]}


def test_time_sliced_pod_beyond_the_replicas_stays_unschedulable(gpus: Gpus, gpu_host: Any) -> None:
    """One L4 time-sliced four ways: four pods share its UUID; the real scheduler keeps the fifth Pending as
    Unschedulable for want of nvidia.com/gpu, and binds it once a replica is free."""
    node = gpu_host("l4-1", config_key="ts4")
    gpus.deploy_addons()
    wait(lambda: gpus.resources(node) == ("4", "4"), what="L4 x 4 replicas")
    for i in range(4):
        gpus.create_pod(gpu_pod(f"ts-{i}", CUDA_BASE, node, command=SMI_AND_SLEEP))
    for i in range(4):
        wait(lambda n=f"ts-{i}": gpus.running(n), what=f"ts-{i} running")
    uuid = make_hardware("l4-1", 0)["gpus"][0]["uuid"]
    assert [_uuids(gpus.logs(f"ts-{i}")) for i in range(4)] == [[uuid]] * 4
    gpus.create_pod(gpu_pod("ts-4", CUDA_BASE, node, command=SMI_AND_SLEEP))

    def unschedulable() -> dict | None:
        pod = gpus.pod("ts-4") or {}
        cond = next(
            (c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"),
            None,
        )
        return cond if cond and cond.get("reason") == "Unschedulable" else None

    cond = wait(unschedulable, what="the scheduler's verdict on ts-4")
    assert cond["status"] == "False"
    assert "Insufficient nvidia.com/gpu" in cond["message"]
    assert cond["message"].startswith("0/")  # "0/N nodes are available: ..."
    pod = gpus.pod("ts-4")
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
    events = gpus.core.list_namespaced_event(gpus.ns, field_selector="involvedObject.name=ts-4").items
    assert any(e.reason == "FailedScheduling" and "Insufficient nvidia.com/gpu" in e.message for e in events)
    # a replica freed: the scheduler binds the waiting pod, which gets the same GPU
    gpus.core.delete_namespaced_pod("ts-0", gpus.ns)
    wait(lambda: gpus.running("ts-4"), what="ts-4 running once a replica is free")
    assert _uuids(gpus.logs("ts-4")) == [uuid]


def test_drain_is_refused_by_a_pod_disruption_budget(
    gpus: Gpus, virtual_nodes: Any, api: client.ApiClient
) -> None:
    """gpuready's drain goes through the real eviction API, which refuses a GPU pod its budget protects (429)."""
    (node,) = virtual_nodes(1, "dgx-h100")
    labels = {"app": "inference"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "inference"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": _template(node, CUDA_BASE, ["sleep", "infinity"], 1, labels),
        },
    }
    client.AppsV1Api(api).create_namespaced_deployment(gpus.ns, deployment)
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "inference"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
    }
    policy = client.PolicyV1Api(api)
    policy.create_namespaced_pod_disruption_budget(gpus.ns, pdb)

    def budget_counted() -> Any:
        budget = policy.read_namespaced_pod_disruption_budget_status("inference", gpus.ns)
        s = budget.status
        return s and s.observed_generation == budget.metadata.generation and s.current_healthy == 1 and s

    status = wait(budget_counted, what="the disruption controller to count the healthy pod")
    assert status.disruptions_allowed == 0
    (pod,) = gpus.core.list_namespaced_pod(gpus.ns, label_selector="app=inference").items
    assert maintenance.requests_gpu(pod)

    cluster = kube.Cluster(api=api, url="")
    started = time.monotonic()
    with pytest.raises(maintenance.MaintenanceError) as refused:
        maintenance.drain(cluster, node, timeout=6.0)
    message = str(refused.value)
    assert (
        f"{gpus.ns}/{pod.metadata.name}: Cannot evict pod as it would violate the pod's disruption budget."
        in (message)
    )
    assert "The disruption budget inference needs 1 healthy pods and has 1 currently" in message
    assert time.monotonic() - started >= 6.0  # retried until the timeout, as kubectl drain does
    # the eviction API's own answer
    with pytest.raises(ApiException) as direct:
        gpus.core.create_namespaced_pod_eviction(
            pod.metadata.name, gpus.ns, {"metadata": {"name": pod.metadata.name, "namespace": gpus.ns}}
        )
    assert direct.value.status == 429
    assert json.loads(direct.value.body)["message"] == (
        "Cannot evict pod as it would violate the pod's disruption budget."
    )
    still = gpus.core.read_namespaced_pod(pod.metadata.name, gpus.ns)
    assert still.metadata.uid == pod.metadata.uid and still.metadata.deletion_timestamp is None
    assert still.status.phase == "Running"
    assert (gpus.node(node)["status"]["allocatable"] or {})[GPU] == "8"
