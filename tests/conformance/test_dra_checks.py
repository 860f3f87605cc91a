"""The DRA checks (gpuready.conformance.checks.dra) on API objects: each passes on what a healthy dra node shows and
fails naming the node's device on the matching fault; device-plugin nodes skip them with the reason."""

from __future__ import annotations

import copy
import shutil

import pytest
from inventories import write_inventory
from shims import GROUP_DATA, JOIN

from gpuready.conformance.checks import CannotCheck, PodResult
from gpuready.conformance.checks import dra as checks
from gpuready.spec import dra, load_fleet


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """(an A100 dra node with MIG on GPU 0, an L4 device-plugin node)."""
    base = tmp_path_factory.mktemp("dra")
    (base / "group_data").mkdir()
    shutil.copy(GROUP_DATA, base / "group_data" / "all.py")
    mig = {"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_count": 2, "gpu_sharing": "mig", "gpu_allocation": "dra",
           "mig_layout": {0: ["3g.40gb", "1g.10gb"]}}  # fmt: skip
    l4 = {"gpu_model": "NVIDIA L4", "gpu_count": 1}
    fleet = load_fleet(write_inventory(base / "inv.py", [("a100", {**mig, **JOIN}), ("l4", {**l4, **JOIN})]))
    return fleet.nodes["a100"], fleet.nodes["l4"]


def healthy_slice(node):
    """What the driver publishes for ``node`` (names and UUIDs as a real node has them)."""
    devices = []
    for i, d in enumerate(node.expected_devices):
        attrs = {k: {"version" if k in dra.VERSION_ATTRIBUTES else "string": v} for k, v in d.attributes}
        attrs["uuid"] = {"string": f"GPU-{i:08d}"}
        name = f"gpu-{d.gpu_index}" if d.type == "gpu" else f"gpu-{d.gpu_index}-mig-x-{i}"
        devices.append(
            {
                "name": name,
                "attributes": attrs,
                "capacity": {"memory": {"value": dra.binary_quantity(d.memory_bytes)}},
            }
        )
    spec = {"driver": dra.DRIVER, "nodeName": node.name, "pool": {"name": node.name}, "devices": devices}
    return [{"metadata": {"name": f"{node.name}-gpu.nvidia.com"}, "spec": spec}]  # fmt: skip


def test_healthy_slices_pass_and_device_plugin_nodes_skip(nodes):
    a100, l4 = nodes
    assert checks.resource_slices(a100, healthy_slice(a100)) == []
    with pytest.raises(CannotCheck, match="gpu_allocation is 'device-plugin'"):
        checks.resource_slices(l4, [])


def test_a_missing_gpu_is_named(nodes):
    a100, _ = nodes
    slices = healthy_slice(a100)
    slices[0]["spec"]["devices"] = [d for d in slices[0]["spec"]["devices"] if d["name"] != "gpu-1"]
    (missing, count) = checks.resource_slices(a100, slices)
    assert missing == "not published: gpu-1"
    assert count.startswith("GPU (") and count.endswith("0 published, expected 1")


def test_a_wrong_driver_version_and_a_wrong_mig_profile(nodes):
    a100, _ = nodes
    slices = healthy_slice(a100)
    devices = slices[0]["spec"]["devices"]
    for d in devices:
        d["attributes"]["driverVersion"] = {"version": "570.1.2"}
    problems = checks.resource_slices(a100, slices)
    assert any("driverVersion 570.1.2" in p and "unexpected gpu-1 GPU-" in p for p in problems), problems
    slices = healthy_slice(a100)
    slices[0]["spec"]["devices"][1]["attributes"]["profile"] = {"string": "2g.20gb"}
    problems = checks.resource_slices(a100, slices)
    assert any(p.startswith("MIG 1g.10gb (") and "0 published, expected 1" in p for p in problems), problems


def test_no_slice_says_what_was_expected(nodes):
    a100, _ = nodes
    (problem,) = checks.resource_slices(a100, [])
    assert problem.startswith(
        "no ResourceSlice of driver gpu.nvidia.com for this node, expected 3 device(s): "
    )


def test_device_classes(nodes):
    a100, _ = nodes
    good = {
        name: {"spec": {"selectors": [{"cel": {"expression": dra.device_class_selector(t)}}]}}
        for name, t in dra.DEVICE_CLASSES.items()
    }
    assert checks.device_classes(a100, good) == []
    assert checks.device_classes(a100, {dra.GPU_CLASS: good[dra.GPU_CLASS]}) == [
        "DeviceClass mig.nvidia.com not found (the add-ons deploy creates it)"
    ]
    wrong = copy.deepcopy(good)
    wrong[dra.MIG_CLASS]["spec"]["selectors"] = []
    assert checks.device_classes(a100, wrong)[0].startswith("DeviceClass mig.nvidia.com does not select")


def test_driver_version_against_nvidia_smi(nodes):
    a100, _ = nodes
    slices = healthy_slice(a100)
    ran = PodResult("driver-x", a100.name, phase="Succeeded", exit_code=0, log="580.178.04\n")
    assert checks.driver_version(a100, slices, ran) == []
    other = PodResult("driver-x", a100.name, phase="Succeeded", exit_code=0, log="580.200.01\n")
    assert checks.driver_version(a100, slices, other) == [
        "ResourceSlice driverVersion 580.178.4 but nvidia-smi in a pod prints 580.200.01"
    ]
    failed = PodResult("driver-x", a100.name, phase="Failed", exit_code=127)
    assert "did not run: pod driver-x: phase Failed" in checks.driver_version(a100, slices, failed)[0]


def test_unsatisfiable_claim(nodes):
    a100, _ = nodes
    refused = PodResult(
        "u",
        a100.name,
        phase="Pending",
        unschedulable="0/5 nodes are available: 1 cannot allocate all claims.",
    )
    assert checks.unsatisfiable(a100, refused) == []
    ran = PodResult("u", a100.name, phase="Running")
    assert checks.unsatisfiable(a100, ran)[0].startswith(
        "a claim for 3 GPUs was not refused by the scheduler"
    )
    other = PodResult(
        "u", a100.name, phase="Pending", unschedulable="0/5 nodes are available: 5 Insufficient cpu."
    )
    assert "not for its claim" in checks.unsatisfiable(a100, other)[0]


LISTING = "GPU 0: NVIDIA A100-SXM4-80GB (UUID: {})\n"


def shared(name, uuid=None, **kw):
    log = LISTING.format(uuid) if uuid else ""
    return PodResult(name=name, node="a100", phase=kw.pop("phase", "Running"), log=log, **kw)


def test_a_shared_claim_passes_when_both_pods_see_its_gpu(nodes):
    a100, l4 = nodes
    uuid = "GPU-11111111-2222-3333-4444-555555555555"
    pods = [shared("shared-a100-0", uuid), shared("shared-a100-1", uuid)]
    assert checks.shared_claim(a100, "shared-a100", pods, ["a100/gpu-1"]) == []
    with pytest.raises(CannotCheck, match="gpu_allocation is 'device-plugin'"):
        checks.shared_claim(l4, "shared-l4", [], None)


def test_a_shared_claim_that_does_not_start_or_splits_is_named(nodes):
    a100, _ = nodes
    refused = shared(
        "shared-a100-1",
        phase="Pending",
        reason="ContainerCreating",
        timed_out=True,
        events=[
            'Warning FailedPrepareDynamicResources: ... error validating GPU config: "TimeSlicing" is selected as '
            'the GPU sharing strategy, but the "TimeSlicingSettings" feature gate is not enabled'
        ],
    )
    (problem,) = checks.shared_claim(
        a100, "shared-a100", [shared("shared-a100-0", "GPU-1"), refused], ["a100/gpu-1"]
    )
    assert problem.startswith(
        "pod shared-a100-1 sharing ResourceClaim shared-a100 (TimeSlicing) on device a100/gpu-1 did not run: "
    )
    assert '"TimeSlicingSettings" feature gate is not enabled' in problem
    a = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
    b = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
    (problem,) = checks.shared_claim(
        a100, "shared-a100", [shared("shared-a100-0", a), shared("shared-a100-1", b)], ["a100/gpu-1"]
    )
    assert problem == (
        f"pods sharing ResourceClaim shared-a100 (TimeSlicing) on device a100/gpu-1 saw different GPUs: "
        f"{a}: shared-a100-0; {b}: shared-a100-1"
    )
    (problem,) = checks.shared_claim(a100, "shared-a100", [], None)
    assert problem == "no pod was started for the shared ResourceClaim shared-a100"


def test_an_all_mig_dra_node_skips_the_shared_claim(tmp_path):
    (tmp_path / "group_data").mkdir()
    shutil.copy(GROUP_DATA, tmp_path / "group_data" / "all.py")
    node = {"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_count": 1, "gpu_sharing": "mig", "gpu_allocation": "dra",
            "mig_layout": {0: ["3g.40gb", "3g.40gb"]}}  # fmt: skip
    (mig,) = load_fleet(write_inventory(tmp_path / "inv.py", [("a100", {**node, **JOIN})])).nodes.values()
    with pytest.raises(CannotCheck, match="every GPU of the node is in MIG mode"):
        checks.shared_claim(mig, "shared-a100", [], None)


def scrape(node, **dra):
    from gpuready.nvidia.dcgm import parse_dcgm_metrics

    extra = "".join(f',{k}="{v}"' for k, v in sorted(dra.items()))
    text = (
        "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        'DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-1",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",'
        f'container="ctr",namespace="run-1",pod="holder"{extra}}} 31\n'
    )
    return parse_dcgm_metrics(text)


def test_a_claim_held_gpu_carries_the_claim_or_the_check_says_the_mapping_is_off(nodes):
    from gpuready.conformance.checks import metrics

    a100, l4 = nodes
    labels = {"dra_claim_name": "holder-a100", "dra_claim_namespace": "run-1", "dra_device_name": "gpu-1",
              "dra_driver_name": "gpu.nvidia.com", "dra_pool_name": "a100"}  # fmt: skip
    assert metrics.claim_labels(a100, scrape(a100, **labels), "run-1", "holder-a100") == []
    assert metrics.claim_labels(a100, scrape(a100), "run-1", "holder-a100") == [
        "no series carries ResourceClaim run-1/holder-a100 (no series has a dra_claim_name label: is "
        "dcgm-exporter's DRA mapping on, DCGM_EXPORTER_KUBERNETES_ENABLE_DRA=true / --kubernetes-enable-dra?)"
    ]
    other = {**labels, "dra_claim_name": "someone-else"}
    assert metrics.claim_labels(a100, scrape(a100, **other), "run-1", "holder-a100") == [
        "no series carries ResourceClaim run-1/holder-a100 (claims in labels: run-1/someone-else)"
    ]
    with pytest.raises(CannotCheck, match="gpu_allocation is 'device-plugin'"):
        metrics.claim_labels(l4, [], "run-1", None)
    with pytest.raises(CannotCheck, match="no GPU held through a ResourceClaim"):
        metrics.claim_labels(a100, [], "run-1", None)
