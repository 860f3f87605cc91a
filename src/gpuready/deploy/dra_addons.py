"""NVIDIA's DRA driver for GPUs as cluster add-ons, for the pools with ``gpu_allocation = "dra"``.

What the driver's Helm chart (kubernetes-sigs/dra-driver-nvidia-gpu, ``deployments/helm``) installs for GPUs,
rendered without Helm: the DeviceClasses ``gpu.nvidia.com`` and ``mig.nvidia.com`` (CEL selectors on the driver and
the device's ``type`` attribute), a ServiceAccount with the RBAC its kubelet plugin uses (publish ResourceSlices,
read ResourceClaims, Nodes and DeviceClasses) and the kubelet-plugin DaemonSet (``gpu-kubelet-plugin``, privileged
as upstream: it writes CDI specs and prepares devices; on ``dra`` nodes only, selected by the
``gpuready.io/gpu-allocation=dra`` label those nodes join with, tolerating every pool's taints like the other GPU
DaemonSets). The device plugin DaemonSet avoids those nodes (``addons.device_plugin``); GPU feature discovery and
dcgm-exporter run on every GPU node in both modes.

ComputeDomains are off, as the chart renders them with ``resources.computeDomains.enabled: false``: no controller
Deployment. Facts from the chart at v0.4.1 (``deployments/helm/dra-driver-nvidia-gpu``): ``templates/controller.yaml``
is wrapped in ``if .Values.resources.computeDomains.enabled``; the controller serves only ComputeDomains (multi-node
NVLink through IMEX: it creates per-domain DaemonSets and ResourceClaimTemplates), needs the CRDs
``computedomains.resource.nvidia.com`` and ``computedomaincliques.resource.nvidia.com`` (``crds/``) and a ClusterRole
on ``computedomains`` (get/list/watch/update), ``computedomains/status`` (update), ``resourceclaimtemplates``
(get/list/watch/create/update/delete), ``leases``, ``nodes`` (get/list/watch/update) and ``pods``, plus a Role on
``daemonsets`` and ``computedomaincliques`` in its namespace (``templates/rbac-controller.yaml``); the
compute-domain kubelet plugin container and the IMEX daemons come with it. gpuready deploys none of that (whole
GPUs and MIG devices only), so it ships no controller rather than one that fails on the missing CRD and RBAC.

The kubelet plugin runs with the driver's ``TimeSlicingSettings`` feature gate on (alpha, off by default): sharing
is a config on the claim (an opaque ``GpuConfig`` with ``sharing.strategy: TimeSlicing``), and without the gate the
plugin refuses such a claim (v0.4.1: ``"TimeSlicing" is selected as the GPU sharing strategy, but the
"TimeSlicingSettings" feature gate is not enabled``), so pods sharing a time-sliced claim never start.

As the chart does, the kubelet plugin gets its own image as ``IMAGE_NAME`` (a required flag) and the host's driver
root (``/``) at ``/driver-root``, where it loads NVML and finds the files of the CDI specs it writes: NVIDIA's real
plugin exits without either (found on a real-kubelet lab host, tests/lab/test_lab_dra_real.py).
"""

from __future__ import annotations

from typing import Any

from gpuready.spec import GPU_PRESENT_LABEL, Fleet, dra

Manifest = dict[str, Any]
NAME = "nvidia-dra-driver-gpu"
KUBELET_PLUGIN = f"{NAME}-kubelet-plugin"
# Where the chart mounts the driver root (nvidiaDriverRoot, "/" here) in the kubelet plugin's container: the
# plugin's --container-driver-root default.
DRIVER_ROOT_MOUNT = "/driver-root"
# The chart's ``featureGates`` values: what the kubelet plugin gets as --feature-gates.
FEATURE_GATES = {"TimeSlicingSettings": True}
DRA_NODE_SELECTOR = {GPU_PRESENT_LABEL: "true", dra.ALLOCATION_LABEL: "dra"}
# The device plugin's DaemonSet stays off dra nodes (nodes without the label, joined before it existed, keep it).
NOT_DRA_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": dra.ALLOCATION_LABEL, "operator": "NotIn", "values": ["dra"]}]}
            ]
        }
    }
}


def uses_dra(fleet: Fleet) -> bool:
    return any(node.dra for node in fleet.nodes.values())


def device_classes(meta: Any) -> list[Manifest]:
    """``gpu.nvidia.com`` (whole GPUs) and ``mig.nvidia.com`` (MIG devices), as the driver's chart defines them."""
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": meta(name),
            "spec": {"selectors": [{"cel": {"expression": dra.device_class_selector(device_type)}}]},
        }
        for name, device_type in dra.DEVICE_CLASSES.items()
    ]


def rbac(meta: Any, namespace: str) -> list[Manifest]:
    rules = [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims", "deviceclasses"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"], "verbs": ["update", "patch"]},
        {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]},
    ]  # fmt: skip
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(NAME, namespace)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta(NAME), "rules": rules},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta(NAME),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}],
        },
    ]  # fmt: skip


def _host_path(name: str, path: str, kind: str = "DirectoryOrCreate") -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path, "type": kind}}


def kubelet_plugin(daemonset: Any, namespace: str, image: str) -> Manifest:
    """The kubelet plugin on every ``dra`` node: registers with the kubelet, publishes the node's ResourceSlices,
    prepares allocated claims as CDI devices."""
    pod = {
        "serviceAccountName": NAME,
        "nodeSelector": DRA_NODE_SELECTOR,
        "containers": [
            {
                "name": "gpus",
                "image": image,
                "command": ["gpu-kubelet-plugin"],
                "args": ["--feature-gates=" + ",".join(f"{k}={str(v).lower()}" for k, v in FEATURE_GATES.items())],
                "env": [
                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "CDI_ROOT", "value": "/var/run/cdi"},
                    {"name": "NVIDIA_DRIVER_ROOT", "value": "/"},
                    # required by the plugin (--image-name, "Required flag \"image-name\" not set" without it):
                    # the image it starts its MPS control daemons from, i.e. its own, as the chart sets it
                    {"name": "IMAGE_NAME", "value": image},
                ],
                "securityContext": {"privileged": True},
                "volumeMounts": [
                    {"name": "plugins-registry", "mountPath": "/var/lib/kubelet/plugins_registry"},
                    {"name": "plugins", "mountPath": "/var/lib/kubelet/plugins", "mountPropagation": "Bidirectional"},
                    {"name": "cdi", "mountPath": "/var/run/cdi"},
                    # the host's driver root (NVIDIA_DRIVER_ROOT) where the plugin looks for it
                    # (--container-driver-root, /driver-root): it loads NVML from there and writes the CDI specs
                    # of prepared claims from its files. Without it: 'failed to create device library: failed
                    # to locate driver libraries: error locating "libnvidia-ml.so.1"'
                    {"name": "driver-root", "mountPath": DRIVER_ROOT_MOUNT, "readOnly": True,
                     "mountPropagation": "HostToContainer"},
                ],
            }
        ],
        "volumes": [
            _host_path("plugins-registry", "/var/lib/kubelet/plugins_registry"),
            _host_path("plugins", "/var/lib/kubelet/plugins"),
            _host_path("cdi", "/var/run/cdi"),
            _host_path("driver-root", "/", "Directory"),
        ],
    }  # fmt: skip
    manifest: Manifest = daemonset(KUBELET_PLUGIN, namespace, pod)
    return manifest


def render(fleet: Fleet, meta: Any, daemonset: Any, namespace: str, image: str) -> list[Manifest]:
    """The DRA driver's objects in apply order, or none when no pool uses DRA."""
    if not uses_dra(fleet):
        return []
    return [
        *device_classes(meta),
        *rbac(meta, namespace),
        kubelet_plugin(daemonset, namespace, image),
    ]
