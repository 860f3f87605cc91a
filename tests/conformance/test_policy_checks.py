"""The policy checks as pure functions: exact messages on hand-made pods, PriorityClasses and API answers."""

from __future__ import annotations

import shutil

import pytest
from inventories import write_inventory
from shims import GROUP_DATA, JOIN

from gpuready.conformance.checks import CannotCheck
from gpuready.conformance.checks import policy as checks
from gpuready.conformance.workloads import CUDA_BASE_IMAGE, gpu_pod
from gpuready.spec import load_fleet

POLICY = {"priority_classes": {"gpu-high": 1000, "gpu-low": 10}, "gpu_resource_quotas": {"ml-team": 4}}
UNSCHEDULABLE = (
    "0/3 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}, 2 node(s) didn't match "
    "Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
)


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    """t4 from a fleet that asks for the policies, l4 from one that asks for none (policies are fleet-wide)."""
    hosts = [
        (
            "t4",
            {
                "gpu_model": "Tesla T4",
                "gpu_count": 1,
                **POLICY,
                "node_taints": ["nvidia.com/gpu=present:NoSchedule", "soft=yes:PreferNoSchedule"],
            },
        ),
        ("l4", {"gpu_model": "NVIDIA L4", "gpu_count": 1, "node_taints": ["soft=yes:PreferNoSchedule"]}),
    ]
    nodes = {}
    for name, data in hosts:
        root = tmp_path_factory.mktemp(f"inventory-{name}")
        (root / "group_data").mkdir()
        shutil.copy(GROUP_DATA, root / "group_data" / "all.py")
        nodes.update(load_fleet(write_inventory(root / "inventory.py", [(name, {**data, **JOIN})])).nodes)
    return nodes


def pod_obj(node_name=None, condition=None):
    return {
        "metadata": {"name": "plain-t4"},
        "spec": {"nodeName": node_name} if node_name else {},
        "status": {"conditions": [condition] if condition else []},
    }


def test_plain_pod_has_no_gpu_request_and_only_the_cordon_toleration(specs):
    base = gpu_pod("x", specs["t4"], CUDA_BASE_IMAGE, "nvidia.com/gpu", check="plain-pod")
    pod = checks.plain_pod("plain-t4", base)
    assert pod["metadata"]["name"] == "plain-t4"
    assert pod["metadata"]["labels"]["gpuready.io/check"] == "plain-pod"
    assert pod["spec"]["tolerations"] == [checks.CORDON_TOLERATION]
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "t4"}
    assert "runtimeClassName" not in pod["spec"]
    assert all("resources" not in c for c in pod["spec"]["containers"])
    assert pod["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] is True  # still hardened
    assert base["spec"]["containers"][0]["resources"]  # the GPU pod it came from is untouched


def test_decision_reads_binding_and_unschedulable():
    assert checks.decision(pod_obj()) is None
    pending = {"type": "PodScheduled", "status": "False", "reason": "SchedulerError", "message": "x"}
    assert checks.decision(pod_obj(condition=pending)) is None
    assert checks.decision(pod_obj(node_name="t4")) == checks.Scheduling("plain-t4", node_name="t4")
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": UNSCHEDULABLE}
    assert checks.decision(pod_obj(condition=cond)) == checks.Scheduling(
        "plain-t4", unschedulable=UNSCHEDULABLE
    )


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
V134 = (
    "0/2 nodes are available: 2 node(s) had untolerated taint(s). no new claims to deallocate, preemption: 0/2 "
    "nodes are available: 2 Preemption is not helpful for scheduling."
)


def test_plain_pod_kept_off(specs):
    t4, l4 = specs["t4"], specs["l4"]
    for message in (UNSCHEDULABLE, V134):  # the taint named (before v1.33), only counted (v1.34)
        kept_off = checks.Scheduling("plain-t4", unschedulable=message)
        assert checks.plain_pod_kept_off(t4, kept_off, [GPU_TAINT, NOT_READY], 60) == []
    assert checks.plain_pod_kept_off(t4, checks.Scheduling("plain-t4", node_name="t4"), [], 60) == [
        "plain pod plain-t4 (no GPU request, no toleration) was scheduled on t4: the taint "
        "nvidia.com/gpu=present:NoSchedule did not keep it off (node_taints in the inventory)"
    ]
    assert checks.plain_pod_kept_off(t4, None, [GPU_TAINT], 60) == [
        "the scheduler made no decision on the plain pod within 60s (is kube-scheduler running?)"
    ]
    other = checks.Scheduling("plain-t4", unschedulable="0/3 nodes are available: 1 Insufficient cpu.")
    with pytest.raises(
        CannotCheck, match=r"for another reason, so the taint nvidia\.com/gpu=present:NoSchedule"
    ):
        checks.plain_pod_kept_off(t4, other, [GPU_TAINT], 60)
    # kept off by a taint, but not the inventory's: the policy is not what kept it off
    with pytest.raises(CannotCheck, match=r"Node's taints: node.kubernetes.io/not-ready:NoSchedule\)"):
        checks.plain_pod_kept_off(t4, checks.Scheduling("plain-t4", unschedulable=V134), [NOT_READY], 60)
    named_other = UNSCHEDULABLE.replace("{nvidia.com/gpu: present}", "{node.kubernetes.io/not-ready: }")
    with pytest.raises(CannotCheck, match="another reason"):
        checks.plain_pod_kept_off(
            t4, checks.Scheduling("p", unschedulable=named_other), [GPU_TAINT, NOT_READY], 60
        )
    with pytest.raises(
        CannotCheck, match="no NoSchedule/NoExecute taint"
    ):  # PreferNoSchedule keeps nothing off
        checks.plain_pod_kept_off(l4, checks.Scheduling("p", unschedulable=V134), [GPU_TAINT], 60)


def test_priority_classes(specs):
    t4, l4 = specs["t4"], specs["l4"]
    found = {
        "gpu-high": {"value": 1000},
        "gpu-low": {"value": 10},
        "system-node-critical": {"value": 2000001000},
    }
    assert checks.priority_classes(t4, found) == []
    assert checks.priority_classes(t4, {"gpu-high": {"value": 500}}) == [
        "PriorityClass gpu-high has value 500, expected 1000 (priority_classes in the inventory)",
        "PriorityClass gpu-low missing, expected value 10 (priority_classes in the inventory)",
    ]
    with pytest.raises(CannotCheck, match="no PriorityClass"):
        checks.priority_classes(l4, found)


def quota(name, gpus, key="requests.nvidia.com/gpu"):
    return {"metadata": {"name": name}, "spec": {"hard": {key: str(gpus), "pods": "10"}}}


def test_gpu_quota_refuses(specs):
    t4, l4 = specs["t4"], specs["l4"]
    refused = (
        'pods "over-quota-ml-team" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=5, '
        "used: requests.nvidia.com/gpu=0, limited: requests.nvidia.com/gpu=4"
    )
    where = "namespace ml-team (gpu_resource_quotas in the inventory: 4 GPUs)"
    ok = checks.QuotaProbe("ml-team", 5, 403, refused, (quota("gpu-quota", 4),))
    assert checks.quota_refuses(t4, {"ml-team": ok}) == []
    admitted = checks.QuotaProbe("ml-team", 5, 201, "", (quota("gpu-quota", 8),))
    assert checks.quota_refuses(t4, {"ml-team": admitted}) == [
        f"{where}: a pod requesting 5 nvidia.com/gpu was admitted, no quota refused it (gpu-quota allows 8)"
    ]
    missing = checks.QuotaProbe("ml-team", 5, 201, "", ())
    assert checks.quota_refuses(t4, {"ml-team": missing}) == [
        f"{where}: a pod requesting 5 nvidia.com/gpu was admitted, no quota refused it (no ResourceQuota on GPUs)"
    ]
    small = checks.QuotaProbe("ml-team", 5, 403, refused, (quota("gpu-quota", 2, "nvidia.com/gpu"),))
    assert checks.quota_refuses(t4, {"ml-team": small}) == [f"{where}: gpu-quota allows 2, expected 4"]
    psa = checks.QuotaProbe("ml-team", 5, 403, "violates PodSecurity", (quota("gpu-quota", 4),))
    assert checks.quota_refuses(t4, {"ml-team": psa}) == [
        f"{where}: the over-quota pod was refused, but not by a quota (HTTP 403: violates PodSecurity)"
    ]
    gone = checks.QuotaProbe("ml-team", 5, 404, 'namespaces "ml-team" not found')
    assert checks.quota_refuses(t4, {"ml-team": gone}) == [f"{where}: the namespace does not exist"]
    with pytest.raises(CannotCheck, match="no GPU quota"):
        checks.quota_refuses(l4, {})


def test_by_product_asks_by_affinity_among_the_checked_nodes(specs):
    base = gpu_pod("affinity-0", specs["t4"], CUDA_BASE_IMAGE, "nvidia.com/gpu", check="affinity")
    pod = checks.by_product(base, "Tesla-T4", ["t4", "l4"])
    assert "nodeSelector" not in pod["spec"] and base["spec"]["nodeSelector"]
    (term,) = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"] == [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["Tesla-T4"]},
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["l4", "t4"]},
    ]
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}


def test_affinity_lands_on_product(specs):
    t4 = specs["t4"]
    label = checks.product(t4)
    products = {"t4": label, "l4": checks.product(specs["l4"])}
    asked = f"GPU pod affinity-0 asking for nvidia.com/gpu.product {label} by node affinity"
    assert (
        checks.affinity_lands_on_product(t4, checks.Scheduling("affinity-0", node_name="t4"), products, 60)
        == []
    )
    assert checks.affinity_lands_on_product(
        t4, checks.Scheduling("affinity-0", node_name="l4"), products, 60
    ) == [
        f"{asked} was scheduled on l4, whose GPUs are {products['l4']} by the inventory: its "
        "nvidia.com/gpu.product label is wrong"
    ]
    assert checks.affinity_lands_on_product(
        t4, checks.Scheduling("affinity-0", node_name="x"), products, 60
    ) == [f"{asked} was scheduled on x, which is not among the nodes checked"]
    nowhere = "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
    assert checks.affinity_lands_on_product(
        t4, checks.Scheduling("affinity-0", unschedulable=nowhere), products, 60
    ) == [f"{asked} was left Unschedulable: {nowhere}"]
    busy = checks.Scheduling(
        "affinity-0", unschedulable="0/2 nodes are available: 1 Insufficient nvidia.com/gpu."
    )
    with pytest.raises(CannotCheck, match="is busy"):
        checks.affinity_lands_on_product(t4, busy, products, 60)
    assert checks.affinity_lands_on_product(t4, None, products, 60)[0].startswith(
        "the scheduler made no decision"
    )


def test_preempts(specs):
    t4, l4 = specs["t4"], specs["l4"]
    assert checks.highest_priority(t4) == ("gpu-high", 1000)
    with pytest.raises(CannotCheck, match="no PriorityClass"):
        checks.preempts(l4, None, "")
    with pytest.raises(CannotCheck, match="tried on one node per run: n1"):
        checks.preempts(t4, None, "preemption is tried on one node per run: n1")
    base = checks.Preemption("preemptor-t4", "gpu-high", 1000, ("holder-t4-0",))
    asked = "GPU pod preemptor-t4 of PriorityClass gpu-high (priority 1000)"
    won = checks.Preemption(**{**base.__dict__, "victims": ("holder-t4-0",), "node_name": "t4"})
    assert checks.preempts(t4, won, "") == []
    hopeless = "0/2 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: not eligible due to preemptionPolicy=Never."
    refused = checks.Preemption(**{**base.__dict__, "unschedulable": hopeless, "timeout": 60})
    assert checks.preempts(t4, refused, "") == [
        f"{asked} preempted none of the 1 plain pod holding every GPU of the node: {hopeless}"
    ]
    free = checks.Preemption(**{**base.__dict__, "node_name": "t4"})
    assert checks.preempts(t4, free, "") == [
        f"{asked} was bound to t4 but preempted none of the 1 plain pod holding every GPU of the node"
    ]
    stuck = checks.Preemption(**{**base.__dict__, "victims": ("holder-t4-0",), "timeout": 60})
    assert checks.preempts(t4, stuck, "") == [f"{asked} preempted holder-t4-0 but was not bound within 60s"]
