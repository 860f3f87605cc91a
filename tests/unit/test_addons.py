"""Add-on manifests: valid against the Kubernetes schema of the pinned version, and driven by the fleet spec."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gpuready.deploy.addons import DEVICE_PLUGIN_CONFIGMAP, AddonSettings, prometheus_rules, render_all
from gpuready.spec import load_fleet

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "example.py"


@pytest.fixture(scope="module")
def fleet():
    return load_fleet(EXAMPLE)


@pytest.fixture(scope="module")
def manifests(fleet):
    settings = AddonSettings(gpu_resource_quotas=(("ml-team", 8),), priority_classes=(("gpu-high", 1000),))
    return render_all(fleet, settings)


def kube_minor(fleet) -> str:
    (minor,) = {n.versions.kubernetes_minor for n in fleet.nodes.values()}
    return minor


def test_every_manifest_validates_against_the_pinned_kubernetes_schema(fleet, manifests):
    version = kube_minor(fleet) + ".0"
    for manifest in manifests:
        kubernetes_validate.validate(manifest, version, strict=True)


def test_validation_would_catch_a_bad_manifest(fleet, manifests):
    broken = yaml.safe_load(yaml.safe_dump(manifests[1]))  # the RuntimeClass
    broken["handlr"] = broken.pop("handler")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, kube_minor(fleet) + ".0", strict=True)


def test_configmap_is_the_specs_configs_and_nodes_select_them(fleet, manifests):
    (cm,) = [
        m for m in manifests if m["kind"] == "ConfigMap" and m["metadata"]["name"] == DEVICE_PLUGIN_CONFIGMAP
    ]
    assert cm["data"] == fleet.device_plugin_configs()
    for node in fleet.nodes.values():
        assert node.node_labels["nvidia.com/device-plugin.config"] in cm["data"]


def test_runtime_class_schedules_onto_gpu_nodes(manifests):
    (rc,) = [m for m in manifests if m["kind"] == "RuntimeClass"]
    assert rc["handler"] == "nvidia"
    assert rc["scheduling"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert rc["scheduling"]["tolerations"][0]["key"] == "nvidia.com/gpu"


def test_workloads_are_least_privilege_and_use_the_nvidia_runtime(manifests):
    for ds in (m for m in manifests if m["kind"] == "DaemonSet"):
        if ds["metadata"]["name"] != "nfd-worker":  # NFD reads files and the API: no driver, so runc
            assert ds["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
        for container in ds["spec"]["template"]["spec"]["containers"]:
            security = container.get("securityContext", {})
            assert not security.get("privileged", False), ds["metadata"]["name"]


def test_dcgm_exporter_service_on_9400(manifests):
    (svc,) = [m for m in manifests if m["kind"] == "Service"]
    assert svc["spec"]["ports"][0]["port"] == 9400
    (ds,) = [
        m for m in manifests if m["metadata"]["name"] == "nvidia-dcgm-exporter" and m["kind"] == "DaemonSet"
    ]
    env = {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["DCGM_EXPORTER_KUBERNETES"] == "true"


def test_optional_quota_and_priority_class(manifests):
    (quota,) = [m for m in manifests if m["kind"] == "ResourceQuota"]
    assert quota["metadata"]["namespace"] == "ml-team"
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "8"}
    assert [m["value"] for m in manifests if m["kind"] == "PriorityClass"] == [1000]
    # the team's namespace comes first (created when missing) and is not labelled as gpuready's: never pruned
    (team,) = [m for m in manifests if m["kind"] == "Namespace" and m["metadata"]["name"] == "ml-team"]
    assert "labels" not in team["metadata"]
    assert manifests.index(team) < manifests.index(quota)


def test_an_immutable_field_change_is_named():
    from gpuready.kube import immutable_changes

    pc = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "hi"},
        "value": 10,
    }
    assert immutable_changes(None, pc) == []
    assert immutable_changes({**pc, "value": 10}, pc) == []
    assert immutable_changes({**pc, "value": 500}, pc) == ["value 500 -> 10"]
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"}, "spec": {}}
    assert immutable_changes({**quota, "spec": {"hard": {}}}, quota) == []


def test_alert_rule():
    rule = prometheus_rules(AddonSettings())["spec"]["groups"][0]["rules"][0]
    assert rule["alert"] == "GPUUnderutilised"
    assert rule["for"] == "30m"
    assert "< 10" in rule["expr"] and 'pod!=""' in rule["expr"]
