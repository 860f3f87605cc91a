"""node-feature-discovery as cluster add-ons: what turns GPU feature discovery's output into Node labels.

GFD does not label Nodes. k8s-device-plugin v0.19.3's GFD publishes its labels as a NodeFeature object of NFD's API
(``nvidia-features-for-<node>`` in its namespace: ``--use-node-feature-api`` defaults to true; the device plugin's
ClusterRole grants it, ``addons.GFD_RULES``); with that option off it writes them as a features file into
``/etc/kubernetes/node-feature-discovery/features.d`` on the host (still mounted, as the chart does), which
nfd-worker's ``local`` source reads and publishes in the worker's own NodeFeature. nfd-master turns every
NodeFeature into Node labels (proved with the real binaries by tests/lab/test_lab_real_nfd.py). Without NFD no
``nvidia.com/gpu.*`` label ever reaches a Node: the GFD-label checks, the product-affinity policy and ``--discover``
all read them. ``addons_nfd = False`` leaves NFD out, for a cluster that runs its own (the GPU Operator installs
one); two masters would fight over the same labels.

Rendered without kustomize or Helm from node-feature-discovery v0.17.3 (kubernetes-sigs/node-feature-discovery, tag
v0.17.3; facts checked by ``tests/unit/test_nfd_addons.py``):

* ``deployment/base/master/master-deployment.yaml`` with ``components/common``: nfd-master, one replica, command
  ``nfd-master``, ``enableServiceLinks: false``, env ``NODE_NAME``/``POD_NAME``/``POD_UID``, the container locked
  down (no privilege escalation, all capabilities dropped, read-only root, non-root), preferring control-plane nodes
  and tolerating their taint, its config (``nfd-master.conf``) from a ConfigMap at
  ``/etc/kubernetes/node-feature-discovery``; resources and gRPC health probes on 8082 as upstream. The Helm chart's
  ``-enable-leader-election`` (``templates/master.yaml``) is kept: its ClusterRole grants the lease it uses.
  gpuready adds the GPU pools' tolerations: a fleet of GPU nodes only (the lab is one) has no other node to run it.
* ``deployment/base/worker-daemonset/worker-daemonset.yaml`` with ``components/common/worker-mounts.yaml``:
  nfd-worker with ``dnsPolicy: ClusterFirstWithHostNet``, the host's ``/boot``, ``/etc/os-release``, ``/sys``,
  ``/usr/lib``, ``/lib``, ``/proc/swaps`` and ``features.d`` read-only under upstream's paths, and its config
  (``nfd-worker.conf``) from a ConfigMap. gpuready runs it on the GPU nodes only, with the node selector and
  tolerations of the other GPU DaemonSets (``addons.gpu_tolerations``: every pool's ``node_taints``), where
  upstream runs it everywhere.
* ``deployment/base/rbac`` as the Helm chart's ``templates/clusterrole.yaml`` and ``role.yaml`` have it (base's
  ``nodefeaturegroup/status`` is a typo the chart fixed to ``nodefeaturegroups/status``): nfd-master reads
  namespaces, patches Nodes and their status, reads NodeFeatures/NodeFeatureRules/NodeFeatureGroups and writes
  the groups' status, and holds the ``nfd-master.nfd.kubernetes.io`` lease; nfd-worker's Role (its namespace)
  writes its NodeFeature and reads pods (its own, for the owner reference).
* The CRDs of ``deployment/base/nfd-crds/nfd-api-crds.yaml`` (``nfd.k8s-sigs.io/v1alpha1``): NodeFeature and
  NodeFeatureGroup (namespaced; the group with a status subresource) and NodeFeatureRule (cluster-scoped). Their
  schemas are trimmed: the top-level fields stay typed, the large nested parts (the ``features`` sets, the rules'
  matchers) are ``x-kubernetes-preserve-unknown-fields``; the schemas stay structural, so the API server accepts
  them and NFD's own objects validate.
* The worker's config enables every feature and label source (``core.featureSources``/``labelSources: [all]``, the
  ``local`` source reading ``features.d`` among them; upstream's default made explicit) every 60 s
  (``sleepInterval``), with the PCI source restricted as NVIDIA's GPU Operator chart configures its NFD
  (``deviceClassWhitelist`` network, display and 3D controllers, ``deviceLabelFields: [vendor]``, so a GPU node gets
  ``feature.node.kubernetes.io/pci-10de.present``). The master's config adds ``nvidia.com`` to ``extraLabelNs`` as
  that chart does.

Left out, as gpuready needs none of it: nfd-gc (it deletes the NodeFeatures of Nodes that are gone: a worker's
features outlive its Node's deletion until the next master resync), nfd-topology-updater and its
NodeResourceTopology CRD, the metrics ports' Services and the Prometheus ServiceMonitor.
"""

from __future__ import annotations

from typing import Any

import yaml

from gpuready.kube import MANAGED_BY

Manifest = dict[str, Any]
MASTER = "nfd-master"
WORKER = "nfd-worker"
GROUP = "nfd.k8s-sigs.io"
API_VERSION = f"{GROUP}/v1alpha1"
FEATURES_D = "/etc/kubernetes/node-feature-discovery/features.d"  # where GFD writes its features file
CONFIG_DIR = "/etc/kubernetes/node-feature-discovery"
METRICS_PORT = 8081
HEALTH_PORT = 8082
LEADER_LEASE = "nfd-master.nfd.kubernetes.io"
CONTROL_PLANE_TOLERATIONS = [
    {"key": "node-role.kubernetes.io/master", "operator": "Equal", "value": "", "effect": "NoSchedule"},
    {
        "key": "node-role.kubernetes.io/control-plane",
        "operator": "Equal",
        "value": "",
        "effect": "NoSchedule",
    },
]
WORKER_CONFIG = {
    "core": {"sleepInterval": "60s", "featureSources": ["all"], "labelSources": ["all"]},
    "sources": {
        "pci": {
            "deviceClassWhitelist": ["02", "0200", "0207", "0300", "0302"],
            "deviceLabelFields": ["vendor"],
        }
    },
}
MASTER_CONFIG = {"extraLabelNs": ["nvidia.com"]}
RBAC = "rbac.authorization.k8s.io"


def _env() -> list[dict[str, Any]]:
    return [
        {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
        for name, path in (
            ("NODE_NAME", "spec.nodeName"),
            ("POD_NAME", "metadata.name"),
            ("POD_UID", "metadata.uid"),
        )
    ]


def _locked_down() -> dict[str, Any]:
    """components/common/securitycontext.yaml, for master and worker alike."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
    }


def _probe(**extra: int) -> dict[str, Any]:
    return {"grpc": {"port": HEALTH_PORT}, **extra}


def _container(
    name: str, image: str, resources: dict[str, Any], probes: dict[str, Any], mounts: list[Any]
) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": [name],
        "args": [f"-metrics={METRICS_PORT}", f"-grpc-health={HEALTH_PORT}"],
        "env": _env(),
        "ports": [
            {"name": "metrics", "containerPort": METRICS_PORT},
            {"name": "health", "containerPort": HEALTH_PORT},
        ],
        "resources": resources,
        "securityContext": _locked_down(),
        **probes,
        "volumeMounts": mounts,
    }


def _config_map(meta: Any, name: str, namespace: str, key: str, config: dict[str, Any]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(name, namespace),
        "data": {key: yaml.safe_dump(config, sort_keys=False)},
    }


def master(meta: Any, namespace: str, image: str, tolerations: list[dict[str, str]]) -> Manifest:
    """nfd-master: one replica, preferring a control-plane node, tolerating it and the GPU pools' taints."""
    labels = {"app.kubernetes.io/name": MASTER}
    container = _container(
        MASTER,
        image,
        {"limits": {"cpu": "300m", "memory": "4Gi"}, "requests": {"cpu": "100m", "memory": "128Mi"}},
        {
            "startupProbe": _probe(failureThreshold=30),
            "livenessProbe": _probe(),
            "readinessProbe": _probe(failureThreshold=10),
        },
        [{"name": "nfd-master-conf", "mountPath": CONFIG_DIR, "readOnly": True}],
    )
    container["args"] = ["-enable-leader-election", *container["args"]]
    prefer = [
        {"weight": 1, "preference": {"matchExpressions": [{"key": key, "operator": "In", "values": [""]}]}}
        for key in ("node-role.kubernetes.io/master", "node-role.kubernetes.io/control-plane")
    ]
    extra = [t for t in tolerations if t not in CONTROL_PLANE_TOLERATIONS]
    pod = {
        "serviceAccountName": MASTER,
        "enableServiceLinks": False,
        "containers": [container],
        "volumes": [
            {
                "name": "nfd-master-conf",
                "configMap": {
                    "name": "nfd-master-conf",
                    "items": [{"key": "nfd-master.conf", "path": "nfd-master.conf"}],
                },
            }
        ],
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": prefer}},
        "tolerations": [*CONTROL_PLANE_TOLERATIONS, *extra],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(MASTER, namespace, labels),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": {**MANAGED_BY, **labels}}, "spec": pod},
        },
    }


# (volume, host path, mount path) of components/common/worker-mounts.yaml
WORKER_HOST_MOUNTS = (
    ("host-boot", "/boot", "/host-boot"),
    ("host-os-release", "/etc/os-release", "/host-etc/os-release"),
    ("host-sys", "/sys", "/host-sys"),
    ("host-usr-lib", "/usr/lib", "/host-usr/lib"),
    ("host-lib", "/lib", "/host-lib"),
    ("host-proc-swaps", "/proc/swaps", "/host-proc/swaps"),
    ("features-d", f"{FEATURES_D}/", f"{FEATURES_D}/"),
)


def worker(
    daemonset: Any,
    namespace: str,
    image: str,
    node_selector: dict[str, str],
    tolerations: list[dict[str, str]],
) -> Manifest:
    """nfd-worker on every GPU node: reads GFD's features file (the ``local`` source) and publishes it."""
    labels = {"app.kubernetes.io/name": WORKER}
    mounts = [{"name": v, "mountPath": m, "readOnly": True} for v, _, m in WORKER_HOST_MOUNTS]
    container = _container(
        WORKER,
        image,
        {"limits": {"cpu": "200m", "memory": "512Mi"}, "requests": {"cpu": "5m", "memory": "64Mi"}},
        {
            "livenessProbe": _probe(initialDelaySeconds=10, periodSeconds=10),
            "readinessProbe": _probe(initialDelaySeconds=5, periodSeconds=10, failureThreshold=10),
        },
        [*mounts, {"name": "nfd-worker-conf", "mountPath": CONFIG_DIR, "readOnly": True}],
    )
    volumes: list[dict[str, Any]] = [{"name": v, "hostPath": {"path": p}} for v, p, _ in WORKER_HOST_MOUNTS]
    volumes.append(
        {
            "name": "nfd-worker-conf",
            "configMap": {
                "name": "nfd-worker-conf",
                "items": [{"key": "nfd-worker.conf", "path": "nfd-worker.conf"}],
            },
        }
    )
    pod = {
        "serviceAccountName": WORKER,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "nodeSelector": node_selector,
        "tolerations": tolerations,
        "containers": [container],
        "volumes": volumes,
    }
    return daemonset(WORKER, namespace, labels, pod)


def _rule(groups: list[str], resources: list[str], verbs: list[str], names: list[str] | None = None) -> Any:
    rule: dict[str, Any] = {"apiGroups": groups, "resources": resources, "verbs": verbs}
    if names:
        rule["resourceNames"] = names
    return rule


MASTER_RULES = [
    _rule([""], ["namespaces"], ["watch", "list"]),
    _rule([""], ["nodes", "nodes/status"], ["get", "patch", "update", "list"]),
    _rule([GROUP], ["nodefeatures", "nodefeaturerules", "nodefeaturegroups"], ["get", "list", "watch"]),
    _rule([GROUP], ["nodefeaturegroups/status"], ["patch", "update"]),
    _rule(["coordination.k8s.io"], ["leases"], ["create"]),
    _rule(["coordination.k8s.io"], ["leases"], ["get", "update"], [LEADER_LEASE]),
]
WORKER_RULES = [
    _rule([GROUP], ["nodefeatures"], ["create", "get", "update", "delete"]),
    _rule([""], ["pods"], ["get"]),
]


def rbac(meta: Any, namespace: str) -> list[Manifest]:
    """ServiceAccounts, nfd-master's ClusterRole and nfd-worker's Role (in the add-ons' namespace), bound."""

    def binding(kind: str, name: str, role_kind: str) -> Manifest:
        return {
            "apiVersion": f"{RBAC}/v1",
            "kind": kind,
            "metadata": meta(name, namespace if kind == "RoleBinding" else None),
            "roleRef": {"apiGroup": RBAC, "kind": role_kind, "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }

    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(MASTER, namespace)},
        {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole", "metadata": meta(MASTER), "rules": MASTER_RULES},
        binding("ClusterRoleBinding", MASTER, "ClusterRole"),
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(WORKER, namespace)},
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "Role",
            "metadata": meta(WORKER, namespace),
            "rules": WORKER_RULES,
        },
        binding("RoleBinding", WORKER, "Role"),
    ]


# --- CRDs ---------------------------------------------------------------------------------------------------------

_STR = {"type": "string"}
_ANY_OBJECT = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _crd(
    kind: str,
    plural: str,
    scope: str,
    spec: dict[str, Any],
    short: str | None = None,
    status: dict[str, Any] | None = None,
) -> Manifest:
    names: dict[str, Any] = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
    }
    if short:
        names["shortNames"] = [short]
    properties: dict[str, Any] = {
        "apiVersion": _STR,
        "kind": _STR,
        "metadata": {"type": "object"},
        "spec": spec,
    }
    if status is not None:
        properties["status"] = status
    version: dict[str, Any] = {
        "name": "v1alpha1",
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": {"type": "object", "required": ["spec"], "properties": properties}},
    }
    if status is not None:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {"group": GROUP, "names": names, "scope": scope, "versions": [version]},
    }


def crds(meta: Any) -> list[Manifest]:
    """NodeFeature, NodeFeatureGroup and NodeFeatureRule (v1alpha1), trimmed as the module says."""
    node_feature = _crd(
        "NodeFeature",
        "nodefeatures",
        "Namespaced",
        {
            "type": "object",
            "properties": {
                # attributes / flags / instances: the raw feature sets (large nested maps upstream)
                "features": _ANY_OBJECT,
                "labels": {"type": "object", "additionalProperties": _STR},
            },
        },
    )
    group = _crd(
        "NodeFeatureGroup",
        "nodefeaturegroups",
        "Namespaced",
        {
            "type": "object",
            "required": ["featureGroupRules"],
            "properties": {"featureGroupRules": {"type": "array", "items": _ANY_OBJECT}},
        },
        short="nfg",
        status={
            "type": "object",
            "properties": {
                "nodes": {
                    "type": "array",
                    "items": {"type": "object", "required": ["name"], "properties": {"name": _STR}},
                    "x-kubernetes-list-map-keys": ["name"],
                    "x-kubernetes-list-type": "map",
                }
            },
        },
    )
    rule = _crd(
        "NodeFeatureRule",
        "nodefeaturerules",
        "Cluster",
        {
            "type": "object",
            "required": ["rules"],
            "properties": {
                "rules": {
                    "type": "array",
                    # a rule: name, labels/taints/annotations/extendedResources/vars and its matchers
                    "items": {**_ANY_OBJECT, "required": ["name"], "properties": {"name": _STR}},
                }
            },
        },
        short="nfr",
    )
    out = [node_feature, group, rule]
    for crd in out:
        crd["metadata"] = meta(crd["metadata"]["name"])
    return out


def render(
    meta: Any,
    daemonset: Any,
    namespace: str,
    image: str,
    node_selector: dict[str, str],
    tolerations: list[dict[str, str]],
) -> list[Manifest]:
    """Every NFD object in apply order: CRDs and RBAC before the configs and the workloads."""
    return [
        *crds(meta),
        *rbac(meta, namespace),
        _config_map(meta, "nfd-master-conf", namespace, "nfd-master.conf", MASTER_CONFIG),
        _config_map(meta, "nfd-worker-conf", namespace, "nfd-worker.conf", WORKER_CONFIG),
        master(meta, namespace, image, tolerations),
        worker(daemonset, namespace, image, node_selector, tolerations),
    ]
