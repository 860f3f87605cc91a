"""The rolling upgrade's cluster-side operations on a ``gpu_allocation = "dra"`` node (#15 item 5), on the lab's
real control plane: the drain evicts a pod that holds its GPU only through a ResourceClaim (no ``nvidia.com/*``
resource) and leaves a pod with no GPU, and the post-upgrade validation runs the DRA checks for that node.

The node is a kube_fleet dra node (A100, MIG on GPU 0): the add-ons put the DRA driver's kubelet plugin on it, the
node agent publishes its ResourceSlice and prepares the claims the real scheduler allocates. The operations run as
pyinfra runs them (tests/kube/test_upgrade_operations.py's stand-in host); the validation runs the command
``conformance_command`` builds, as the upgrade does, on a copy of the suite's node and workloads layers (the host
and gpu layers need an SSH host, which a virtual node has not).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from kube_fleet import make_fleet
from kubernetes import client
from polling import wait_for

from gpuready import kube
from gpuready.conformance import SUITE_DIR
from gpuready.conformance.dra_workloads import claim_template
from gpuready.deploy import dra_addons, upgrade
from gpuready.deploy.facts.host import BootId, BootTime
from gpuready.deploy.upgrade import maintenance
from gpuready.deploy.upgrade import operations as upgrade_ops
from gpuready.spec import UpgradePolicy

PAUSE = "registry.k8s.io/pause:3.10"
DRA_A100 = {
    "gpu_allocation": "dra",
    "gpu_sharing": "mig",
    "mig_strategy": "mixed",
    "mig_layout": {0: ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]},
}


class Host:
    """What the operations use of a pyinfra host: its name, print prefix, errors it logs, and its boot id fact."""

    def __init__(self, node: str, boot_id: str) -> None:
        self.name = node
        self.print_prefix = f"[{node}] "
        self.errors: list[str] = []
        self._boot_id = boot_id

    def log_styled(self, message: str, **_kw: Any) -> None:
        self.errors.append(message)

    def get_fact(self, fact: type) -> str | None:
        assert fact in (BootId, BootTime)
        return (
            self._boot_id if fact is BootId else None
        )  # boot time unknown: the pods' statuses are taken as read


def run_op(generator: Any, host: Host) -> bool:
    (command,) = list(generator)
    return bool(command.function(None, host))


@pytest.fixture
def fleet(lab_cluster, api, virtual_nodes, tmp_path):
    made = make_fleet(lab_cluster, api, virtual_nodes, tmp_path / "fleet", [("a100-80gb-4", DRA_A100)])
    yield made
    made.delete()


def replicaset(cluster: kube.Cluster, ns: str, app: str, node: str, claim: str | None = None) -> None:
    """A ReplicaSet of one pause pod pinned to ``node``; with ``claim``, its GPU through that
    ResourceClaimTemplate only (no extended resource anywhere in the pod)."""
    container: dict[str, Any] = {"name": "c", "image": PAUSE}
    spec: dict[str, Any] = {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "terminationGracePeriodSeconds": 1,
        "containers": [container],
    }
    if claim:
        container["resources"] = {"claims": [{"name": "gpu"}]}
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": claim}]
    body = {
        "metadata": {"name": app},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": app}},
            "template": {"metadata": {"labels": {"app": app}}, "spec": spec},
        },
    }
    client.AppsV1Api(cluster.api).create_namespaced_replica_set(ns, body)


def pods_of(cluster: kube.Cluster, ns: str) -> dict[str, list[dict[str, Any]]]:
    """app -> its pods that are not being deleted (raw JSON)."""
    raw = cluster.core.list_namespaced_pod(ns, _preload_content=False)
    out: dict[str, list[dict[str, Any]]] = {}
    for pod in json.loads(raw.data)["items"]:
        if not pod["metadata"].get("deletionTimestamp"):
            out.setdefault(pod["metadata"]["labels"]["app"], []).append(pod)
    return out


def running(cluster: kube.Cluster, ns: str, app: str, node: str) -> list[str]:
    return [
        p["metadata"]["name"]
        for p in pods_of(cluster, ns).get(app, [])
        if p["spec"].get("nodeName") == node and p["status"].get("phase") == "Running"
    ]


def validate(
    fleet: Any, node: str, policy: UpgradePolicy, host: Host, tmp_path: Path
) -> tuple[bool, dict[str, str]]:
    """Run the upgrade's validation of ``node``; (its outcome, layer/check -> status from its verdict)."""
    suite = tmp_path / "conformance"
    suite.mkdir()
    for name in ("test_node.py", "test_workloads.py"):
        shutil.copy(SUITE_DIR / name, suite / name)
    report_dir = tmp_path / "reports" / node
    command = upgrade_ops.conformance_command(
        suite, str(fleet.inventory), node, report_dir, str(fleet.kubeconfig), {}
    )
    ok = run_op(
        upgrade_ops.validated._inner(
            node=node,
            policy=policy,
            conformance=command,
            report_dir=str(report_dir),
            kubeconfig=str(fleet.kubeconfig),
        ),
        host,
    )
    verdict = json.loads((report_dir / "verdict.json").read_text())
    return ok, {
        f"{layer}/{check}": r["status"]
        for layer, data in verdict["nodes"][node]["layers"].items()
        for check, r in data["checks"].items()
    }


def test_drain_evicts_a_claim_holder_and_validation_runs_the_dra_checks(
    fleet: Any, namespace: str, tmp_path: Path
) -> None:
    (node,) = fleet.nodes
    wait_for(lambda: fleet.node(node)["status"].get("conditions"), what=f"{node} registered")
    cluster = kube.connect(str(fleet.kubeconfig))
    fleet.converged()
    template = claim_template()  # one gpu.nvidia.com device
    client.ResourceV1Api(cluster.api).create_namespaced_resource_claim_template(namespace, template)
    replicaset(cluster, namespace, "train", node, claim=template["metadata"]["name"])
    replicaset(cluster, namespace, "web", node)
    wait_for(
        lambda: running(cluster, namespace, "train", node) and running(cluster, namespace, "web", node),
        120,
        f"the claim holder and the plain pod Running on {node}",
    )
    (holder,) = running(cluster, namespace, "train", node)
    (plain,) = running(cluster, namespace, "web", node)
    (held,) = pods_of(cluster, namespace)["train"]
    assert "nvidia.com" not in json.dumps(held["spec"]["containers"])  # a GPU through the claim only
    assert held["status"].get("resourceClaimStatuses"), "the holder's claim was never made"

    # drain, GPU pods only: the claim holder goes, the plain pod stays
    maintenance.cordon(cluster, node, upgrade.CORDONED)
    policy = UpgradePolicy(drain_gpu_pods_only=True, drain_timeout=90, node_ready_timeout=30)
    host = Host(node, boot_id="")
    ok = run_op(upgrade_ops.drained._inner(node=node, policy=policy, kubeconfig=str(fleet.kubeconfig)), host)
    assert ok and host.errors == []
    assert maintenance.read_node(cluster, node).upgrade_state == upgrade.DRAINED
    left = {p["metadata"]["name"] for pods in pods_of(cluster, namespace).values() for p in pods}
    assert holder not in left  # evicted (its ReplicaSet's replacement waits for the uncordon)
    assert running(cluster, namespace, "web", node) == [plain]  # never touched

    # validation: the upgrade's own conformance command for this node; it must run the DRA checks
    host = Host(node, boot_id=maintenance.read_node(cluster, node).boot_id)
    ok, checks = validate(fleet, node, policy, host, tmp_path)
    assert ok and host.errors == [], (host.errors, checks)
    for check in (
        "node/test_resource_slices",
        "node/test_device_classes",
        "node/test_dra_kubelet_plugin_ready",
        "workloads/test_vector_add",
        "workloads/test_dra_unsatisfiable_claim_pending",
        "workloads/test_dra_driver_version_matches_smi",
        "workloads/test_dra_shared_claim_same_gpu",
    ):
        assert checks.get(check) == "pass", (check, checks)
    assert checks["node/test_device_plugin_ready"] == "skip"  # the device plugin's check is not this node's
    view = maintenance.read_node(cluster, node)
    assert (view.unschedulable, view.upgrade_state) == (False, upgrade.DONE)
    assert running(cluster, namespace, "web", node) == [plain]


def test_validation_keeps_a_dra_node_cordoned_when_its_dra_checks_fail(fleet: Any, tmp_path: Path) -> None:
    """The upgrade left the node without the DRA driver's kubelet plugin (its DaemonSet gone): the device-plugin
    checks cannot see it, the DRA ones must, and the node stays cordoned naming them."""
    (node,) = fleet.nodes
    cluster = kube.connect(str(fleet.kubeconfig))
    fleet.converged()
    maintenance.cordon(cluster, node, upgrade.REBOOTING)
    fleet.delete_daemonset(dra_addons.KUBELET_PLUGIN)
    host = Host(node, boot_id=maintenance.read_node(cluster, node).boot_id)
    ok, checks = validate(fleet, node, UpgradePolicy(node_ready_timeout=30), host, tmp_path)
    view = maintenance.read_node(cluster, node)
    assert not ok and view.unschedulable and view.upgrade_state == upgrade.FAILED
    failure = view.annotations[maintenance.FAILURE_ANNOTATION]
    assert checks["node/test_dra_kubelet_plugin_ready"] == "fail", checks
    assert "node::test_dra_kubelet_plugin_ready:" in failure and "node::test_resource_slices:" in failure
    assert host.errors and f"{node} stays cordoned" in host.errors[0]
