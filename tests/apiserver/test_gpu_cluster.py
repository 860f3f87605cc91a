"""GPU behaviour end to end: fake lab host roots in tmp_path, an in-process simulator, real kubectl and the client.

Each host is what a deploy leaves on a real lab host (driver files, containerd config and the nvidia drop-in
rendered by gpuready's own containerd_config, the emulated driver's MIG state) plus a hardware file; the
add-ons are gpuready.addons' manifests (which run with ``runtimeClassName: nvidia``; one test removes it).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from gpuready import addons
from gpuready.containerd_config import RuntimeSettings, render_drop_in, render_main
from gpuready.lab.apiserver import ApiServer
from gpuready.lab.apiserver.gpu import attach
from gpuready.lab.apiserver.gpu_host import HostView
from gpuready.lab.apiserver.gpu_images import VECTOR_ADD_OK
from gpuready.lab.hardware import make_hardware, write_hardware
from gpuready.nvidia.dcgm import parse_dcgm_metrics

from .conftest import wait_for

wait = functools.partial(wait_for, timeout=30.0)  # generous: the suite shares a small machine

NS = "gpu-system"
CONTAINERD_MAIN = """\
version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
"""
VECTOR_ADD = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
CUDA_BASE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"


def make_host(
    base: Path,
    name: str,
    profile: str,
    index: int = 0,
    *,
    nvidia_dropin: bool = True,
    mig: dict[int, list[str]] | None = None,
    faults: list[dict[str, Any]] | None = None,
    driver: str | None = "580.178.04",
) -> HostView:
    """A host root as the gpu_node deploy leaves it; `mig` maps GPU index -> MIG profiles to create."""
    root = base / name / "merged"
    hw = make_hardware(profile, index)
    hw["faults"] = list(faults or [])
    write_hardware(base / name / "machine" / "hardware.json", hw)
    for d in ("usr/bin", "usr/lib/nvidia-emu", "usr/lib/x86_64-linux-gnu", "etc/containerd/conf.d",
              "var/lib/nvidia-emu"):  # fmt: skip
        (root / d).mkdir(parents=True, exist_ok=True)
    if driver:
        (root / "usr/bin/nvidia-smi").write_text("#!/usr/bin/python3\n")
        (root / "usr/lib/nvidia-emu/driver-version").write_text(driver + "\n")
        (root / "usr/lib/nvidia-emu/kmod-version").write_text(driver + "\n")
        (root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").write_text("emulated NVML\n")
    (root / "usr/bin/nvidia-container-runtime").write_text("#!/usr/bin/python3\n")
    settings = RuntimeSettings()
    main = render_main(CONTAINERD_MAIN, settings)
    (root / "etc/containerd/config.toml").write_text(main)
    if nvidia_dropin:
        (root / "etc/containerd/conf.d/99-nvidia.toml").write_text(render_drop_in(main, settings))
    gpus = {}
    for g in hw["gpus"]:
        gis = []
        by_name = {p["name"]: p for p in g["mig_profiles"]}
        start = 0
        for gi_id, prof_name in enumerate((mig or {}).get(g["index"], []), start=1):
            p = by_name[prof_name]
            gis.append({"id": gi_id, "profile_id": p["profile_id"], "start": start, "size": p["placement_size"],
                        "cis": [{"id": 0, "profile_id": 0, "start": 0, "size": p["compute_slices"]}]})  # fmt: skip
            start += p["placement_size"]
        on = g["index"] in (mig or {})
        gpus[g["uuid"]] = {"mig_current": on, "mig_pending": on, "persistence": False, "gis": gis}
    (root / "var/lib/nvidia-emu/state.json").write_text(
        json.dumps({"boot_id": "b", "kmod": driver, "gpus": gpus})
    )
    return HostView(name, root, base / name / "machine" / "hardware.json")


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[ApiServer]:
    """Overrides conftest's: no pre-made virtual GPU nodes; nodes come with the hosts below."""
    server = ApiServer(tmp_path / "state", node_grace_period=30.0, node_monitor_period=0.5)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def add_host(sim: ApiServer, tmp_path: Path) -> Callable[..., HostView]:
    """Create a host root, register its Node (heartbeating, GPU-present label) and attach its GPU backend."""

    def add(profile: str, config_key: str | None = "ts4", **kw: Any) -> HostView:
        (name,) = sim.virtual.add(1, "cpu", prefix="gpu-host-")
        view = make_host(tmp_path / "hosts", name, profile, **kw)
        labels = {"nvidia.com/gpu.present": "true"}
        if config_key:
            labels[addons.DEVICE_PLUGIN_CONFIG_LABEL] = config_key
        sim.store.modify("nodes", "", name, lambda n: n["metadata"]["labels"].update(labels))
        attach(sim, name, view, grace_s=1.0)
        return view

    return add


CONFIGS = {
    "none": "version: v1\nflags:\n  migStrategy: none\n",
    "ts4": "version: v1\nflags:\n  migStrategy: none\nsharing:\n  timeSlicing:\n    resources:\n"
    "    - name: nvidia.com/gpu\n      replicas: 4\n",
    "mig-mixed": "version: v1\nflags:\n  migStrategy: mixed\n",
    "mig-single": "version: v1\nflags:\n  migStrategy: single\n",
}


def deploy_addons(
    api: client.ApiClient, runtime_class: bool = True, configs: dict[str, str] | None = None
) -> None:
    """gpuready.addons' objects through the official client; the GPU DaemonSets optionally on the nvidia runtime."""
    settings = addons.AddonSettings()
    v1, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    v1.create_namespace({"metadata": {"name": NS}})
    client.NodeV1Api(api).create_runtime_class(addons.runtime_class())
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "data": configs or CONFIGS,
          "metadata": {"name": addons.DEVICE_PLUGIN_CONFIGMAP, "namespace": NS}}  # fmt: skip
    v1.create_namespaced_config_map(NS, cm)
    v1.create_namespaced_service_account(NS, {"metadata": {"name": "nvidia-device-plugin"}})
    dcgm, service = addons.dcgm_exporter(settings)
    for ds in (addons.device_plugin(settings), addons.gpu_feature_discovery(settings), dcgm):
        if not runtime_class:  # gpuready's add-ons set it; without it the pods run under containerd's runc
            ds["spec"]["template"]["spec"].pop("runtimeClassName", None)
        apps.create_namespaced_daemon_set(NS, ds)
    v1.create_namespaced_service(NS, service)


def node_of(sim: ApiServer, name: str) -> dict[str, Any]:
    return sim.store.get("nodes", "", name)


def resources(sim: ApiServer, name: str, key: str = "nvidia.com/gpu") -> tuple[str | None, str | None]:
    status = node_of(sim, name)["status"]
    return status["capacity"].get(key), status["allocatable"].get(key)


def plugin_pod(sim: ApiServer, node: str, prefix: str = "nvidia-device-plugin") -> dict[str, Any] | None:
    return next((p for p in sim.store.pods_on_node(node) if p["metadata"]["name"].startswith(prefix)), None)


def gpu_pod(name: str, image: str, node: str, *, gpus: int = 1, command: list[str] | None = None,
            runtime_class: str | None = "nvidia", resource: str = "nvidia.com/gpu") -> dict[str, Any]:  # fmt: skip
    container: dict[str, Any] = {"name": "main", "image": image}
    if gpus:
        container["resources"] = {"limits": {resource: str(gpus)}}
    if command:
        container["command"] = command
    spec: dict[str, Any] = {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": node},
                            "tolerations": addons.GPU_TOLERATIONS, "containers": [container]}  # fmt: skip
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {"metadata": {"name": name}, "spec": spec}


def finished(sim: ApiServer, name: str) -> dict[str, Any] | None:
    pod = sim.store.get("pods", "default", name)
    return pod if pod and pod["status"].get("phase") in ("Succeeded", "Failed") else None


def terminated(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["status"]["containerStatuses"][0]["state"]["terminated"]


# device plugin -------------------------------------------------------------------------------------------------


def test_time_slicing_follows_label_and_configmap_restart(sim, api, add_host, kubectl) -> None:
    host = add_host("l40s-2", config_key="ts4")
    deploy_addons(api)
    wait(lambda: resources(sim, host.name) == ("8", "8"), what="2 GPUs x 4 replicas")
    labels = node_of(sim, host.name)["metadata"]["labels"]
    wait(lambda: node_of(sim, host.name)["metadata"]["labels"].get("nvidia.com/gpu.replicas") == "4")
    labels = node_of(sim, host.name)["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-L40S-SHARED"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.count"] == "2" and labels["nvidia.com/gpu.memory"] == "46068"

    # Edit the ConfigMap to 8 replicas: the running plugin does not reload (upstream only reloads on SIGHUP) ...
    cm = client.CoreV1Api(api).read_namespaced_config_map(addons.DEVICE_PLUGIN_CONFIGMAP, NS)
    cm.data["ts4"] = cm.data["ts4"].replace("replicas: 4", "replicas: 8")
    client.CoreV1Api(api).replace_namespaced_config_map(addons.DEVICE_PLUGIN_CONFIGMAP, NS, cm)
    sim.backend(host.name).sync_node(sim, host.name)  # a sync now: nothing re-reads the ConfigMap behind it
    assert resources(sim, host.name) == ("8", "8")
    # ... a restart does (what a deploy must do after changing the ConfigMap).
    old = plugin_pod(sim, host.name)["metadata"]["uid"]
    kubectl("delete", "pod", "-n", NS, plugin_pod(sim, host.name)["metadata"]["name"])
    wait(lambda: (plugin_pod(sim, host.name) or {"metadata": {"uid": old}})["metadata"]["uid"] != old)
    wait(lambda: resources(sim, host.name) == ("16", "16"), what="2 GPUs x 8 replicas after restart")

    # The node label selects another config and the config manager makes the plugin reload at once.
    kubectl("label", "node", host.name, "--overwrite", f"{addons.DEVICE_PLUGIN_CONFIG_LABEL}=none")
    wait(lambda: resources(sim, host.name) == ("2", "2"), what="whole GPUs after the label change")
    wait(lambda: node_of(sim, host.name)["metadata"]["labels"].get("nvidia.com/gpu.product") == "NVIDIA-L40S")
    out = kubectl("get", "node", host.name, "-o", "jsonpath={.status.allocatable.nvidia\\.com/gpu}").stdout
    assert out == "2"


def test_plugin_gone_drops_allocatable_then_capacity(sim, api, add_host, kubectl) -> None:
    host = add_host("l4-1", config_key="none")
    deploy_addons(api)
    wait(lambda: resources(sim, host.name) == ("1", "1"), what="1 GPU")
    kubectl("delete", "daemonset", "-n", NS, "nvidia-device-plugin")
    wait(lambda: plugin_pod(sim, host.name) is None, what="plugin pod gone")
    wait(lambda: resources(sim, host.name) == ("1", "0"), what="allocatable 0, capacity kept")
    # grace_s=1.0 in this fixture (the kubelet's is 5 minutes): then capacity 0, the key kept
    wait(lambda: resources(sim, host.name) == ("0", "0"), what="capacity 0 after the grace period")


def test_mig_mixed_and_single_from_host_state(sim, api, add_host) -> None:
    mixed = add_host(
        "a100-80gb-4", config_key="mig-mixed", mig={0: ["3g.40gb", "2g.20gb", "1g.10gb"], 1: ["1g.10gb"]}
    )
    single = add_host("a100-80gb-4", config_key="mig-single", index=1,
                      mig={i: ["3g.40gb", "3g.40gb"] for i in range(4)})  # fmt: skip
    deploy_addons(api)
    wait(lambda: resources(sim, mixed.name, "nvidia.com/mig-1g.10gb") == ("2", "2"), what="mixed 1g.10gb")
    assert resources(sim, mixed.name, "nvidia.com/mig-3g.40gb") == ("1", "1")
    assert resources(sim, mixed.name, "nvidia.com/mig-2g.20gb") == ("1", "1")
    assert resources(sim, mixed.name, "nvidia.com/gpu") == ("2", "2")  # GPUs 2 and 3 have MIG disabled
    wait(lambda: resources(sim, single.name) == ("8", "8"), what="single: 8 MIG devices as nvidia.com/gpu")
    wait(lambda: "nvidia.com/gpu.product" in node_of(sim, single.name)["metadata"]["labels"])
    labels = node_of(sim, single.name)["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.memory"]) == ("8", "40192")
    assert labels["nvidia.com/mig.strategy"] == "single"
    mixed_labels = wait(
        lambda: node_of(sim, mixed.name)["metadata"]["labels"].get("nvidia.com/mig-1g.10gb.count")
    )
    assert mixed_labels == "2"
    assert node_of(sim, mixed.name)["metadata"]["labels"]["nvidia.com/mig-3g.40gb.product"] == (
        "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"
    )


def test_plugin_without_nvidia_runtime_crashes_with_nvml_error(sim, api, add_host) -> None:
    """The add-ons without ``runtimeClassName`` on a host whose default runtime is runc: no NVML inside."""
    host = add_host("l4-1", config_key="none")
    deploy_addons(api, runtime_class=False)

    def crashed() -> dict[str, Any] | None:
        pod = plugin_pod(sim, host.name)
        for cs in (pod or {}).get("status", {}).get("containerStatuses") or []:
            if cs["name"] == "nvidia-device-plugin" and cs["restartCount"] >= 1:
                return pod
        return None

    pod = wait(crashed, what="plugin container restarted")
    status = next(cs for cs in pod["status"]["containerStatuses"] if cs["name"] == "nvidia-device-plugin")
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert status["lastState"]["terminated"]["exitCode"] == 1
    # the crashed run's output (what `kubectl logs` shows for a container in CrashLoopBackOff)
    logs = client.CoreV1Api(api).read_namespaced_pod_log(
        pod["metadata"]["name"], NS, container="nvidia-device-plugin"
    )
    assert "could not load NVML library: libnvidia-ml.so.1" in logs
    assert logs.rstrip().endswith("platform detection failed")
    assert resources(sim, host.name) == (None, None)


# workloads -----------------------------------------------------------------------------------------------------


def test_vector_add_ready_host_missing_handler_and_faulty_gpu(sim, api, add_host, kubectl) -> None:
    ready = add_host("l4-1", config_key="none")
    no_dropin = add_host("l4-1", config_key="none", index=1, nvidia_dropin=False)
    faulty = add_host("l4-1", config_key="none", index=2, faults=[{"fault": "ecc-uncorrectable", "gpu": 0}])
    deploy_addons(api)
    v1 = client.CoreV1Api(api)
    wait(lambda: resources(sim, ready.name) == ("1", "1") and resources(sim, faulty.name) == ("1", "1"))
    for name, host in (("va-ready", ready), ("va-faulty", faulty)):
        v1.create_namespaced_pod("default", gpu_pod(name, VECTOR_ADD, host.name))
    # Without the drop-in the host has no `nvidia` handler: its plugin cannot start either, so schedule no GPU.
    v1.create_namespaced_pod("default", gpu_pod("va-nohandler", VECTOR_ADD, no_dropin.name, gpus=0))

    ok = wait(lambda: finished(sim, "va-ready"), what="va-ready done")
    assert ok["status"]["phase"] == "Succeeded"
    assert kubectl("logs", "va-ready").stdout == VECTOR_ADD_OK

    bad = wait(lambda: finished(sim, "va-faulty"), what="va-faulty done")
    assert bad["status"]["phase"] == "Failed" and terminated(bad)["exitCode"] == 1
    assert v1.read_namespaced_pod_log("va-faulty", "default") == (
        "[Vector addition of 50000 elements]\n"
        "Failed to allocate device vector A (error code uncorrectable ECC error encountered)!\n"
    )

    nohandler = wait(lambda: finished(sim, "va-nohandler"), what="va-nohandler done")
    term = terminated(nohandler)
    assert term["reason"] == "RunContainerError"
    assert term["message"] == ('rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for '
                               '"nvidia" is configured')  # fmt: skip
    events = kubectl(
        "get", "events", "--field-selector", "involvedObject.name=va-nohandler", "-o", "json"
    ).stdout
    assert any(e["reason"] == "FailedCreatePodSandBox" for e in json.loads(events)["items"])


def test_time_sliced_pods_share_a_uuid_and_mig_pods_see_their_device(sim, api, add_host) -> None:
    l4 = add_host("l4-1", config_key="ts4")
    a100 = add_host("a100-80gb-4", config_key="mig-mixed", index=3, mig={0: ["1g.10gb", "1g.10gb"]})
    deploy_addons(api)
    v1 = client.CoreV1Api(api)
    wait(lambda: resources(sim, l4.name) == ("4", "4"), what="L4 x 4 replicas")
    wait(lambda: resources(sim, a100.name, "nvidia.com/mig-1g.10gb") == ("2", "2"), what="2 MIG devices")
    smi = ["nvidia-smi", "-L"]
    for name in ("ts-a", "ts-b"):
        v1.create_namespaced_pod("default", gpu_pod(name, CUDA_BASE, l4.name, command=smi))
    v1.create_namespaced_pod("default", gpu_pod("mig-a", CUDA_BASE, a100.name, command=smi,
                                                resource="nvidia.com/mig-1g.10gb"))  # fmt: skip
    logs = {}
    for name in ("ts-a", "ts-b", "mig-a"):
        assert wait(lambda n=name: finished(sim, n), what=name)["status"]["phase"] == "Succeeded"
        logs[name] = v1.read_namespaced_pod_log(name, "default")
    l4_uuid = make_hardware("l4-1", 0)["gpus"][0]["uuid"]
    assert logs["ts-a"] == logs["ts-b"] == f"GPU 0: NVIDIA L4 (UUID: {l4_uuid})\n"
    lines = logs["mig-a"].splitlines()
    a100_uuid = make_hardware("a100-80gb-4", 3)["gpus"][0]["uuid"]
    assert lines[0] == f"GPU 0: NVIDIA A100-SXM4-80GB (UUID: {a100_uuid})"
    assert len(lines) == 2 and lines[1].startswith("  MIG 1g.10gb     Device  0: (UUID: MIG-")


def test_unknown_nvidia_image_cannot_be_pulled(sim, api, add_host) -> None:
    host = add_host("l4-1", config_key="none")
    client.CoreV1Api(api).create_namespaced_pod("default", gpu_pod("nope", "nvcr.io/nvidia/pytorch:24.01-py3",
                                                                    host.name, gpus=0, runtime_class=None))  # fmt: skip

    def waiting() -> str | None:
        pod = sim.store.get("pods", "default", "nope")
        cs = (pod.get("status") or {}).get("containerStatuses") or []
        return (cs[0]["state"].get("waiting") or {}).get("reason") if cs else None

    assert wait(waiting, what="waiting reason") in ("ErrImagePull", "ImagePullBackOff")


# dcgm-exporter -------------------------------------------------------------------------------------------------


def test_dcgm_scrape_through_proxy_carries_pod_labels(sim, api, add_host, kubectl) -> None:
    host = add_host("l40s-2", config_key="none", faults=[{"fault": "xid-48", "gpu": 1}])
    deploy_addons(api)
    v1 = client.CoreV1Api(api)
    # GPU 1 has an XID 48: the plugin's health check leaves one allocatable of two.
    wait(lambda: resources(sim, host.name) == ("2", "1"), what="one healthy GPU")
    v1.create_namespaced_pod(
        "default", gpu_pod("sleeper", CUDA_BASE, host.name, command=["sleep", "infinity"])
    )
    wait(lambda: sim.store.get("pods", "default", "sleeper")["status"].get("phase") == "Running")
    exporter = wait(lambda: (p := plugin_pod(sim, host.name, "nvidia-dcgm-exporter")) and
                        p["status"].get("phase") == "Running" and p)  # fmt: skip
    name = exporter["metadata"]["name"]
    text = v1.connect_get_namespaced_pod_proxy_with_path(f"{name}:9400", NS, "metrics")
    samples = parse_dcgm_metrics(text)
    util = {s.gpu: s for s in samples if s.metric == "DCGM_FI_DEV_GPU_UTIL"}
    assert sorted(util) == [0, 1]
    assert (util[0].pod, util[0].namespace, util[0].container) == ("sleeper", "default", "main")
    assert util[1].pod is None and util[0].hostname == name
    assert util[0].labels["DCGM_FI_DRIVER_VERSION"] == "580.178.04"
    xid = {s.gpu: s.value for s in samples if s.metric == "DCGM_FI_DEV_XID_ERRORS"}
    assert xid == {0: 0.0, 1: 48.0}
    via_service = kubectl(
        "get", "--raw", f"/api/v1/namespaces/{NS}/services/nvidia-dcgm-exporter:9400/proxy/metrics"
    )
    assert len(parse_dcgm_metrics(via_service.stdout)) == len(samples)
    health = kubectl("get", "--raw", f"/api/v1/namespaces/{NS}/pods/{name}:9400/proxy/health").stdout
    assert health == "OK"


def test_dcgm_mig_instances(sim, api, add_host) -> None:
    host = add_host("a100-80gb-4", config_key="mig-mixed", mig={0: ["3g.40gb", "1g.10gb"]})
    deploy_addons(api)
    exporter = wait(lambda: (p := plugin_pod(sim, host.name, "nvidia-dcgm-exporter")) and
                        p["status"].get("phase") == "Running" and p)  # fmt: skip
    text = client.CoreV1Api(api).connect_get_namespaced_pod_proxy_with_path(
        f"{exporter['metadata']['name']}:9400", NS, "metrics"
    )
    temps = [s for s in parse_dcgm_metrics(text) if s.metric == "DCGM_FI_DEV_GPU_TEMP"]
    assert sorted((s.gpu, s.gpu_instance_profile, s.gpu_instance_id) for s in temps) == [
        (0, "1g.10gb", 2), (0, "3g.40gb", 1), (1, None, None), (2, None, None), (3, None, None)]  # fmt: skip
    assert not [s for s in parse_dcgm_metrics(text) if s.metric == "DCGM_FI_DEV_GPU_UTIL" and s.gpu == 0]


def test_rbac_objects_are_stored(kubectl, tmp_path) -> None:
    manifests = addons.device_plugin_rbac(addons.AddonSettings())
    path = tmp_path / "rbac.yaml"
    path.write_text(yaml.safe_dump_all(manifests[1:]))
    kubectl("apply", "-f", str(path))
    out = kubectl("get", "clusterrole", "nvidia-device-plugin", "-o", "json").stdout
    assert json.loads(out)["rules"] == manifests[1]["rules"]
    assert "nvidia-device-plugin" in kubectl("get", "clusterrolebindings").stdout


def test_host_without_driver_fails_in_the_nvidia_hook(sim, api, add_host) -> None:
    host = add_host("l4-1", config_key="none", driver=None)
    deploy_addons(api)

    def failed_start() -> dict[str, Any] | None:
        pod = plugin_pod(sim, host.name)
        for cs in (pod or {}).get("status", {}).get("containerStatuses") or []:
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
    assert resources(sim, host.name) == (None, None)
    assert "nvidia.com/gpu.product" not in node_of(sim, host.name)["metadata"]["labels"]
