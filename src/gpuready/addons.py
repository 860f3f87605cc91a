"""The cluster add-ons as Kubernetes objects, rendered from the fleet spec.

The device-plugin ConfigMap holds one config per distinct node configuration (``Fleet.device_plugin_configs``);
each node selects its own with the ``nvidia.com/device-plugin.config`` label it joined with, so the expectations
the conformance suite checks and the configs the plugin runs are the same objects. The keys are derived from the
config's content, so a sharing change is a new key and a label change, which the plugin's config manager reloads
on (it does not watch the content of a key it already uses). Workload shapes follow what
NVIDIA ships upstream (least privilege: no privileged containers where upstream needs none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuready.spec import DEVICE_PLUGIN_CONFIG_LABEL, GPU_PRESENT_LABEL, Fleet

Manifest = dict[str, Any]
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpuready"}
GPU_NODE_SELECTOR = {GPU_PRESENT_LABEL: "true"}
GPU_TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
DEVICE_PLUGIN_CONFIGMAP = "nvidia-device-plugin-configs"
DCGM_PORT = 9400


@dataclass(frozen=True)
class AddonSettings:
    namespace: str = "gpu-system"
    device_plugin_image: str = "nvcr.io/nvidia/k8s-device-plugin:v0.18.0"
    dcgm_exporter_image: str = "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1-4.6.0-ubuntu22.04"
    gpu_resource_quotas: tuple[tuple[str, int], ...] = ()
    priority_classes: tuple[tuple[str, int], ...] = ()

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> AddonSettings:
        return cls(
            namespace=data.get("addons_namespace", cls.namespace),
            device_plugin_image=data.get("device_plugin_image", cls.device_plugin_image),
            dcgm_exporter_image=data.get("dcgm_exporter_image", cls.dcgm_exporter_image),
            gpu_resource_quotas=tuple(sorted((data.get("gpu_resource_quotas") or {}).items())),
            priority_classes=tuple(sorted((data.get("priority_classes") or {}).items())),
        )


def _meta(name: str, namespace: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {**MANAGED_BY, **(labels or {})}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def _daemonset(name: str, namespace: str, pod_spec: dict[str, Any]) -> Manifest:
    labels = {"app.kubernetes.io/name": name}
    spec = {
        "nodeSelector": GPU_NODE_SELECTOR,
        "tolerations": GPU_TOLERATIONS,
        "priorityClassName": "system-node-critical",
        # containerd's default runtime stays runc (nvidia-ctk's default too): without the nvidia handler these
        # pods get no driver libraries and cannot load NVML
        "runtimeClassName": "nvidia",
        **pod_spec,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(name, namespace, labels),
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": {**MANAGED_BY, **labels}}, "spec": spec},
        },
    }


def _no_privilege() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _host_path(name: str, path: str, kind: str | None = None) -> dict[str, Any]:
    host_path: dict[str, Any] = {"path": path}
    if kind:
        host_path["type"] = kind
    return {"name": name, "hostPath": host_path}


def runtime_class() -> Manifest:
    """RuntimeClass ``nvidia``: pods using it land on GPU nodes and tolerate their taint."""
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": _meta("nvidia"),
        "handler": "nvidia",
        "scheduling": {"nodeSelector": GPU_NODE_SELECTOR, "tolerations": GPU_TOLERATIONS},
    }


def device_plugin_configmap(fleet: Fleet, settings: AddonSettings) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(DEVICE_PLUGIN_CONFIGMAP, settings.namespace),
        "data": fleet.device_plugin_configs(),
    }


def _config_env() -> list[dict[str, Any]]:
    """How upstream's config manager picks a node's config: the node's label names a key of the ConfigMap."""
    return [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "NODE_LABEL", "value": DEVICE_PLUGIN_CONFIG_LABEL},
        {"name": "CONFIG_FILE_SRCDIR", "value": "/available-configs"},
        {"name": "CONFIG_FILE_DST", "value": "/config/config.yaml"},
        {"name": "DEFAULT_CONFIG", "value": "default"},
        {"name": "CONFIG_FILE", "value": "/config/config.yaml"},
    ]


def _plugin_pod(
    settings: AddonSettings, name: str, command: list[str], mounts: list[Any], volumes: list[Any]
):
    config_mounts = [
        {"name": "available-configs", "mountPath": "/available-configs"},
        {"name": "config", "mountPath": "/config"},
    ]
    return {
        "serviceAccountName": "nvidia-device-plugin",
        "containers": [
            {
                "name": "config-manager",
                "image": settings.device_plugin_image,
                "command": ["config-manager"],
                "env": [*_config_env(), {"name": "ONESHOT", "value": "false"}],
                "securityContext": _no_privilege(),
                "volumeMounts": config_mounts,
            },
            {
                "name": name,
                "image": settings.device_plugin_image,
                "command": command,
                "env": _config_env(),
                "securityContext": _no_privilege(),
                "volumeMounts": config_mounts + mounts,
            },
        ],
        "volumes": [
            {"name": "available-configs", "configMap": {"name": DEVICE_PLUGIN_CONFIGMAP}},
            {"name": "config", "emptyDir": {}},
            *volumes,
        ],
    }


def device_plugin(settings: AddonSettings) -> Manifest:
    return _daemonset(
        "nvidia-device-plugin",
        settings.namespace,
        _plugin_pod(
            settings,
            "nvidia-device-plugin",
            ["nvidia-device-plugin"],
            [{"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"}],
            [_host_path("device-plugin", "/var/lib/kubelet/device-plugins")],
        ),
    )


def gpu_feature_discovery(settings: AddonSettings) -> Manifest:
    return _daemonset(
        "gpu-feature-discovery",
        settings.namespace,
        _plugin_pod(
            settings,
            "gpu-feature-discovery",
            ["gpu-feature-discovery"],
            [
                {"name": "output-dir", "mountPath": "/etc/kubernetes/node-feature-discovery/features.d"},
                {"name": "host-sys", "mountPath": "/sys", "readOnly": True},
            ],
            [
                _host_path(
                    "output-dir", "/etc/kubernetes/node-feature-discovery/features.d", "DirectoryOrCreate"
                ),
                _host_path("host-sys", "/sys"),
            ],
        ),
    )


def device_plugin_rbac(settings: AddonSettings) -> list[Manifest]:
    """The config manager reads its own Node's labels: get/list/watch nodes, nothing else."""
    name = "nvidia-device-plugin"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, settings.namespace)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta(name),
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(name),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": settings.namespace}],
        },
    ]


def dcgm_exporter(settings: AddonSettings) -> list[Manifest]:
    """dcgm-exporter on :9400 with Kubernetes pod mapping (needs the kubelet's pod-resources socket)."""
    name = "nvidia-dcgm-exporter"
    pod = {
        "containers": [
            {
                "name": "dcgm-exporter",
                "image": settings.dcgm_exporter_image,
                "env": [
                    {"name": "DCGM_EXPORTER_LISTEN", "value": f":{DCGM_PORT}"},
                    {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
                    {"name": "DCGM_EXPORTER_COLLECTORS", "value": "/etc/dcgm-exporter/default-counters.csv"},
                ],
                "ports": [{"name": "metrics", "containerPort": DCGM_PORT}],
                "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}},
                "readinessProbe": {"httpGet": {"path": "/health", "port": DCGM_PORT}},
                "volumeMounts": [{"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources"}],
            }
        ],
        "volumes": [_host_path("pod-resources", "/var/lib/kubelet/pod-resources")],
    }
    labels = {"app.kubernetes.io/name": name}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, settings.namespace, labels),
        "spec": {
            "selector": labels,
            "ports": [{"name": "metrics", "port": DCGM_PORT, "targetPort": DCGM_PORT, "protocol": "TCP"}],
        },
    }
    return [_daemonset(name, settings.namespace, pod), service]


def quotas_and_priorities(settings: AddonSettings) -> list[Manifest]:
    out: list[Manifest] = []
    for namespace, gpus in settings.gpu_resource_quotas:
        out.append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": _meta("gpu-quota", namespace),
                "spec": {"hard": {"requests.nvidia.com/gpu": str(gpus)}},
            }
        )
    for name, value in settings.priority_classes:
        out.append(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": _meta(name),
                "value": value,
                "globalDefault": False,
                "description": "GPU workloads (gpuready)",
            }
        )
    return out


def render_all(fleet: Fleet, settings: AddonSettings) -> list[Manifest]:
    """Every object the add-ons deploy applies, in apply order (namespace and RBAC before workloads)."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(settings.namespace)},
        runtime_class(),
        *device_plugin_rbac(settings),
        device_plugin_configmap(fleet, settings),
        device_plugin(settings),
        gpu_feature_discovery(settings),
        *dcgm_exporter(settings),
        *quotas_and_priorities(settings),
    ]


def prometheus_rules(settings: AddonSettings) -> Manifest:
    """Alert on GPUs allocated to a pod but idle: the costliest waste in a GPU fleet. Apply with your Prometheus."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": _meta("gpuready-gpu-alerts", settings.namespace),
        "spec": {
            "groups": [
                {
                    "name": "gpuready.gpu",
                    "rules": [
                        {
                            "alert": "GPUUnderutilised",
                            "expr": 'avg_over_time(DCGM_FI_DEV_GPU_UTIL{pod!=""}[30m]) < 10',
                            "for": "30m",
                            "labels": {"severity": "warning"},
                            "annotations": {
                                "summary": "GPU {{ $labels.gpu }} on {{ $labels.Hostname }}{{ $labels.hostname }} "
                                "is allocated to {{ $labels.namespace }}/{{ $labels.pod }} but under 10% busy",
                                "description": "Utilisation has stayed below 10% for 30 minutes while a pod "
                                "holds the GPU; free it for other work or right-size the request.",
                            },
                        }
                    ],
                }
            ]
        },
    }
