"""The node, workloads and metrics checks as pure functions: exact messages on hand-made API objects, pod
results and scrapes (a real dcgm-exporter capture among them)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from shims import GROUP_DATA, JOIN

from gpuready.conformance.checks import CannotCheck, metrics, node, workloads
from gpuready.conformance.workloads import PodResult, gpu_pod
from gpuready.nvidia.dcgm import parse_dcgm_metrics
from gpuready.spec import load_fleet

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm-exporter"


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    root = tmp_path_factory.mktemp("inventory")
    (root / "group_data").mkdir()
    shutil.copy(GROUP_DATA, root / "group_data" / "all.py")
    hosts = [
        (
            "l4",
            {"gpu_model": "NVIDIA L4", "gpu_count": 1, "gpu_sharing": "time-slicing", "sharing_replicas": 4},
        ),
        (
            "a100",
            {
                "gpu_model": "NVIDIA A100-SXM4-80GB",
                "gpu_count": 2,
                "gpu_sharing": "mig",
                "mig_strategy": "mixed",
                "mig_layout": {0: ["3g.40gb", "1g.10gb", "1g.10gb"]},
            },
        ),
        ("t4", {"gpu_model": "Tesla T4", "gpu_count": 1, "node_taints": ["dedicated=gpu:NoSchedule"]}),
    ]
    path = root / "inventory.py"
    path.write_text(f"gpu_nodes = ({[(n, {**d, **JOIN}) for n, d in hosts]!r}, {{}})\n")
    return load_fleet(path).nodes


def node_obj(allocatable=None, capacity=None, labels=None, ready="True", taints=None):
    return {
        "metadata": {"name": "n", "labels": labels or {}},
        "spec": {"taints": taints or []},
        "status": {
            "allocatable": allocatable or {},
            "capacity": capacity or {},
            "conditions": [
                {
                    "type": "Ready",
                    "status": ready,
                    "reason": "KubeletNotReady",
                    "message": "PLEG is not healthy",
                }
            ],
        },
    }


def test_resources_name_key_expected_actual_and_why(specs):
    l4 = specs["l4"]
    obj = node_obj(allocatable={"nvidia.com/gpu": "1", "cpu": "8"}, capacity={"nvidia.com/gpu": "4"})
    assert node.gpu_resources(l4, obj, "allocatable") == [
        "allocatable nvidia.com/gpu = 1, expected 4 (time-slicing replicas 4 x 1 GPU); 3 of 4 in capacity marked "
        "unhealthy by the device plugin, not whole GPUs (4 replicas each): the rest of a broken GPU's replicas "
        "still take pods (NVIDIA's plugin up to v0.19.3 takes out one replica per XID, "
        "NVIDIA/k8s-device-plugin#1929)"
    ]
    whole_gpu = node_obj(allocatable={"nvidia.com/gpu": "4"}, capacity={"nvidia.com/gpu": "8"})
    assert node.gpu_resources(dataclasses.replace(l4, gpu_count=2), whole_gpu, "allocatable") == [
        "allocatable nvidia.com/gpu = 4, expected 8 (time-slicing replicas 4 x 2 GPUs); 4 of 8 in capacity marked "
        "unhealthy by the device plugin"
    ]
    unregistered = node_obj(allocatable={"nvidia.com/gpu": "0"}, capacity={"nvidia.com/gpu": "0"})
    assert node.gpu_resources(l4, unregistered, "allocatable") == [  # no plugin: nothing said of health
        "allocatable nvidia.com/gpu = 0, expected 4 (time-slicing replicas 4 x 1 GPU)"
    ]
    never = node_obj(allocatable={"cpu": "8"})
    assert node.gpu_resources(l4, never, "allocatable") == [
        "allocatable nvidia.com/gpu = absent, expected 4 (time-slicing replicas 4 x 1 GPU)"
    ]
    # every device unhealthy (NVIDIA's plugin when it cannot tell an XID's GPU), the plugin gone, or the kubelet's
    # re-registration race (the plugin Ready, its registration dropped)
    all_out = node_obj(allocatable={"nvidia.com/gpu": "0"}, capacity={"nvidia.com/gpu": "4"})
    assert node.gpu_resources(l4, all_out, "allocatable") == [
        "allocatable nvidia.com/gpu = 0, expected 4 (time-slicing replicas 4 x 1 GPU); none of the 4 in capacity "
        "is usable: the device plugin marked every one unhealthy (NVIDIA's does when it cannot tell which GPU a "
        "critical XID came from, or NVML's event wait fails), or it is gone (node/test_device_plugin_ready tells "
        "which), or, with its pod Ready, the kubelet dropped its registration after a quick restart of the plugin "
        "(kubernetes/kubernetes#121994: delete the node's device plugin pod)"
    ]
    assert node.gpu_resources(l4, obj, "capacity") == []
    zero = node_obj(allocatable={"nvidia.com/gpu": "4", "nvidia.com/mig-1g.10gb": "0"})
    assert node.gpu_resources(l4, zero, "allocatable") == []  # a 0 counts as absent
    a100 = specs["a100"]
    obj = node_obj(
        allocatable={
            "nvidia.com/gpu": "1",
            "nvidia.com/mig-3g.40gb": "1",
            "nvidia.com/mig-1g.10gb": "2",
            "nvidia.com/mig-2g.20gb": "1",
        }
    )
    assert node.gpu_resources(a100, obj, "allocatable") == [
        "allocatable nvidia.com/mig-2g.20gb = 1, expected 0 (the inventory expects none)"
    ]
    with pytest.raises(CannotCheck):
        node.gpu_resources(a100, None, "allocatable")


def test_ready_labels_taints_runtime_class(specs):
    t4 = specs["t4"]
    assert node.ready(t4, node_obj(ready="False")) == [
        "NotReady (Ready = False, KubeletNotReady: PLEG is not healthy)"
    ]
    assert node.ready(t4, None)[0].startswith("no Node object with this name")
    assert node.taints(t4, node_obj()) == [
        "taint dedicated=gpu:NoSchedule missing (node_taints in the inventory)"
    ]
    assert (
        node.taints(t4, node_obj(taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])) == []
    )
    labels = {**t4.expected_labels, "nvidia.com/gpu.count": "2"}
    assert node.gfd_labels(t4, node_obj(labels=labels)) == [
        "GFD label nvidia.com/gpu.count = '2', expected '1'"
    ]
    assert node.inventory_labels(t4, node_obj(labels=t4.node_labels)) == []
    assert node.runtime_class(None) == [
        "RuntimeClass nvidia not found (the cluster add-ons deploy creates it)"
    ]
    assert node.runtime_class({"handler": "runc"}) == [
        "RuntimeClass nvidia has handler 'runc', expected 'nvidia'"
    ]


def test_addon_pod_not_ready_says_why(specs):
    crashing = {
        "metadata": {"name": "nvidia-device-plugin-x", "namespace": "gpu-system"},
        "spec": {"containers": [{"name": "plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {"name": "plugin", "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
            ],
        },
    }
    gfd = {
        "metadata": {"name": "gpu-feature-discovery-y", "namespace": "gpu-system"},
        "spec": {
            "containers": [
                {"image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1", "command": ["gpu-feature-discovery"]}
            ]
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    assert node.addon_pod_ready(specs["t4"], [crashing, gfd], "device plugin") == [
        "device plugin pod gpu-system/nvidia-device-plugin-x not Ready "
        "(Running, plugin waiting CrashLoopBackOff, plugin restarted 3x)"
    ]
    assert node.addon_pod_ready(specs["t4"], [gfd], "dcgm-exporter")[0].startswith("no dcgm-exporter pod")


L4_UUID = "GPU-11111111-2222-3333-4444-555555555555"


def smi(uuid: str, migs: str = "") -> str:
    return f"GPU 0: NVIDIA L4 (UUID: {uuid})\n{migs}"


def test_time_slicing_counts_pods_per_uuid_and_the_extra_pod(specs):
    l4 = specs["l4"]
    shared = [PodResult(f"ts-{i}", "l4", "Running", log=smi(L4_UUID)) for i in range(4)]
    extra = PodResult(
        "ts-4", "l4", "Pending", unschedulable="0/3 nodes are available: 1 Insufficient nvidia.com/gpu."
    )
    assert workloads.time_slicing(l4, shared, extra) == []
    shared[3].log = smi("GPU-99999999-2222-3333-4444-555555555555")
    assert workloads.time_slicing(l4, shared, extra) == [
        f"pods per GPU UUID: {L4_UUID} x3, GPU-99999999-2222-3333-4444-555555555555 x1; "
        "expected 1 GPU(s) shared by 4 pods each"
    ]
    shared[3] = PodResult("ts-3", "l4", "Pending", unschedulable="Insufficient nvidia.com/gpu")
    problems = workloads.time_slicing(l4, shared, PodResult("ts-4", "l4", "Running", log=smi(L4_UUID)))
    assert problems[0].startswith(
        "3 of 4 time-sliced pods running at once, expected 4 (time-slicing replicas 4 x 1 GPU(s)): pod ts-3: phase Pending"
    )
    assert problems[1].startswith(
        "a pod beyond 4 replicas should stay Pending as Unschedulable: pod ts-4: phase Running"
    )
    with pytest.raises(CannotCheck):
        workloads.time_slicing(specs["t4"], shared, None)


def test_mig_device_and_vector_add_messages(specs):
    a100 = specs["a100"]
    line = "  MIG 1g.10gb     Device  0: (UUID: MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee)\n"
    ok = PodResult("mig", "a100", "Running", log=smi(L4_UUID, line))
    assert workloads.mig_device(a100, "1g.10gb", ok) == []
    assert workloads.mig_device(a100, "3g.40gb", ok)[0].startswith(
        "MIG 3g.40gb pod saw 1g.10gb, expected exactly one 3g.40gb"
    )
    failed = PodResult(
        "vectoradd-t4",
        "t4",
        "Failed",
        reason="Error",
        exit_code=1,
        events=["Normal Pulled: pulled"],
        log="[Vector addition of 50000 elements]\nFailed to allocate device vector A (error code no CUDA-capable device is detected)!\n",
    )
    assert workloads.vector_add(specs["t4"], failed) == [
        "vectorAdd did not pass: pod vectoradd-t4: phase Failed; reason Error; exit code 1; events: Normal Pulled: "
        "pulled; last log lines: [Vector addition of 50000 elements] / Failed to allocate device vector A "
        "(error code no CUDA-capable device is detected)!"
    ]
    assert workloads.pod_resource(a100) == "nvidia.com/gpu"  # GPU 1 has MIG disabled


def test_a_failed_pod_quotes_its_warning_events_first():
    """The kubelet's events outnumber the one that says why (a real pod: Scheduled, Pulled, Created, Started,
    and the sandbox failure among them): Warnings are kept, the other slots go to the latest events."""
    events = [
        'Warning FailedCreatePodSandBox: Failed to create pod sandbox: no runtime for "nvidia"',
        "Normal Pulled: pulled",
        "Normal Created: created",
        "Normal Started: started",
        "Normal Scheduled: assigned",
    ]
    described = PodResult("p", "n", "Failed", events=events).describe()
    assert described == ("pod p: phase Failed; events: " + " | ".join([events[0], *events[2:]]))
    normal = [f"Normal E{i}: e" for i in range(6)]
    assert PodResult("p", "n", "Pending", events=normal).describe().endswith(" | ".join(normal[-4:]))


def test_pods_are_non_root_pinned_and_tolerate_the_node_taints(specs):
    pod = gpu_pod("p", specs["t4"], "img", "nvidia.com/gpu", check="x")
    spec = pod["spec"]
    # CDI mode (the default): the device plugin's CDI devices need no runtime class; runtime-class mode keeps it
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": "t4"} and "runtimeClassName" not in spec
    legacy = dataclasses.replace(specs["t4"], knobs={**specs["t4"].knobs, "nvidia_cdi": False})
    assert gpu_pod("p", legacy, "img", "nvidia.com/gpu", check="x")["spec"]["runtimeClassName"] == "nvidia"
    assert {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    ctx = spec["containers"][0]["securityContext"]
    assert ctx["runAsNonRoot"] and ctx["runAsUser"] == 1000 and not ctx["privileged"]
    assert "volumes" not in spec


def test_metrics_on_a_real_capture(specs):
    text = (FIXTURES / "datadog__dcgm_metrics.txt").read_text()
    samples = [s for s in parse_dcgm_metrics(text) if s.gpu == 0 and s.model_name == "Tesla T4"]
    assert metrics.series_per_entity(specs["t4"], samples) == []
    assert metrics.sane_values(samples) == []
    with pytest.raises(CannotCheck):
        metrics.pod_labels(samples, "gpuready-conformance-x", [])
    assert metrics.pod_labels(samples, "ns", ["p"])[0].startswith(
        "no series carries pod ns/p (no series has a pod label"
    )


def scrape(entities: list[tuple[int, str | None, int | None]], xid: int = 0, pod: str = "") -> str:
    lines = []
    for metric in metrics.REQUIRED:
        for gpu, profile, gi in entities:
            if metric == metrics.UTIL and profile:
                continue
            mig = f',GPU_I_PROFILE="{profile}",GPU_I_ID="{gi}"' if profile else ""
            value = (xid if gpu == 1 else 0) if metric == metrics.XID else 40
            lines.append(
                f'{metric}{{gpu="{gpu}",UUID="GPU-{gpu}",modelName="m"{mig},namespace="ns",pod="{pod}"}} {value}'
            )
    return "\n".join(lines) + "\n"


def test_metrics_count_mig_instances_and_flag_xids(specs):
    a100 = specs["a100"]
    full = [(0, "3g.40gb", 1), (0, "1g.10gb", 2), (0, "1g.10gb", 3), (1, None, None)]
    assert metrics.series_per_entity(a100, parse_dcgm_metrics(scrape(full))) == []
    missing = parse_dcgm_metrics(scrape(full[:2] + full[3:]))
    assert metrics.series_per_entity(a100, missing) == [
        f"{m}: 1 series for MIG 1g.10gb instances, expected 2" for m in metrics.REQUIRED if m != metrics.UTIL
    ]
    bad = parse_dcgm_metrics(scrape(full, xid=79, pod="p"))
    assert metrics.sane_values(bad) == [
        "GPU 1 GPU-1: DCGM_FI_DEV_XID_ERRORS = 79, expected 0 (no XID since the driver loaded)"
    ]
    assert metrics.pod_labels(bad, "ns", ["p"]) == []
