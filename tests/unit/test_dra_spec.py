"""gpu_allocation = "dra": the knob's rules, the ResourceSlice devices the spec expects (what the DRA driver for GPUs
publishes: semver versions, NVML architecture names, memory in bytes), `gpuready plan`, and the add-ons (the DRA
driver's DeviceClasses, RBAC, kubelet plugin on dra nodes only, the device plugin kept off them)."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
from test_spec import problems_of, write_inventory

from gpuready.deploy import dra_addons, plan
from gpuready.deploy.addons import AddonSettings, render_all
from gpuready.spec import Fleet, dra, load_fleet

A100_MIG = {
    "gpu_model": "NVIDIA A100-SXM4-80GB",
    "gpu_count": 2,
    "gpu_sharing": "mig",
    "mig_layout": {0: ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]},
}


def node_of(tmp_path, **data):
    return next(iter(load_fleet(write_inventory(tmp_path, **data)).nodes.values()))


def test_whole_gpus_one_device_each_with_the_drivers_attributes(tmp_path):
    node = node_of(tmp_path, gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8, gpu_allocation="dra",
                   nvidia_driver_version="580.178.04")  # fmt: skip
    devices = node.expected_devices
    assert len(devices) == 8 and {d.type for d in devices} == {"gpu"}
    attrs = dict(devices[0].attributes)
    assert attrs == {
        "type": "gpu",
        "productName": "NVIDIA H100 80GB HBM3",
        "architecture": "Hopper",
        "cudaComputeCapability": "9.0.0",
        "driverVersion": "580.178.4",  # Masterminds semver drops the leading zero
        "cudaDriverVersion": "13.0.0",
    }
    assert "uuid" not in attrs  # the hardware's, unknown to the inventory
    assert devices[0].memory_bytes == node.model.memory_mib * 2**20
    assert node.expected_allocatable == {}  # no device plugin on a dra node
    assert node.node_labels[dra.ALLOCATION_LABEL] == "dra"


def test_mig_devices_replace_their_gpu_and_carry_profile_and_memory(tmp_path):
    node = node_of(tmp_path, gpu_allocation="dra", **A100_MIG)
    devices = node.expected_devices
    assert [(d.type, d.profile, d.gpu_index) for d in devices] == [
        ("mig", "3g.40gb", 0), ("mig", "2g.20gb", 0), ("mig", "1g.10gb", 0), ("mig", "1g.10gb", 0), ("gpu", None, 1),
    ]  # fmt: skip
    assert dra.binary_quantity(devices[0].memory_bytes) == "40192Mi"  # nvidia-smi mig -lgip: 40192 MiB
    assert dict(devices[0].attributes)["architecture"] == "Ampere"
    assert dra.summary(devices) == [
        "1x MIG 3g.40gb (NVIDIA A100-SXM4-80GB, memory 40192Mi)",
        "1x MIG 2g.20gb (NVIDIA A100-SXM4-80GB, memory 19968Mi)",
        "2x MIG 1g.10gb (NVIDIA A100-SXM4-80GB, memory 9728Mi)",
        "1x GPU (NVIDIA A100-SXM4-80GB, memory 80Gi)",
    ]


def test_a_device_plugin_node_expects_no_slices_and_keeps_its_labels(tmp_path):
    node = node_of(tmp_path)
    assert node.expected_devices == []
    assert dra.ALLOCATION_LABEL not in node.node_labels


@pytest.mark.parametrize(
    ("data", "key", "words"),
    [
        (
            {"gpu_sharing": "time-slicing"},
            "gpu_sharing",
            'with gpu_allocation = "dra" must be "none" or "mig"',
        ),
        ({"nvidia_cdi": False}, "nvidia_cdi", "needs CDI mode"),
        ({"kubernetes_version": "1.33.5"}, "kubernetes_version", "needs Kubernetes >= 1.34"),
        ({**A100_MIG, "mig_sharing": "time-slicing"}, "mig_sharing", 'must be "none"'),
    ],
)
def test_dra_refuses_what_the_driver_cannot_do(tmp_path, data, key, words):
    problems = problems_of(write_inventory(tmp_path, gpu_allocation="dra", **data))
    assert any(f" {key} = " in p and words in p for p in problems), problems


@pytest.mark.parametrize(
    ("value", "size"),
    [
        ("80Gi", 80 * 2**30),
        ("81559Mi", 81559 * 2**20),
        ("85899345920", 85899345920),
        ("1e3", 1000),
        ("2k", 2000),
    ],
)
def test_quantities(value, size):
    assert dra.quantity_bytes(value) == size
    assert dra.quantity_bytes("lots") is None


def test_semver_as_the_driver_writes_it():
    assert [dra.semver(v) for v in ("580.178.04", "13.0", "8.9", "595.91.07")] == [
        "580.178.4", "13.0.0", "8.9.0", "595.91.7",
    ]  # fmt: skip
    assert dra.architecture("ada-lovelace") == "Ada Lovelace"


@pytest.fixture
def mixed(tmp_path) -> Fleet:
    """One dra pool (A100 MIG) and one device-plugin pool (L4)."""
    path = write_inventory(tmp_path, gpu_allocation="dra", **A100_MIG)
    text = path.read_text().replace("pool = (", "dra_pool = (")
    (tmp_path / "l4").mkdir()
    l4 = write_inventory(tmp_path / "l4")
    entry = l4.read_text().replace("'node-1'", "'node-2'").replace("pool = (", "plugin_pool = (")
    path.write_text(text + entry)
    return load_fleet(path)


def test_addons_of_a_mixed_fleet(mixed):
    manifests = render_all(mixed, AddonSettings())
    by = {(m["kind"], m["metadata"]["name"]): m for m in manifests}
    for name, device_type in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig")):
        (selector,) = by[("DeviceClass", name)]["spec"]["selectors"]
        assert selector["cel"]["expression"] == (
            f"device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == '{device_type}'"
        )
    plugin = by[("DaemonSet", dra_addons.KUBELET_PLUGIN)]["spec"]["template"]["spec"]
    assert plugin["nodeSelector"] == {"nvidia.com/gpu.present": "true", dra.ALLOCATION_LABEL: "dra"}
    assert plugin["containers"][0]["image"] == AddonSettings().dra_driver_image
    assert plugin["serviceAccountName"] == dra_addons.NAME
    role = by[("ClusterRole", dra_addons.NAME)]
    assert any("resourceslices" in r["resources"] and "create" in r["verbs"] for r in role["rules"])
    # ComputeDomains are off: no controller (it would need the ComputeDomain CRDs and their RBAC)
    assert [m["metadata"]["name"] for m in manifests if m["kind"] == "Deployment"] == ["nfd-master"]
    assert not any("resource.nvidia.com" in r["apiGroups"] for r in role["rules"])
    # the device plugin stays off dra nodes; GFD and dcgm-exporter run on every GPU node
    affinity = by[("DaemonSet", "nvidia-device-plugin")]["spec"]["template"]["spec"]["affinity"]
    (term,) = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": dra.ALLOCATION_LABEL, "operator": "NotIn", "values": ["dra"]}]
    assert "affinity" not in by[("DaemonSet", "gpu-feature-discovery")]["spec"]["template"]["spec"]
    for manifest in manifests:
        kubernetes_validate.validate(manifest, "1.34.0", strict=True)


def test_no_dra_objects_without_a_dra_pool(tmp_path):
    fleet = load_fleet(write_inventory(tmp_path))
    assert not [m for m in render_all(fleet, AddonSettings()) if "dra" in m["metadata"]["name"]]
    assert not [m for m in render_all(fleet, AddonSettings()) if m["kind"] == "DeviceClass"]


def test_plan_shows_the_expected_slices(mixed):
    text = plan.render_text(mixed)
    assert (
        "slice device 2x MIG 1g.10gb (NVIDIA A100-SXM4-80GB, memory 9728Mi) (driver gpu.nvidia.com, pool node-1)"
        in text
    )
    assert "allocation   DRA" in text
    data = json.loads(plan.render_json(mixed))
    assert data["nodes"]["node-1"]["gpu_allocation"] == "dra"
    assert data["nodes"]["node-1"]["expect"]["resource_slice_devices"][4]["memory"] == "80Gi"
    assert data["nodes"]["node-2"]["expect"]["resource_slice_devices"] == []


def test_the_kubelet_plugin_gets_what_nvidias_real_plugin_requires(mixed):
    """Found by the real gpu-kubelet-plugin v0.4.1 on a real-kubelet lab host (tests/lab/test_lab_dra_real.py):
    it exits without --image-name ('Required flag "image-name" not set') and without the host's driver root at
    /driver-root ('error locating "libnvidia-ml.so.1"'), as the driver's chart provides both."""
    settings = AddonSettings()
    manifests = render_all(mixed, settings)
    plugin = next(m for m in manifests if m["metadata"]["name"] == dra_addons.KUBELET_PLUGIN)
    pod = plugin["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["IMAGE_NAME"] == container["image"] == settings.dra_driver_image
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    # the driver root NVIDIA_DRIVER_ROOT names on the host, where the plugin's --container-driver-root expects it
    assert volumes[mounts["/driver-root"]] == env["NVIDIA_DRIVER_ROOT"] == "/"
