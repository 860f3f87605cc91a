"""NVIDIA's real device plugin on a real-kubelet lab host (issue #29 item 1, first step).

On the shared real-kubelet lab (conftest.real_l4_lab: trixie, the L4 profile: 1 GPU, time-sliced 4 ways by
inventory/lab.py) on the real kubelet. After gpuready's node deploy and add-ons deploy
(deploys/cluster_addons.py, gpuready's own manifests), the device plugin pod is a real container of the lab's
image ``nvcr.io/nvidia/k8s-device-plugin:v0.19.3`` (gpuready.lab.nvidia_addons: NVIDIA's binaries built from the Go
module), it loads the mock NVML through the nvidia runtime as on a real node, registers with the real kubelet
over the device-plugin gRPC socket, and the Node's allocatable ``nvidia.com/gpu`` is what the spec expects. An
XID 79 injected into the emulated machine reaches the plugin's health checker through the mock NVML's event set
and allocatable drops to 0 (capacity stays); a GPU off the bus leaves a restarted plugin nothing to offer.

It runs gpuready's own add-on manifests unchanged; the two defects the real plugin found in them are fixed
(docs/lab-real-kubelet.md, "Two defects"); the config-manager sidecar reaches the API server through the lab's
real kube-proxy. About 230 s with warm caches on an idle machine, 334 s beside two other labs (the plugin's cold
build adds about 400 s once).
"""

from __future__ import annotations

import calendar
import json
import time
from typing import Any

import pytest
from conftest import REAL_NODE, Lab, RealLab
from pyinfra_runs import run_pyinfra
from test_lab_real_kubelet import _kubectl, _wait

from gpuready.lab import hosts, nvidia_addons

pytestmark = pytest.mark.lab

NODE = REAL_NODE
GPUS, REPLICAS = 1, 4  # the l4-1 profile; inventory/lab.py's time-slicing replicas for it
NAMESPACE = "gpu-system"


@pytest.fixture(scope="module")
def plugin_lab(real_l4_lab: RealLab) -> Lab:
    # without NFD: test_lab_real_nfd.py, next on this lab, proves the Node has no GFD label until NFD runs
    addons = run_pyinfra(real_l4_lab.lab, "--data", "addons_nfd=False", deploy="deploys/cluster_addons.py")
    assert addons.returncode == 0, addons.output[-6000:]
    return real_l4_lab.lab


def _plugin_pod(lab: Lab) -> dict[str, Any]:
    r = _kubectl(lab.state, "get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=nvidia-device-plugin",
                 "--field-selector", f"spec.nodeName={NODE}", "-o", "json")  # fmt: skip
    items = json.loads(r.stdout)["items"] if r.returncode == 0 else []
    return items[0] if items else {}


def _diagnose(lab: Lab, pod: dict[str, Any]) -> str:
    name = pod.get("metadata", {}).get("name", "")
    logs = _kubectl(lab.state, "logs", "-n", NAMESPACE, name, "--all-containers", "--prefix", "--tail=40")
    previous = _kubectl(
        lab.state, "logs", "-n", NAMESPACE, name, "-c", "nvidia-device-plugin", "-p", "--tail=30"
    )
    journal = lab.ssh(NODE, "journalctl -u kubelet -u containerd --no-pager -o cat | tail -30", check=False)
    status = json.dumps(pod.get("status", {}))[-2500:]
    return (
        f"{status}\n--- logs\n{logs.stdout}{logs.stderr}\n--- previous\n{previous.stdout}{previous.stderr}\n"
        f"--- journal\n{journal.stdout}"
    )


def _allocatable(lab: Lab) -> str:
    r = _kubectl(lab.state, "get", "node", NODE, "-o", "jsonpath={.status.allocatable.nvidia\\.com/gpu}")
    return r.stdout.strip()


def test_the_device_plugin_pod_runs_nvidias_binary_in_a_real_container(plugin_lab: Lab) -> None:
    def running() -> tuple[bool, str]:
        """Every container ready, the plugin's running for 15 s (a crashing one is ready for a moment)."""
        pod = _plugin_pod(plugin_lab)
        statuses = pod.get("status", {}).get("containerStatuses", [])
        plugin = next((s for s in statuses if s["name"] == "nvidia-device-plugin"), {})
        started = plugin.get("state", {}).get("running", {}).get("startedAt")
        settled = (
            bool(started) and time.time() - calendar.timegm(time.strptime(started, "%Y-%m-%dT%H:%M:%SZ")) > 15
        )
        return settled and all(s.get("ready") for s in statuses), json.dumps(statuses)[-1500:]

    ok, _ = _wait(running, 180)
    pod = _plugin_pod(plugin_lab)
    assert ok, _diagnose(plugin_lab, pod)
    images = {c["image"] for c in pod["spec"]["containers"]}
    assert images == {nvidia_addons.image_name()}, images
    listed = plugin_lab.ssh(NODE, "crictl ps --name nvidia-device-plugin -o json").stdout
    ps = json.loads(listed)["containers"]
    assert [c["state"] for c in ps] == ["CONTAINER_RUNNING"], ps
    version = plugin_lab.ssh(
        NODE, f"crictl exec {ps[0]['id']} nvidia-device-plugin --version", check=False
    ).stdout
    assert f"v{nvidia_addons.DEFAULT_VERSION}" in version, version


def test_it_registers_with_the_real_kubelet_and_the_node_gets_the_gpus(plugin_lab: Lab) -> None:
    ok, detail = _wait(lambda: (lambda a: (a == str(GPUS * REPLICAS), a))(_allocatable(plugin_lab)), 120)
    assert ok, f"allocatable nvidia.com/gpu {detail!r}\n{_diagnose(plugin_lab, _plugin_pod(plugin_lab))}"
    sockets = plugin_lab.ssh(NODE, "ls /var/lib/kubelet/device-plugins/").stdout.split()
    assert "kubelet.sock" in sockets and "nvidia-gpu.sock" in sockets, sockets
    logs = _kubectl(plugin_lab.state, "logs", "-n", NAMESPACE, _plugin_pod(plugin_lab)["metadata"]["name"],
                    "-c", "nvidia-device-plugin")  # fmt: skip
    assert "Registered device plugin for 'nvidia.com/gpu' with Kubelet" in logs.stdout, logs.stdout[-3000:]


def _gpu_uuid(lab: Lab) -> str:
    return lab.ssh(NODE, "nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0").stdout.strip()


def test_an_xid_79_makes_the_real_plugin_take_a_device_of_the_gpu_out_of_allocatable(plugin_lab: Lab) -> None:
    """Issue #29: an XID 79 reaches NVIDIA's real plugin through the mock NVML's event set
    (``nvmlEventSetWait_v2``, internal/rm/health.go); the plugin reads the event device's UUID (its handle was
    opened before the loss and still answers it, as on a real node) and marks GPU 0's device unhealthy. v0.19.3
    keeps one device per GPU for its XID watch, so of GPU 0's 4 time-slicing replicas one goes out of allocatable
    (NVIDIA/k8s-device-plugin#1929) while capacity stays. The plugin never marks a device healthy again, so the
    fault is cleared and the next test restarts the plugin. (The UUID is read before the fault: nvidia-smi opens
    a new handle, which a lost GPU refuses.)"""
    uuid = _gpu_uuid(plugin_lab)
    ok, detail = _wait(lambda: (lambda a: (a == str(GPUS * REPLICAS), a))(_allocatable(plugin_lab)), 60)
    assert ok, f"allocatable nvidia.com/gpu {detail!r} before the fault"
    hosts.inject_fault(plugin_lab.paths, NODE, "xid-79", gpu=0)
    try:
        ok, detail = _wait(
            lambda: (lambda a: (a == str(GPUS * REPLICAS - 1), a))(_allocatable(plugin_lab)), 120
        )
        assert ok, f"allocatable nvidia.com/gpu {detail!r}\n{_diagnose(plugin_lab, _plugin_pod(plugin_lab))}"
        capacity = _kubectl(plugin_lab.state, "get", "node", NODE, "-o",
                            "jsonpath={.status.capacity.nvidia\\.com/gpu}").stdout  # fmt: skip
        assert capacity == str(GPUS * REPLICAS), capacity
        logs = _kubectl(plugin_lab.state, "logs", "-n", NAMESPACE, _plugin_pod(plugin_lab)["metadata"]["name"],
                        "-c", "nvidia-device-plugin").stdout  # fmt: skip
        # the event names XID 79 and the GPU; the plugin marks one replica of it unhealthy
        assert "EventData:79" in logs, logs[-3000:]
        assert f"XidCriticalError: Xid=79 on Device={uuid}::" in logs, logs[-3000:]
        assert "Failed to determine uuid" not in logs, logs[-3000:]
        assert logs.count(f"'nvidia.com/gpu' device marked unhealthy: {uuid}::") == 1, logs[-3000:]
    finally:
        hosts.inject_fault(plugin_lab.paths, NODE, None)


def test_an_off_bus_gpu_leaves_the_restarted_plugin_nothing_to_offer(plugin_lab: Lab) -> None:
    """The check can fail: with GPU 0 fallen off the bus, the nvidia runtime cannot make the restarted plugin's
    container (its jit-cdi spec needs the GPU's NVML handle: 'GPU is lost'), so no plugin serves nvidia.com/gpu
    and the kubelet's allocatable drops to 0."""
    hosts.inject_fault(plugin_lab.paths, NODE, "off-bus", gpu=0)
    try:
        name = _plugin_pod(plugin_lab)["metadata"]["name"]
        deleted = _kubectl(plugin_lab.state, "delete", "pod", "-n", NAMESPACE, name, "--wait=true")
        assert deleted.returncode == 0, deleted.stderr
        ok, detail = _wait(lambda: (lambda a: (a in ("", "0"), a))(_allocatable(plugin_lab)), 150)
        assert ok, f"allocatable nvidia.com/gpu {detail!r}\n{_diagnose(plugin_lab, _plugin_pod(plugin_lab))}"
    finally:
        hosts.inject_fault(plugin_lab.paths, NODE, None)
