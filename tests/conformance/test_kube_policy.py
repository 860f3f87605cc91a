"""The policy layer (conformance/test_policy.py) in-process against the lab's real control plane: the real
scheduler keeps a plain pod off a tainted node, the real API server lists PriorityClasses and refuses a dry-run
pod over a namespace's GPU quota. A healthy fleet passes; each broken policy (taint removed, PriorityClass value
changed, quota too large, quota deleted) fails its check with a message naming node, namespace and policy."""

from __future__ import annotations

import secrets
import shutil
from dataclasses import replace

import pytest
from kube_fleet import make_fleet
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from polling import wait_for
from shims import read_verdict

from gpuready import kube
from gpuready.conformance import SUITE_DIR
from gpuready.conformance import workloads as wl
from gpuready.deploy import addons

PRODUCT = "nvidia.com/gpu.product"


@pytest.fixture
def policy_suite(pytester):
    target = pytester.path / "conformance"
    target.mkdir()
    shutil.copy(SUITE_DIR / "test_policy.py", target / "test_policy.py")
    return target


def run(pytester, fleet):
    report = pytester.path / "report"
    pytester.runpytest_inprocess(
        "conformance", "--inventory", str(fleet.inventory), "--kubeconfig", str(fleet.kubeconfig),
        "--command-timeout", "60", "--pod-timeout", "60", "--report-dir", str(report), "-p", "no:cacheprovider", "-rs",
    )  # fmt: skip
    verdict = read_verdict(report)
    return {
        node: {check: (r["status"], r["message"]) for check, r in data["layers"]["policy"]["checks"].items()}
        for node, data in verdict["nodes"].items()
    }


@pytest.fixture
def policy_fleet(lab_cluster, api, virtual_nodes, tmp_path):
    """Two L4 nodes, the first tainted; a PriorityClass and a GPU quota of 2 in a namespace of the test's own,
    applied as the add-ons deploy applies them. Yields (fleet, PriorityClass name, quota namespace)."""
    suffix = secrets.token_hex(3)
    pc, namespace = f"gpu-high-{suffix}", f"ml-team-{suffix}"
    policy = {"priority_classes": {pc: 1000}, "gpu_resource_quotas": {namespace: 2}}
    hosts = [
        ("l4-1", {**policy, "node_taints": ["nvidia.com/gpu=present:NoSchedule"]}),
        ("l4-1", {**policy, "node_taints": []}),
    ]
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": namespace}})
    cluster = kube.Cluster(api=api, url="")
    settings = replace(
        addons.AddonSettings(), gpu_resource_quotas=((namespace, 2),), priority_classes=((pc, 1000),)
    )
    for manifest in addons.quotas_and_priorities(settings):
        kube.apply(cluster, manifest)
    fleet = make_fleet(lab_cluster, api, virtual_nodes, tmp_path / "fleet", hosts)
    try:
        fleet.converged()  # the GPUs advertised: the affinity pods can be placed
        for name, spec in fleet.nodes.items():  # only the inventory's taints (the agent's nodes start Ready)
            want = sorted(str(t) for t in spec.taints)
            wait_for(
                lambda name=name, want=want: (
                    sorted(
                        f"{t['key']}={t['value']}:{t['effect']}"
                        if t.get("value")
                        else f"{t['key']}:{t['effect']}"
                        for t in fleet.node(name)["spec"].get("taints") or []
                    )
                    == want
                ),
                what=f"{name} taints",
            )
        yield fleet, pc, namespace
    finally:
        fleet.delete()
        for delete in (
            lambda: core.delete_namespace(namespace),
            lambda: client.SchedulingV1Api(api).delete_priority_class(pc),
        ):
            try:
                delete()
            except ApiException as exc:
                if exc.status != 404:
                    raise


def test_healthy_policies_pass_and_broken_ones_fail_naming_the_policy(
    pytester, policy_suite, policy_fleet, api
):
    fleet, pc, namespace = policy_fleet
    tainted, plain = list(fleet.nodes)
    where = f"namespace {namespace} (gpu_resource_quotas in the inventory: 2 GPUs)"

    healthy = run(pytester, fleet)
    assert healthy[tainted] == {
        "test_plain_pod_stays_off": ("pass", ""),
        "test_gpu_pod_by_product_affinity": ("pass", ""),
        "test_priority_classes": ("pass", ""),
        "test_priority_preempts": ("pass", ""),
        "test_gpu_quota_refuses": ("pass", ""),
    }
    status, message = healthy[plain]["test_plain_pod_stays_off"]
    assert status == "skip" and "no NoSchedule/NoExecute taint" in message
    assert {s for s, _m in healthy[plain].values()} == {"pass", "skip"}
    status, message = healthy[plain]["test_priority_preempts"]
    assert status == "skip" and f"preemption is tried on one node per run: {tainted}" in message
    # the plain pods are gone right after the decision, and the run's namespace after the run
    wait_for(
        lambda: (
            not [
                p
                for p in fleet.pods(node=tainted)
                if p["metadata"]["namespace"].startswith(wl.NAMESPACE_PREFIX)
            ]
        ),
        what="no plain pod left",
    )

    # break every policy: taint removed, PriorityClass value changed (immutable: recreated), quota too large
    fleet.core.patch_node(tainted, {"spec": {"taints": None}})
    scheduling = client.SchedulingV1Api(api)
    scheduling.delete_priority_class(pc)
    wait_for(
        lambda: pc not in {p.metadata.name for p in scheduling.list_priority_class().items}, what="PC gone"
    )
    scheduling.create_priority_class({"metadata": {"name": pc}, "value": 500, "preemptionPolicy": "Never"})
    fleet.core.patch_namespaced_resource_quota(
        "gpu-quota", namespace, {"spec": {"hard": {"requests.nvidia.com/gpu": "8"}}}
    )
    broken = run(pytester, fleet)
    status, message = broken[tainted]["test_plain_pod_stays_off"]
    assert status == "fail", message
    assert message == (
        f"{tainted}: plain pod plain-{tainted} (no GPU request, no toleration) was scheduled on {tainted}: the taint "
        "nvidia.com/gpu=present:NoSchedule did not keep it off (node_taints in the inventory)"
    )
    status, message = broken[tainted]["test_priority_preempts"]
    assert status == "fail", message
    assert message.startswith(
        f"{tainted}: GPU pod preemptor-{tainted} of PriorityClass {pc} (priority 500) preempted none of the 1 plain pod "
        "holding every GPU of the node: "
    ), message
    for node in fleet.nodes:
        assert broken[node]["test_priority_classes"] == (
            "fail",
            f"{node}: PriorityClass {pc} has value 500, expected 1000 (priority_classes in the inventory)",
        )
        assert broken[node]["test_gpu_quota_refuses"] == (
            "fail",
            f"{node}: {where}: a pod requesting 3 nvidia.com/gpu was admitted, no quota refused it "
            "(gpu-quota allows 8)",
        )

    # the quota deleted: the over-quota pod is admitted, and the message says no quota is there
    fleet.core.delete_namespaced_resource_quota("gpu-quota", namespace)
    gone = run(pytester, fleet)
    assert gone[plain]["test_gpu_quota_refuses"] == (
        "fail",
        f"{plain}: {where}: a pod requesting 3 nvidia.com/gpu was admitted, no quota refused it "
        "(no ResourceQuota on GPUs)",
    )


def test_gpu_pod_by_product_lands_only_on_that_product(
    pytester, policy_suite, lab_cluster, api, virtual_nodes, tmp_path
):
    fleet = make_fleet(
        lab_cluster, api, virtual_nodes, tmp_path / "fleet", [("l4-1", {}), ("a100-80gb-4", {})]
    )
    try:
        fleet.converged()
        l4, a100 = fleet.nodes
        healthy = run(pytester, fleet)
        for node in fleet.nodes:
            assert healthy[node]["test_gpu_pod_by_product_affinity"] == ("pass", "")
        # the L4 node claims to be an A100 (GPU feature discovery gone, so nothing puts its label back) and the
        # A100 node takes no new pods: the A100 pod lands on the L4, the L4 pod finds no L4
        fleet.delete_daemonset("gpu-feature-discovery")
        a100_label, l4_label = (
            fleet.nodes[a100].expected_labels[PRODUCT],
            fleet.nodes[l4].expected_labels[PRODUCT],
        )
        fleet.core.patch_node(l4, {"metadata": {"labels": {PRODUCT: a100_label}}})
        taints = (fleet.node(a100)["spec"].get("taints") or []) + [
            {"key": "gpuready.test/hold", "effect": "NoSchedule"}
        ]
        fleet.core.patch_node(a100, {"spec": {"taints": taints}})
        wait_for(
            lambda: fleet.node(l4)["metadata"]["labels"].get(PRODUCT) == a100_label, what="the wrong label"
        )
        broken = run(pytester, fleet)
        status, message = broken[a100]["test_gpu_pod_by_product_affinity"]
        assert (status, message) == (
            "fail",
            f"{a100}: GPU pod affinity-0 asking for {PRODUCT} {a100_label} by node affinity was scheduled on "
            f"{l4}, whose GPUs are {l4_label} by the inventory: its {PRODUCT} label is wrong",
        ), message
        status, message = broken[l4]["test_gpu_pod_by_product_affinity"]
        assert status == "fail" and message.startswith(
            f"{l4}: GPU pod affinity-1 asking for {PRODUCT} {l4_label} by node affinity was left Unschedulable: "
        ), message
        assert "didn't match Pod's node affinity/selector" in message
    finally:
        fleet.delete()


def test_policy_after_the_other_kubernetes_layers(pytester, lab_cluster, api, virtual_nodes, tmp_path):
    """The whole Kubernetes side of the suite on the healthy fleet: the workloads and metrics layers give their
    GPUs back when done (their pods deleted and gone), so the policy layer after them places the L4's affinity pod
    (before, the time-slicing pods still held its GPU and the check could only skip)."""
    target = pytester.path / "conformance"
    target.mkdir()
    for name in ("test_node.py", "test_workloads.py", "test_metrics.py", "test_policy.py"):
        shutil.copy(SUITE_DIR / name, target / name)
    fleet = make_fleet(lab_cluster, api, virtual_nodes, tmp_path / "fleet")
    try:
        fleet.converged()
        report = pytester.path / "report"
        result = pytester.runpytest_inprocess(
            "conformance", "--inventory", str(fleet.inventory), "--kubeconfig", str(fleet.kubeconfig),
            "--command-timeout", "60", "--pod-timeout", "60", "--report-dir", str(report), "-p", "no:cacheprovider", "-rs",
        )  # fmt: skip
        verdict = read_verdict(report)
        assert result.ret == 0, verdict
        h100, a100, l4 = fleet.nodes
        policy = {node: data["layers"]["policy"]["checks"] for node, data in verdict["nodes"].items()}
        assert policy[h100]["test_plain_pod_stays_off"]["status"] == "pass"
        assert policy[a100]["test_gpu_pod_by_product_affinity"]["status"] == "pass"
        assert policy[h100]["test_gpu_pod_by_product_affinity"]["status"] == "pass"
        assert policy[l4]["test_gpu_pod_by_product_affinity"]["status"] == "pass"  # its GPU given back
    finally:
        fleet.delete()
