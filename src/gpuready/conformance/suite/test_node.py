"""Node layer: the Kubernetes Node object of every GPU node says what the inventory says.

One list of nodes, one list of pods (which also says where node-feature-discovery runs, when a node's GFD labels are
all missing) and one GET of the RuntimeClass for the whole fleet per run (not one request
per node per check): on a 1000-node fleet this layer costs three requests. The judging is in
:mod:`gpuready.conformance.checks.node`.
"""

import json

import pytest

from gpuready.conformance.checks import dra as dra_checks
from gpuready.conformance.checks import node as checks
from gpuready.conformance.plugin import judge

pytestmark = pytest.mark.node


@pytest.fixture(scope="module")
def fleet(cluster):
    """(nodes by name, pods by node name, RuntimeClass nvidia or None), read once for the whole fleet."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = cluster.core
    nodes = json.loads(core.list_node(_preload_content=False).data)["items"]
    pods = json.loads(core.list_pod_for_all_namespaces(_preload_content=False).data)["items"]
    by_node = {}
    for pod in pods:
        by_node.setdefault((pod.get("spec") or {}).get("nodeName"), []).append(pod)
    try:
        raw = client.NodeV1Api(cluster.api).read_runtime_class("nvidia", _preload_content=False)
        runtime_class = json.loads(raw.data)
    except ApiException as exc:
        if exc.status != 404:
            raise
        runtime_class = None
    return {n["metadata"]["name"]: n for n in nodes}, by_node, runtime_class


@pytest.fixture
def node_object(node, fleet):
    return fleet[0].get(node.name)


def test_ready(node, node_object):
    judge(node, checks.ready, node, node_object)


def test_allocatable(node, node_object):
    judge(node, checks.gpu_resources, node, node_object, "allocatable")


def test_capacity(node, node_object):
    judge(node, checks.gpu_resources, node, node_object, "capacity")


@pytest.fixture(scope="module")
def nfd_masters(fleet, gpuready_suite):
    """The cluster's nfd-master pods, from the pods listed once (to say why GFD labels are all missing)."""
    first = next(iter(gpuready_suite.nodes), None)  # nfd_image is fleet-wide
    return [p for pods in fleet[1].values() for p in pods if checks.is_nfd(p, "nfd-master", first)]


def test_gfd_labels(node, node_object, fleet, nfd_masters):
    judge(node, checks.gfd_labels, node, node_object, fleet[1].get(node.name, []), nfd_masters)


def test_inventory_labels(node, node_object, gpuready_suite):
    if gpuready_suite.discovery is not None:
        pytest.skip(
            f"{node.name}: --discover: no inventory names labels to join with (test_labels_agree judges the "
            "labels the node has)"
        )
    judge(node, checks.inventory_labels, node, node_object)


def test_taints(node, node_object):
    judge(node, checks.taints, node, node_object)


def test_runtime_class(node, fleet):
    judge(node, checks.runtime_class, fleet[2])


def test_device_plugin_ready(node, fleet):
    if node.dra:
        pytest.skip(
            f"{node.name}: {dra_checks.DEVICE_PLUGIN_ONLY}; test_dra_kubelet_plugin_ready checks its plugin"
        )
    judge(node, checks.addon_pod_ready, node, fleet[1].get(node.name, []), "device plugin")


@pytest.fixture(scope="module")
def dra_objects(cluster, gpuready_suite):
    """(every ResourceSlice, DeviceClasses by name), listed once when a node uses DRA."""
    from gpuready.conformance.dra_workloads import list_dra_objects

    return list_dra_objects(cluster) if any(n.dra for n in gpuready_suite.nodes) else ([], {})


def test_dra_kubelet_plugin_ready(node, fleet):
    if not node.dra:
        pytest.skip(f"{node.name}: {dra_checks.DRA_ONLY}")
    judge(node, checks.addon_pod_ready, node, fleet[1].get(node.name, []), "DRA kubelet plugin")


def test_resource_slices(node, dra_objects):
    judge(node, dra_checks.resource_slices, node, dra_objects[0])


def test_device_classes(node, dra_objects):
    judge(node, dra_checks.device_classes, node, dra_objects[1])


def test_dcgm_exporter_ready(node, fleet):
    judge(node, checks.addon_pod_ready, node, fleet[1].get(node.name, []), "dcgm-exporter")
