"""GPU behaviour end to end on the real control plane: the device plugin, GFD and dcgm-exporter DaemonSets placed
by the real DaemonSet controller, GPU pods placed by the real scheduler, both run by the lab's node agent on
virtual nodes with a lab host's GPUs (conftest's `gpu_host`), read back with real kubectl and the client.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from polling import wait_for as wait

from gpuready.deploy import addons
from gpuready.lab.agent.gpu_images import VECTOR_ADD_OK
from gpuready.lab.hardware import make_hardware
from gpuready.nvidia.dcgm import parse_dcgm_metrics

from .conftest import CONFIGS, CUDA_BASE, VECTOR_ADD, Gpus, gpu_pod, terminated

# device plugin -------------------------------------------------------------------------------------------------


def test_time_slicing_follows_label_and_configmap_restart(gpus: Gpus, gpu_host: Any, kubectl: Any) -> None:
    node = gpu_host("l40s-2", config_key="ts4")
    gpus.deploy_addons()
    wait(lambda: gpus.resources(node) == ("8", "8"), what="2 GPUs x 4 replicas")
    wait(lambda: gpus.labels(node).get("nvidia.com/gpu.replicas") == "4", what="GFD's replicas label")
    labels = gpus.labels(node)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-L40S-SHARED"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.count"] == "2" and labels["nvidia.com/gpu.memory"] == "46068"

    # Edit the ConfigMap to 8 replicas: the running plugin does not reload (upstream only reloads on SIGHUP) ...
    core = gpus.core
    cm = core.read_namespaced_config_map(addons.DEVICE_PLUGIN_CONFIGMAP, gpus.ns)
    cm.data["ts4"] = cm.data["ts4"].replace("replicas: 4", "replicas: 8")
    core.replace_namespaced_config_map(addons.DEVICE_PLUGIN_CONFIGMAP, gpus.ns, cm)
    gpus.barrier(node)  # the agent re-synced the node since: nothing re-reads the ConfigMap behind the plugin
    assert gpus.resources(node) == ("8", "8")
    # ... a restart does (what a deploy must do after changing the ConfigMap): the DaemonSet controller makes a
    # new plugin pod, which loads the edited config.
    old = gpus.plugin_pod(node)
    kubectl("delete", "pod", "-n", gpus.ns, old["metadata"]["name"])
    wait(
        lambda: (p := gpus.plugin_pod(node)) is not None and p["metadata"]["uid"] != old["metadata"]["uid"],
        what="the DaemonSet controller's new plugin pod",
    )
    wait(lambda: gpus.resources(node) == ("16", "16"), what="2 GPUs x 8 replicas after restart")

    # The node label selects another config and the config manager makes the plugin reload at once.
    kubectl("label", "node", node, "--overwrite", f"{addons.DEVICE_PLUGIN_CONFIG_LABEL}=default")
    wait(lambda: gpus.resources(node) == ("2", "2"), what="whole GPUs after the label change")
    wait(lambda: gpus.labels(node).get("nvidia.com/gpu.product") == "NVIDIA-L40S", what="unshared product")
    out = kubectl("get", "node", node, "-o", "jsonpath={.status.allocatable.nvidia\\.com/gpu}").stdout
    assert out == "2"


def test_plugin_gone_drops_allocatable_then_capacity(gpus: Gpus, gpu_host: Any, kubectl: Any) -> None:
    # grace_s=1.0 for this node (the kubelet's endpoint grace period is 5 minutes)
    node = gpu_host("l4-1", config_key="default", grace_s=1.0)
    gpus.deploy_addons()
    wait(lambda: gpus.resources(node) == ("1", "1"), what="1 GPU")
    seen = gpus.watch_resources(
        node, lambda: kubectl("delete", "daemonset", "-n", gpus.ns, "nvidia-device-plugin"), until=("0", "0")
    )
    # allocatable 0 at once with the capacity kept, then capacity 0 after the grace period; the key stays
    assert seen == [("1", "1"), ("1", "0"), ("0", "0")]
    wait(lambda: gpus.plugin_pod(node) is None, what="plugin pod gone")
    assert gpus.resources(node) == ("0", "0")


def test_mig_mixed_and_single_from_host_state(gpus: Gpus, gpu_host: Any) -> None:
    mixed = gpu_host(
        "a100-80gb-4", config_key="mig-mixed", mig={0: ["3g.40gb", "2g.20gb", "1g.10gb"], 1: ["1g.10gb"]}
    )
    single = gpu_host(
        "a100-80gb-4", config_key="mig-single", index=1, mig={i: ["3g.40gb", "3g.40gb"] for i in range(4)}
    )
    gpus.deploy_addons()
    wait(lambda: gpus.resources(mixed, "nvidia.com/mig-1g.10gb") == ("2", "2"), what="mixed 1g.10gb")
    assert gpus.resources(mixed, "nvidia.com/mig-3g.40gb") == ("1", "1")
    assert gpus.resources(mixed, "nvidia.com/mig-2g.20gb") == ("1", "1")
    assert gpus.resources(mixed) == ("2", "2")  # GPUs 2 and 3 have MIG disabled
    wait(lambda: gpus.resources(single) == ("8", "8"), what="single: 8 MIG devices as nvidia.com/gpu")
    wait(lambda: "nvidia.com/gpu.product" in gpus.labels(single), what="GFD labels on the single node")
    labels = gpus.labels(single)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.memory"]) == ("8", "40192")
    assert labels["nvidia.com/mig.strategy"] == "single"
    count = wait(lambda: gpus.labels(mixed).get("nvidia.com/mig-1g.10gb.count"), what="mixed MIG labels")
    assert count == "2"
    assert gpus.labels(mixed)["nvidia.com/mig-3g.40gb.product"] == "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"


def _plugin_pod_restarted(gpus: Gpus, node: str, container: str) -> dict[str, Any]:
    """The node's device-plugin pod once its `container` has restarted (crashed at least once)."""

    def restarted() -> dict[str, Any] | None:
        pod = gpus.plugin_pod(node)
        for cs in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
            if cs["name"] == container and cs["restartCount"] >= 1:
                return pod
        return None

    return wait(restarted, what=f"{container} restarted")


def test_plugin_without_nvidia_runtime_crashes_with_nvml_error(gpus: Gpus, gpu_host: Any) -> None:
    """The add-ons without ``runtimeClassName`` on a host whose default runtime is runc: no NVML inside."""
    node = gpu_host("l4-1", config_key="default")
    gpus.deploy_addons(runtime_class=False)

    pod = _plugin_pod_restarted(gpus, node, "nvidia-device-plugin")
    status = next(cs for cs in pod["status"]["containerStatuses"] if cs["name"] == "nvidia-device-plugin")
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert status["lastState"]["terminated"]["exitCode"] == 1
    # the crashed run's output, through the API server's log endpoint (what `kubectl logs` shows in CrashLoopBackOff)
    logs = gpus.logs(pod["metadata"]["name"], container="nvidia-device-plugin")
    assert "could not load NVML library: libnvidia-ml.so.1" in logs
    assert logs.rstrip().endswith("platform detection failed")
    assert gpus.resources(node) == (None, None)


def test_config_manager_without_a_default_config_crash_loops(gpus: Gpus, gpu_host: Any) -> None:
    """config-manager reads the node label as "" first (upstream's ``SyncableConfig.Get`` returns before the
    informer lists the Node), so a ConfigMap whose DEFAULT_CONFIG key is missing fails it even on a labelled node:
    the defect NVIDIA's real config-manager found in gpuready's manifests (Fleet.device_plugin_configs)."""
    node = gpu_host("l4-1", config_key="ts4")
    gpus.deploy_addons(configs={k: v for k, v in CONFIGS.items() if k != "default"})

    pod = _plugin_pod_restarted(gpus, node, "config-manager")
    logs = gpus.logs(pod["metadata"]["name"], container="config-manager")
    assert "Label change detected: nvidia.com/device-plugin.config=\n" in logs  # the first, empty read
    assert logs.rstrip().endswith("specified config  does not exist")
    assert "Updating to config" not in logs


# workloads -----------------------------------------------------------------------------------------------------


def test_vector_add_ready_host_missing_handler_and_faulty_gpu(
    gpus: Gpus, gpu_host: Any, kubectl: Any
) -> None:
    ready = gpu_host("l4-1", config_key="default")
    no_dropin = gpu_host("l4-1", config_key="default", index=1, nvidia_dropin=False)
    faulty = gpu_host(
        "l4-1", config_key="default", index=2, faults=[{"fault": "ecc-uncorrectable", "gpu": 0}]
    )
    gpus.deploy_addons()
    wait(
        lambda: gpus.resources(ready) == ("1", "1") and gpus.resources(faulty) == ("1", "1"),
        what="1 GPU each",
    )
    for name, node in (("va-ready", ready), ("va-faulty", faulty)):
        gpus.create_pod(gpu_pod(name, VECTOR_ADD, node))
    # Without the drop-in the host has no `nvidia` handler: its plugin cannot start either, so schedule no GPU.
    gpus.create_pod(gpu_pod("va-nohandler", VECTOR_ADD, no_dropin, gpus=0))

    ok = wait(lambda: gpus.finished("va-ready"), what="va-ready done")
    assert ok["status"]["phase"] == "Succeeded"
    assert kubectl("logs", "-n", gpus.ns, "va-ready").stdout == VECTOR_ADD_OK

    bad = wait(lambda: gpus.finished("va-faulty"), what="va-faulty done")
    assert bad["status"]["phase"] == "Failed" and terminated(bad)["exitCode"] == 1
    assert gpus.logs("va-faulty") == (
        "[Vector addition of 50000 elements]\n"
        "Failed to allocate device vector A (error code uncorrectable ECC error encountered)!\n"
    )

    nohandler = wait(lambda: gpus.finished("va-nohandler"), what="va-nohandler done")
    term = terminated(nohandler)
    assert term["reason"] == "RunContainerError"
    assert term["message"] == (
        "rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "
        '"nvidia" is configured'
    )
    events = kubectl(
        "get", "events", "-n", gpus.ns, "--field-selector", "involvedObject.name=va-nohandler", "-o", "json"
    ).stdout
    assert any(e["reason"] == "FailedCreatePodSandBox" for e in json.loads(events)["items"])


def test_time_sliced_pods_share_a_uuid_and_mig_pods_see_their_device(gpus: Gpus, gpu_host: Any) -> None:
    l4 = gpu_host("l4-1", config_key="ts4")
    a100 = gpu_host("a100-80gb-4", config_key="mig-mixed", index=3, mig={0: ["1g.10gb", "1g.10gb"]})
    gpus.deploy_addons()
    wait(lambda: gpus.resources(l4) == ("4", "4"), what="L4 x 4 replicas")
    wait(lambda: gpus.resources(a100, "nvidia.com/mig-1g.10gb") == ("2", "2"), what="2 MIG devices")
    smi = ["nvidia-smi", "-L"]
    for name in ("ts-a", "ts-b"):
        gpus.create_pod(gpu_pod(name, CUDA_BASE, l4, command=smi))
    gpus.create_pod(gpu_pod("mig-a", CUDA_BASE, a100, command=smi, resource="nvidia.com/mig-1g.10gb"))
    logs = {}
    for name in ("ts-a", "ts-b", "mig-a"):
        assert wait(lambda n=name: gpus.finished(n), what=name)["status"]["phase"] == "Succeeded"
        logs[name] = gpus.logs(name)
    l4_uuid = make_hardware("l4-1", 0)["gpus"][0]["uuid"]
    assert logs["ts-a"] == logs["ts-b"] == f"GPU 0: NVIDIA L4 (UUID: {l4_uuid})\n"
    lines = logs["mig-a"].splitlines()
    a100_uuid = make_hardware("a100-80gb-4", 3)["gpus"][0]["uuid"]
    assert lines[0] == f"GPU 0: NVIDIA A100-SXM4-80GB (UUID: {a100_uuid})"
    assert len(lines) == 2 and lines[1].startswith("  MIG 1g.10gb     Device  0: (UUID: MIG-")


def test_unknown_nvidia_image_cannot_be_pulled(gpus: Gpus, gpu_host: Any) -> None:
    node = gpu_host("l4-1", config_key="default")
    gpus.create_pod(gpu_pod("nope", "nvcr.io/nvidia/pytorch:24.01-py3", node, gpus=0, runtime_class=None))

    def waiting() -> str | None:
        pod = gpus.pod("nope") or {}
        cs = (pod.get("status") or {}).get("containerStatuses") or []
        return (cs[0]["state"].get("waiting") or {}).get("reason") if cs else None

    assert wait(waiting, what="waiting reason") in ("ErrImagePull", "ImagePullBackOff")


# dcgm-exporter -------------------------------------------------------------------------------------------------


def _running_exporter(gpus: Gpus, node: str) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        pod = gpus.plugin_pod(node, "nvidia-dcgm-exporter")
        return pod if pod and pod["status"].get("phase") == "Running" else None

    return wait(ready, what="dcgm-exporter running")


def test_dcgm_scrape_through_proxy_carries_pod_labels(gpus: Gpus, gpu_host: Any, kubectl: Any) -> None:
    node = gpu_host("l40s-2", config_key="default", faults=[{"fault": "xid-48", "gpu": 1}])
    gpus.deploy_addons()
    # GPU 1 has an XID 48: the plugin's health check leaves one allocatable of two.
    wait(lambda: gpus.resources(node) == ("2", "1"), what="one healthy GPU")
    gpus.create_pod(gpu_pod("sleeper", CUDA_BASE, node, command=["sleep", "infinity"]))
    wait(lambda: gpus.running("sleeper"), what="sleeper running")
    name = _running_exporter(gpus, node)["metadata"]["name"]
    # the real API server's pod proxy dials the exporter pod's IP, port 9400
    text = gpus.core.connect_get_namespaced_pod_proxy_with_path(f"{name}:9400", gpus.ns, "metrics")
    samples = parse_dcgm_metrics(text)
    util = {s.gpu: s for s in samples if s.metric == "DCGM_FI_DEV_GPU_UTIL"}
    assert sorted(util) == [0, 1]
    assert (util[0].pod, util[0].namespace, util[0].container) == ("sleeper", gpus.ns, "main")
    assert util[1].pod is None and util[0].hostname == name
    assert util[0].labels["DCGM_FI_DRIVER_VERSION"] == "580.178.04"
    xid = {s.gpu: s.value for s in samples if s.metric == "DCGM_FI_DEV_XID_ERRORS"}
    assert xid == {0: 0.0, 1: 48.0}
    # the service proxy goes through the Endpoints the real endpoints controller made from the ready pod
    service = f"/api/v1/namespaces/{gpus.ns}/services/nvidia-dcgm-exporter:9400/proxy/metrics"
    via_service = wait(
        lambda: (r := kubectl("get", "--raw", service, check=False)).returncode == 0 and r,
        what="the service proxy to reach the exporter",
    )
    assert len(parse_dcgm_metrics(via_service.stdout)) == len(samples)
    health = kubectl("get", "--raw", f"/api/v1/namespaces/{gpus.ns}/pods/{name}:9400/proxy/health").stdout
    assert health == "OK"


def test_dcgm_mig_instances(gpus: Gpus, gpu_host: Any) -> None:
    node = gpu_host("a100-80gb-4", config_key="mig-mixed", mig={0: ["3g.40gb", "1g.10gb"]})
    gpus.deploy_addons()
    name = _running_exporter(gpus, node)["metadata"]["name"]
    text = gpus.core.connect_get_namespaced_pod_proxy_with_path(f"{name}:9400", gpus.ns, "metrics")
    temps = [s for s in parse_dcgm_metrics(text) if s.metric == "DCGM_FI_DEV_GPU_TEMP"]
    assert sorted((s.gpu, s.gpu_instance_profile, s.gpu_instance_id) for s in temps) == [
        (0, "1g.10gb", 2),
        (0, "3g.40gb", 1),
        (1, None, None),
        (2, None, None),
        (3, None, None),
    ]
    assert not [s for s in parse_dcgm_metrics(text) if s.metric == "DCGM_FI_DEV_GPU_UTIL" and s.gpu == 0]


def test_rbac_objects_are_accepted(kubectl: Any, api: client.ApiClient, tmp_path: Path) -> None:
    """The device plugin's ClusterRole and binding, as gpuready renders them, pass the real API's validation."""
    manifests = addons.device_plugin_rbac(addons.AddonSettings())
    path = tmp_path / "rbac.yaml"
    path.write_text(yaml.safe_dump_all(manifests[1:]))
    kubectl("apply", "-f", str(path))
    try:
        out = kubectl("get", "clusterrole", "nvidia-device-plugin", "-o", "json").stdout
        assert json.loads(out)["rules"] == manifests[1]["rules"]
        assert "nvidia-device-plugin" in kubectl("get", "clusterrolebindings").stdout
        # and they authorise what the config manager does: read its node's labels, nothing else
        who = "--as=system:serviceaccount:gpu-system:nvidia-device-plugin"
        assert kubectl("auth", "can-i", "watch", "nodes", who).stdout.strip() == "yes"
        assert kubectl("auth", "can-i", "patch", "nodes", who, check=False).stdout.strip() == "no"
    finally:
        kubectl("delete", "-f", str(path), "--ignore-not-found")


def test_host_without_driver_fails_in_the_nvidia_hook(gpus: Gpus, gpu_host: Any) -> None:
    node = gpu_host("l4-1", config_key="default", driver=None)
    gpus.deploy_addons()

    def failed_start() -> dict[str, Any] | None:
        pod = gpus.plugin_pod(node)
        for cs in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
            if cs["name"] == "nvidia-device-plugin" and cs["restartCount"] >= 1:
                return cs
        return None

    status = wait(failed_start, what="plugin container failed to start")
    term = status["lastState"]["terminated"]
    assert (term["reason"], term["exitCode"]) == ("StartError", 128)
    assert term["message"].endswith(
        "nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot open shared "
        "object file: no such file or directory: unknown"
    )
    assert gpus.resources(node) == (None, None)
    assert "nvidia.com/gpu.product" not in gpus.labels(node)
