"""gpu_allocation = "dra" on real lab hosts: a fleet with one dra pool (the MIG A100 on sid, MIG on GPU 0 only) and
one device-plugin pool (the time-sliced L4 on trixie), both CDI hosts, converged by the real deploys (pyinfra
deploys/gpu_node.py then deploys/cluster_addons.py, with GPUREADY_LAB_DRA naming the A100's pool; inventory/lab.py)
and joined to the lab's real control plane. Healthy, the whole suite passes, the DRA checks on the dra node and the
device-plugin checks on the other; a GPU off the bus (once the kubelet plugin restarts), the kubelet plugin gone
and a driver/library mismatch each fail exactly the node layer's checks that should fail, on the dra node only.

A lab of its own (hosts gpu-node-61 and 62, its own state dir), brought up and down by the module."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import Lab, lab_skip_reason
from polling import wait_for
from pyinfra_runs import run_pyinfra
from suite_runs import failed, run_suite, wait_until_settled

from gpuready import kube
from gpuready.deploy import dra_addons
from gpuready.lab import hosts
from gpuready.lab.state import LabPaths

pytestmark = pytest.mark.lab

FIRST_INDEX = 61
PROFILES, RELEASES = ["a100-80gb-4", "l4-1"], ["sid", "trixie"]
DRA_NODE, PLUGIN_NODE = f"gpu-node-{FIRST_INDEX}", f"gpu-node-{FIRST_INDEX + 1}"
DRA_ENV = {"GPUREADY_LAB_DRA": "a100-80gb-4"}
ADDONS_NAMESPACE = "gpu-system"  # group_data/all.py: addons_namespace
# the A100 in DRA mode: 4 MIG devices on GPU 0 (named gpu-0-mig-<profile id>-<start>-<size>), GPUs 1-3 whole
WHOLE = ["gpu-1", "gpu-2", "gpu-3"]


@pytest.fixture(scope="module")
def dra_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, kube.Cluster]]:
    if reason := lab_skip_reason():
        pytest.skip(reason)
    paths = LabPaths(tmp_path_factory.mktemp("dra-lab"))
    try:
        lab = Lab(
            paths,
            hosts.up(
                paths,
                nodes=2,
                profiles=PROFILES,
                releases=RELEASES,
                first_index=FIRST_INDEX,
            ),
            extra_env=DRA_ENV,
        )
        for deploy in ("deploys/gpu_node.py", "deploys/cluster_addons.py"):
            done = run_pyinfra(lab, deploy=deploy)
            assert done.returncode == 0, done.failure
        yield lab, kube.connect(lab.state["apiserver"]["kubeconfig"])
    finally:
        with contextlib.suppress(Exception):
            hosts.down(paths, quiet=True, poweroff=False)  # thrown away: no orderly shutdown


def slices(cluster: kube.Cluster, node: str) -> list[dict[str, Any]]:
    from kubernetes import client

    raw = client.ResourceV1Api(cluster.api).list_resource_slice(
        field_selector=f"spec.nodeName={node}", _preload_content=False
    )
    return list(json.loads(raw.data)["items"])


def devices(cluster: kube.Cluster, node: str) -> list[str]:
    return sorted(d["name"] for s in slices(cluster, node) for d in s["spec"].get("devices") or [])


def published(cluster: kube.Cluster) -> list[str] | None:
    """The dra node's devices once its slice holds all 7 (None before)."""
    names = devices(cluster, DRA_NODE)
    mig = [n for n in names if n.startswith("gpu-0-mig-")]
    return names if len(mig) == 4 and [n for n in names if n not in mig] == WHOLE else None


def plugin_pods(cluster: kube.Cluster) -> list[dict[str, Any]]:
    raw = cluster.core.list_namespaced_pod(
        ADDONS_NAMESPACE, field_selector=f"spec.nodeName={DRA_NODE}", _preload_content=False
    )
    return [
        p
        for p in json.loads(raw.data)["items"]
        if p["metadata"]["name"].startswith(dra_addons.KUBELET_PLUGIN)
    ]


def delete_plugin_pods(cluster: kube.Cluster) -> None:
    for pod in plugin_pods(cluster):
        cluster.core.delete_namespaced_pod(pod["metadata"]["name"], ADDONS_NAMESPACE)


def suite(lab: Lab, tmp_path: Any, *args: str) -> dict:
    return run_suite(SimpleNamespace(lab=lab), tmp_path, *args)


def statuses(verdict: dict, node: str) -> dict[str, tuple[str, str]]:
    return {
        f"{layer}/{check}": (r["status"], r["message"])
        for layer, data in verdict["nodes"][node]["layers"].items()
        for check, r in data["checks"].items()
    }


def test_a_mixed_dra_and_device_plugin_fleet_converges_and_passes_the_whole_suite(dra_lab, tmp_path):
    lab, cluster = dra_lab
    wait_for(lambda: published(cluster), timeout=120, what=f"{DRA_NODE}'s ResourceSlice")
    wait_until_settled(
        SimpleNamespace(lab=lab)
    )  # the add-ons roll out and become Ready after the deploy returns
    assert slices(cluster, PLUGIN_NODE) == []
    labels = cluster.core.read_node(DRA_NODE).metadata.labels
    assert (
        labels["gpuready.io/gpu-allocation"] == "dra"
    )  # the join labelled it: the DRA driver runs there only
    verdict = suite(lab, tmp_path)
    assert failed(verdict) == {}
    dra_node, plugin_node = statuses(verdict, DRA_NODE), statuses(verdict, PLUGIN_NODE)
    for check in ("node/test_resource_slices", "node/test_device_classes", "node/test_dra_kubelet_plugin_ready",
                  "workloads/test_vector_add", "workloads/test_mig_devices", "workloads/test_dra_shared_claim_same_gpu",
                  "workloads/test_dra_unsatisfiable_claim_pending", "workloads/test_dra_driver_version_matches_smi"):  # fmt: skip
        assert dra_node[check][0] == "pass", (check, dra_node[check])
    for check in (
        "node/test_device_plugin_ready",
        "workloads/test_vector_add",
        "workloads/test_time_slicing",
    ):
        assert plugin_node[check][0] == "pass", (check, plugin_node[check])
    assert plugin_node["node/test_resource_slices"][0] == "skip"
    assert dra_node["node/test_device_plugin_ready"][0] == "skip"
    for node in (DRA_NODE, PLUGIN_NODE):
        for layer in ("host", "gpu", "node", "workloads", "metrics", "policy"):
            assert "pass" in {
                r["status"] for r in verdict["nodes"][node]["layers"][layer]["checks"].values()
            }, (
                node,
                layer,
            )


def test_a_gpu_off_the_bus_the_kubelet_plugin_gone_and_a_driver_mismatch_fail_the_dra_checks(
    dra_lab, tmp_path
):
    lab, cluster = dra_lab
    wait_for(lambda: published(cluster), timeout=120, what=f"{DRA_NODE}'s ResourceSlice")

    # a GPU off the bus, then the kubelet plugin restarted (NVIDIA's DRA driver v0.4.1 enumerates the GPUs when its
    # plugin starts and keeps publishing them while it runs): NVIDIA's container runtime cannot start the plugin's
    # container at all ("failed to generate CDI spec for mode "auto": ... error getting device handle for index
    # '2': GPU is lost"), so the kubelet wipes the node's slice; the slice and plugin checks fail (and GFD's
    # gpu.count once GFD has relabelled, on its own cycle), on the dra node only
    hosts.inject_fault(lab.paths, DRA_NODE, "off-bus", 2)
    delete_plugin_pods(cluster)
    wait_for(lambda: slices(cluster, DRA_NODE) == [], what="no slice from a plugin that cannot start")
    bad = failed(suite(lab, tmp_path / "off-bus", "-m", "node"))
    assert set(bad) == {DRA_NODE}, bad
    plugin_checks = {"node/test_resource_slices", "node/test_dra_kubelet_plugin_ready"}
    assert plugin_checks <= set(bad[DRA_NODE]) <= plugin_checks | {"node/test_gfd_labels"}, bad
    assert "not Ready" in bad[DRA_NODE]["node/test_dra_kubelet_plugin_ready"], bad
    hosts.inject_fault(lab.paths, DRA_NODE, None)
    delete_plugin_pods(
        cluster
    )  # as an operator does after the repair: no waiting out the crash-loop back-off
    wait_for(lambda: published(cluster), what="gpu-2 back in the slice")

    # the DaemonSet deleted: no plugin, no slice; exactly the slice and plugin checks fail, on the dra node
    from kubernetes import client

    client.AppsV1Api(cluster.api).delete_namespaced_daemon_set(dra_addons.KUBELET_PLUGIN, ADDONS_NAMESPACE)
    wait_for(
        lambda: slices(cluster, DRA_NODE) == [] and plugin_pods(cluster) == [],
        what="the plugin and its slice gone",
    )
    bad = failed(suite(lab, tmp_path / "no-plugin", "-m", "node"))
    assert set(bad) == {DRA_NODE}, bad
    assert set(bad[DRA_NODE]) == {"node/test_resource_slices", "node/test_dra_kubelet_plugin_ready"}, bad
    assert bad[DRA_NODE]["node/test_resource_slices"].startswith(
        f"{DRA_NODE}: no ResourceSlice of driver gpu.nvidia.com for this node, expected 7 device(s): "
    )
    back = run_pyinfra(lab, deploy="deploys/cluster_addons.py")  # the add-ons deploy puts the DaemonSet back
    assert back.returncode == 0, back.output[-3000:]
    wait_for(lambda: published(cluster), what="the slice published again")

    # a driver/library mismatch (upgraded, not rebooted): the restarted plugin cannot load NVML and publishes nothing
    hosts.inject_fault(lab.paths, DRA_NODE, "driver-mismatch")
    delete_plugin_pods(cluster)
    wait_for(lambda: slices(cluster, DRA_NODE) == [], what="no slice from a plugin that cannot load NVML")
    bad = failed(suite(lab, tmp_path / "mismatch", "-m", "node"))
    assert set(bad) == {DRA_NODE}, bad
    assert set(bad[DRA_NODE]) == {"node/test_resource_slices", "node/test_dra_kubelet_plugin_ready"}, bad
    assert "not Ready" in bad[DRA_NODE]["node/test_dra_kubelet_plugin_ready"]
    hosts.inject_fault(lab.paths, DRA_NODE, None)
    delete_plugin_pods(cluster)
    wait_for(lambda: published(cluster), what="the slice back once the driver matches")
