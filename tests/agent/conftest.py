"""GPU behaviour of the lab's node agent on the real control plane (tests/conftest.py's `lab_cluster`).

A GPU node is a virtual node the agent registers (`virtual_nodes`): either with its profile's hardware
(``dgx-h100``: eight H100s, driver and ``nvidia`` handler), or a ``cpu`` node given a fake lab host root through
the agent's ``attach_host`` (`gpu_host`): what a deploy leaves on a lab host (driver files, containerd's config
and the ``nvidia`` drop-in rendered by gpuready's own containerd_config, the emulated driver's MIG state) plus a
hardware file with faults. gpuready's add-ons run in the test's own namespace; the real DaemonSet controller and
scheduler place their pods, and the agent runs them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from host_roots import DRIVER, make_host  # noqa: F401 - the tests import them from here
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from polling import wait_for

from gpuready import kube
from gpuready.deploy import addons
from gpuready.lab.agent import control

Obj = dict[str, Any]
WAIT_S = 120.0  # two cores shared with other test sessions: the real controllers take their time
GPU = "nvidia.com/gpu"
VECTOR_ADD = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
CUDA_BASE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
PAUSE = "registry.k8s.io/pause:3.10"
CONFIGS = {
    "default": "version: v1\nflags:\n  migStrategy: none\n",
    "ts4": "version: v1\nflags:\n  migStrategy: none\nsharing:\n  timeSlicing:\n    resources:\n"
    "    - name: nvidia.com/gpu\n      replicas: 4\n",
    "mig-mixed": "version: v1\nflags:\n  migStrategy: mixed\n",
    "mig-single": "version: v1\nflags:\n  migStrategy: single\n",
}


def gpu_pod(
    name: str,
    image: str,
    node: str,
    *,
    gpus: int = 1,
    command: list[str] | None = None,
    runtime_class: str | None = "nvidia",
    resource: str = GPU,
    restart: str = "Never",
) -> Obj:
    container: Obj = {"name": "main", "image": image}
    if gpus:
        container["resources"] = {"limits": {resource: str(gpus)}}
    if command:
        container["command"] = command
    spec: Obj = {
        "restartPolicy": restart,
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": addons.GPU_TOLERATIONS,
        "containers": [container],
    }
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def terminated(pod: Obj) -> Obj:
    return pod["status"]["containerStatuses"][0]["state"]["terminated"]


@dataclass
class Gpus:
    """The test's namespace on the lab cluster, read as plain dicts (the API's own field names)."""

    api: client.ApiClient
    ns: str

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def _plain(self, obj: Any) -> Obj:
        return self.api.sanitize_for_serialization(obj)

    def node(self, name: str) -> Obj:
        return self._plain(self.core.read_node(name))

    def labels(self, name: str) -> dict[str, str]:
        return self.node(name)["metadata"].get("labels") or {}

    def resources(self, name: str, key: str = GPU) -> tuple[str | None, str | None]:
        status = self.node(name)["status"]
        return (status.get("capacity") or {}).get(key), (status.get("allocatable") or {}).get(key)

    def pod(self, name: str) -> Obj | None:
        try:
            return self._plain(self.core.read_namespaced_pod(name, self.ns))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def pods_on(self, node: str, prefix: str = "") -> list[Obj]:
        pods = self.core.list_namespaced_pod(self.ns, field_selector=f"spec.nodeName={node}").items
        return [self._plain(p) for p in pods if p.metadata.name.startswith(prefix)]

    def plugin_pod(self, node: str, prefix: str = "nvidia-device-plugin") -> Obj | None:
        return next(iter(self.pods_on(node, prefix)), None)

    def running(self, name: str) -> Obj | None:
        pod = self.pod(name)
        return pod if pod and pod["status"].get("phase") == "Running" else None

    def finished(self, name: str) -> Obj | None:
        pod = self.pod(name)
        return pod if pod and pod["status"].get("phase") in ("Succeeded", "Failed") else None

    def create_pod(self, manifest: Obj) -> None:
        self.core.create_namespaced_pod(self.ns, manifest)

    def logs(self, name: str, container: str | None = None) -> str:
        if container:
            return self.core.read_namespaced_pod_log(name, self.ns, container=container)
        return self.core.read_namespaced_pod_log(name, self.ns)

    def runtime_class(self) -> None:
        """gpuready's RuntimeClass ``nvidia`` (cluster-wide; applied server-side, so again is fine)."""
        kube.apply(kube.Cluster(api=self.api, url=""), addons.runtime_class())

    def deploy_addons(self, runtime_class: bool = True, configs: dict[str, str] | None = None) -> None:
        """gpuready.deploy.addons' objects in this namespace; the GPU DaemonSets optionally on the nvidia runtime."""
        settings = replace(addons.AddonSettings(), namespace=self.ns)
        self.runtime_class()
        cm = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "data": configs or CONFIGS,
            "metadata": {"name": addons.DEVICE_PLUGIN_CONFIGMAP, "namespace": self.ns},
        }
        self.core.create_namespaced_config_map(self.ns, cm)
        self.core.create_namespaced_service_account(self.ns, {"metadata": {"name": "nvidia-device-plugin"}})
        dcgm, service = addons.dcgm_exporter(settings)
        apps = client.AppsV1Api(self.api)
        for ds in (addons.device_plugin(settings), addons.gpu_feature_discovery(settings), dcgm):
            if (
                not runtime_class
            ):  # gpuready's add-ons set it; without it the pods run under containerd's runc
                ds["spec"]["template"]["spec"].pop("runtimeClassName", None)
            apps.create_namespaced_daemon_set(self.ns, ds)
        self.core.create_namespaced_service(self.ns, service)
        self.deploy_nfd(settings)

    def deploy_nfd(self, settings: addons.AddonSettings) -> None:
        """node-feature-discovery's namespaced objects (what carries GFD's labels to the Node); its master kept on
        GPU nodes, the only ones whose runtime knows its image here (CPU-only virtual nodes run a small catalogue)."""
        cluster = kube.Cluster(api=self.api, url="")
        for manifest in addons.nfd(settings):
            if manifest["kind"] in ("ServiceAccount", "ConfigMap", "DaemonSet", "Deployment"):
                if manifest["kind"] == "Deployment":
                    manifest["spec"]["template"]["spec"]["nodeSelector"] = addons.GPU_NODE_SELECTOR
                kube.apply(cluster, manifest)

    def barrier(self, node: str) -> None:
        """Two pods started one after the other on `node`: the agent runs a node's pods in order and re-syncs
        the node's GPU state after each start, so once the second runs, a sync after the first one is done."""
        for i in range(2):
            name = f"barrier-{node}-{time.monotonic_ns() % 10**9}-{i}"
            self.create_pod(gpu_pod(name, PAUSE, node, gpus=0, runtime_class=None, restart="Always"))
            wait_for(lambda n=name: self.running(n), what=f"{name} running")

    def watch_resources(
        self,
        node: str,
        start: Callable[[], None],
        until: tuple[str, str],
        key: str = GPU,
        timeout: float = WAIT_S,
    ) -> list[tuple[str | None, str | None]]:
        """Call `start()`, then every distinct (capacity, allocatable) of `key` the node goes through (from a
        watch, so none is missed) until it reaches `until`."""
        current = self.core.read_node(node)
        seen = [((current.status.capacity or {}).get(key), (current.status.allocatable or {}).get(key))]
        start()
        deadline = time.monotonic() + timeout
        w = watch.Watch()
        try:
            while seen[-1] != until:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{node}: {key} never reached {until}; went through {seen}")
                for ev in w.stream(
                    self.core.list_node,
                    field_selector=f"metadata.name={node}",
                    resource_version=current.metadata.resource_version,
                    timeout_seconds=max(1, int(left)),
                ):
                    obj = ev["object"]
                    current = obj
                    state = ((obj.status.capacity or {}).get(key), (obj.status.allocatable or {}).get(key))
                    if state != seen[-1]:
                        seen.append(state)
                    if state == until:
                        break
        finally:
            w.stop()
        return seen


@pytest.fixture
def ns(namespace: str, api: client.ApiClient) -> str:
    """The test's namespace, once its default ServiceAccount exists (pods are refused before that)."""
    core = client.CoreV1Api(api)
    wait_for(
        lambda: any(
            sa.metadata.name == "default" for sa in core.list_namespaced_service_account(namespace).items
        ),
        what=f"the serviceaccount controller to create {namespace}/default",
    )
    return namespace


@pytest.fixture
def gpus(api: client.ApiClient, ns: str) -> Gpus:
    return Gpus(api, ns)


@pytest.fixture
def gpu_host(
    lab_cluster: Any, virtual_nodes: Callable[..., list[str]], api: client.ApiClient, tmp_path: Path
) -> Iterator[Callable[..., str]]:
    """`gpu_host(profile, config_key="ts4", index=0, grace_s=None, **make_host options)`: a virtual node with a
    lab host's GPUs, driver and containerd (read from a host root the agent watches), labelled as a GPU node that
    selects `config_key` of the device plugin's ConfigMap; returns its name."""
    core = client.CoreV1Api(api)

    def add(
        profile: str, config_key: str | None = "ts4", index: int = 0, grace_s: float | None = None, **kw: Any
    ) -> str:
        (name,) = virtual_nodes(1, "cpu")
        root, hardware = make_host(tmp_path / "hosts", name, profile, index, **kw)
        request: Obj = {"op": "attach_host", "name": name, "root": str(root), "hardware": str(hardware)}
        if grace_s is not None:
            request["grace_s"] = grace_s
        control.call(lab_cluster.control, request)
        labels = {"nvidia.com/gpu.present": "true"}
        if config_key:
            labels[addons.DEVICE_PLUGIN_CONFIG_LABEL] = config_key
        core.patch_node(name, {"metadata": {"labels": labels}})
        return name

    yield add
