"""gpu_allocation = "dra" on the lab's real control plane: a fleet with one DRA pool (A100, MIG on GPU 0) and one
device-plugin pool (L4). The add-ons put the DRA driver's kubelet plugin on the dra node only and the device plugin on
the other; the node agent publishes the dra node's ResourceSlice from its host root; the real scheduler allocates the
suite's claims and the agent prepares exactly the allocated devices. Faults fail exactly the checks they should."""

from __future__ import annotations

import json

import pytest
from kube_fleet import copy_suite, make_fleet
from polling import wait_for
from shims import read_verdict

from gpuready.deploy import dra_addons
from gpuready.lab import faults
from gpuready.spec import dra

DRA_A100 = {
    "gpu_allocation": "dra",
    "gpu_sharing": "mig",
    "mig_strategy": "mixed",
    "mig_layout": {0: ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]},
}
HOSTS = [("a100-80gb-4", DRA_A100), ("l4-1", {})]


@pytest.fixture
def suite(pytester):
    return copy_suite(pytester, "test_node.py", "test_workloads.py", "test_metrics.py")


@pytest.fixture
def fleet(lab_cluster, api, virtual_nodes, tmp_path):
    made = make_fleet(lab_cluster, api, virtual_nodes, tmp_path / "fleet", HOSTS)
    yield made
    made.delete()


def slice_of(fleet, node):
    from kubernetes import client

    raw = client.ResourceV1Api(fleet.api).list_resource_slice(
        field_selector=f"spec.nodeName={node}", _preload_content=False
    )
    return json.loads(raw.data)["items"]


def devices_of(fleet, node):
    return sorted(d["name"] for s in slice_of(fleet, node) for d in s["spec"]["devices"])


def run(pytester, fleet, *args):
    report = pytester.path / "report"
    pytester.runpytest_inprocess(
        "conformance", "--inventory", str(fleet.inventory), "--kubeconfig", str(fleet.kubeconfig),
        "--command-timeout", "60", "--pod-timeout", "60", "--report-dir", str(report), "-p", "no:cacheprovider", *args,
    )  # fmt: skip
    return read_verdict(report)


def results(verdict):
    return {
        f"{node}:{layer}/{check}": (r["status"], r["message"])
        for node, data in verdict["nodes"].items()
        for layer, layer_data in data["layers"].items()
        for check, r in layer_data["checks"].items()
    }


def failing(verdict):
    return {k: m for k, (s, m) in results(verdict).items() if s == "fail"}


def converged(fleet):
    a100, l4 = fleet.nodes
    wait_for(lambda: len(devices_of(fleet, a100)) == 7, what=f"{a100}'s ResourceSlice with 7 devices")
    fleet.converged()
    return a100, l4


def test_mixed_fleet_passes_and_the_dra_node_publishes_its_devices(pytester, suite, fleet):
    a100, l4 = converged(fleet)
    assert devices_of(fleet, a100) == [
        "gpu-0-mig-14-4-2", "gpu-0-mig-19-6-1", "gpu-0-mig-19-7-1", "gpu-0-mig-9-0-4", "gpu-1", "gpu-2", "gpu-3",
    ]  # fmt: skip
    (published,) = slice_of(fleet, a100)
    assert published["spec"]["pool"]["name"] == a100 and published["spec"]["driver"] == dra.DRIVER
    assert slice_of(fleet, l4) == []
    pods: dict[str, list[str]] = {}
    for pod in fleet.pods(fleet.namespace):
        pods.setdefault(pod["metadata"]["name"].rsplit("-", 1)[0], []).append(pod["spec"].get("nodeName", ""))
    assert pods[dra_addons.KUBELET_PLUGIN] == [a100]  # the DRA driver only on the dra node ...
    assert pods["nvidia-device-plugin"] == [l4]  # ... and the device plugin only on the other
    assert sorted(pods["gpu-feature-discovery"]) == sorted([a100, l4])  # GFD on both
    verdict = run(pytester, fleet)
    assert failing(verdict) == {}
    got = results(verdict)
    for check in ("node/test_resource_slices", "node/test_device_classes", "node/test_dra_kubelet_plugin_ready",
                  "workloads/test_vector_add", "workloads/test_mig_devices",
                  "workloads/test_dra_unsatisfiable_claim_pending", "workloads/test_dra_driver_version_matches_smi",
                  "workloads/test_dra_shared_claim_same_gpu", "metrics/test_claim_in_labels",
                  "metrics/test_running_pod_in_labels"):  # fmt: skip
        assert got[f"{a100}:{check}"][0] == "pass", (check, got[f"{a100}:{check}"])
    assert got[f"{a100}:node/test_device_plugin_ready"] == (
        "skip", f"{a100}: not applicable: gpu_allocation is 'dra' (the DRA driver serves this node's GPUs); "
        "test_dra_kubelet_plugin_ready checks its plugin",
    )  # fmt: skip
    assert got[f"{l4}:node/test_resource_slices"] == (
        "skip", f"{l4}: not applicable: gpu_allocation is 'device-plugin'"
    )  # fmt: skip
    assert got[f"{l4}:workloads/test_dra_shared_claim_same_gpu"] == (
        "skip", f"{l4}: not applicable: gpu_allocation is 'device-plugin'"
    )  # fmt: skip
    assert got[f"{l4}:node/test_device_plugin_ready"][0] == "pass"
    assert got[f"{l4}:workloads/test_vector_add"][0] == "pass"


def test_a_gpu_off_the_bus_leaves_the_slice_and_a_deleted_kubelet_plugin_stops_publication(
    pytester, suite, fleet
):
    a100, _l4 = converged(fleet)
    hardware = fleet.hosts[a100].parent / "machine" / "hardware.json"
    hw = json.loads(hardware.read_text())
    hw = faults.apply_fault(faults.clear_faults(hw), "off-bus", 2)
    hardware.write_text(json.dumps(hw))
    wait_for(lambda: "gpu-2" not in devices_of(fleet, a100), what="gpu-2 gone from the slice")
    verdict = run(pytester, fleet, "-m", "node")
    # GFD counts the GPUs on the bus too: both say so, nothing else fails
    assert set(failing(verdict)) == {f"{a100}:node/test_resource_slices", f"{a100}:node/test_gfd_labels"}
    message = failing(verdict)[f"{a100}:node/test_resource_slices"]
    assert message.startswith(f"{a100}: not published: gpu-2; GPU (")
    assert "2 published, expected 3" in message

    hw["faults"] = []  # back on the bus: back in the slice
    hardware.write_text(json.dumps(hw))
    wait_for(lambda: "gpu-2" in devices_of(fleet, a100), what="gpu-2 back in the slice")
    fleet.delete_daemonset(dra_addons.KUBELET_PLUGIN)
    wait_for(lambda: slice_of(fleet, a100) == [], what="the slice deleted with the kubelet plugin")
    verdict = run(pytester, fleet, "-m", "node")
    assert set(failing(verdict)) == {
        f"{a100}:node/test_resource_slices",
        f"{a100}:node/test_dra_kubelet_plugin_ready",
    }
    assert failing(verdict)[f"{a100}:node/test_resource_slices"].startswith(
        f"{a100}: no ResourceSlice of driver gpu.nvidia.com for this node, expected 7 device(s): 1x MIG 3g.40gb"
    )


def test_a_driver_library_mismatch_stops_the_kubelet_plugin(pytester, suite, fleet):
    a100, _l4 = converged(fleet)
    (fleet.hosts[a100] / "usr/lib/nvidia-emu/driver-version").write_text(
        "580.999.01\n"
    )  # upgraded, not rebooted
    from kubernetes import client

    core = client.CoreV1Api(fleet.api)
    deleted = set()
    for pod in fleet.pods(fleet.namespace, a100):
        if pod["metadata"]["name"].startswith(dra_addons.KUBELET_PLUGIN):
            deleted.add(pod["metadata"]["uid"])
            core.delete_namespaced_pod(
                pod["metadata"]["name"], fleet.namespace
            )  # restarts on the new library
    wait_for(lambda: slice_of(fleet, a100) == [], what="no slice from a plugin that cannot load NVML")
    # the DaemonSet's replacement exists (it cannot become Ready) before the suite looks at the node
    wait_for(
        lambda: any(
            p["metadata"]["name"].startswith(dra_addons.KUBELET_PLUGIN)
            and p["metadata"]["uid"] not in deleted
            for p in fleet.pods(fleet.namespace, a100)
        ),
        what="the DaemonSet's replacement kubelet-plugin pod",
    )
    verdict = run(pytester, fleet, "-m", "node")
    bad = failing(verdict)
    assert set(bad) == {f"{a100}:node/test_resource_slices", f"{a100}:node/test_dra_kubelet_plugin_ready"}, (
        bad
    )
    assert "not Ready" in bad[f"{a100}:node/test_dra_kubelet_plugin_ready"]


def test_a_kubelet_plugin_without_the_time_slicing_gate_refuses_the_shared_claim(pytester, suite, fleet):
    """The driver's chart installed without featureGates.TimeSlicingSettings: the plugin runs and publishes, but
    refuses the claim's time-slicing config, so the pods sharing it never start; nothing else fails."""
    from kubernetes import client

    a100, _l4 = converged(fleet)
    apps = client.AppsV1Api(fleet.api)
    ds = apps.read_namespaced_daemon_set(dra_addons.KUBELET_PLUGIN, fleet.namespace)
    before = {p["metadata"]["uid"] for p in fleet.pods(fleet.namespace, a100)}
    patch = {
        "spec": {
            "template": {
                "spec": {"containers": [{"name": ds.spec.template.spec.containers[0].name, "args": []}]}
            }
        }
    }
    apps.patch_namespaced_daemon_set(dra_addons.KUBELET_PLUGIN, fleet.namespace, patch)

    def restarted() -> bool:
        pods = [
            p
            for p in fleet.pods(fleet.namespace, a100)
            if p["metadata"]["name"].startswith(dra_addons.KUBELET_PLUGIN)
        ]
        return any(
            p["metadata"]["uid"] not in before
            and p.get("status", {}).get("phase") == "Running"
            and not p["spec"]["containers"][0].get("args")
            for p in pods
        )

    wait_for(restarted, what="the kubelet plugin restarted without its feature gates")
    wait_for(lambda: len(devices_of(fleet, a100)) == 7, what=f"{a100}'s ResourceSlice published again")
    verdict = run(pytester, fleet, "-m", "workloads", "--pod-timeout", "20")
    bad = failing(verdict)
    assert set(bad) == {f"{a100}:workloads/test_dra_shared_claim_same_gpu"}, bad
    message = bad[f"{a100}:workloads/test_dra_shared_claim_same_gpu"]
    assert message.startswith(
        f"{a100}: pod shared-{a100}-0 sharing ResourceClaim shared-{a100} (TimeSlicing) on device {a100}/gpu-"
    ), message
    assert (
        "FailedPrepareDynamicResources" in message and "unknown GPU sharing strategy: TimeSlicing" in message
    ), message


def test_dcgm_exporter_without_its_dra_mapping_names_no_claim(pytester, suite, fleet):
    """dcgm-exporter without DCGM_EXPORTER_KUBERNETES_ENABLE_DRA (its default): a GPU held through a claim carries
    neither the pod nor the claim; the metrics layer's label checks fail on the dra node only."""
    from kubernetes import client

    a100, l4 = converged(fleet)
    apps = client.AppsV1Api(fleet.api)
    name = "nvidia-dcgm-exporter"
    ds = json.loads(apps.read_namespaced_daemon_set(name, fleet.namespace, _preload_content=False).data)
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    env = [e for e in container["env"] if e["name"] != "DCGM_EXPORTER_KUBERNETES_ENABLE_DRA"]
    assert len(env) == len(container["env"]) - 1  # the add-ons turned it on: the fleet has a dra pool
    before = {p["metadata"]["uid"] for p in fleet.pods(fleet.namespace)}
    patch = [{"op": "replace", "path": "/spec/template/spec/containers/0/env", "value": env}]
    apps.patch_namespaced_daemon_set(name, fleet.namespace, patch)

    def replaced() -> bool:
        pods = [p for p in fleet.pods(fleet.namespace) if p["metadata"]["name"].startswith(name)]
        return len(pods) == 2 and all(
            p["metadata"]["uid"] not in before and p.get("status", {}).get("phase") == "Running" for p in pods
        )

    wait_for(replaced, what="dcgm-exporter restarted without its DRA mapping")
    verdict = run(pytester, fleet, "-m", "metrics")
    bad = failing(verdict)
    assert set(bad) == {
        f"{a100}:metrics/test_claim_in_labels",
        f"{a100}:metrics/test_running_pod_in_labels",
    }, bad
    message = bad[f"{a100}:metrics/test_claim_in_labels"]
    assert message.startswith(f"{a100}: no series carries ResourceClaim gpuready-") and (
        f"/holder-{a100} (no series has a dra_claim_name label: is dcgm-exporter's DRA mapping on" in message
    ), message
    assert results(verdict)[f"{l4}:metrics/test_running_pod_in_labels"][0] == "pass"
