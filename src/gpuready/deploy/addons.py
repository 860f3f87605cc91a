"""The cluster add-ons as Kubernetes objects, rendered from the fleet spec.

The device-plugin ConfigMap holds one config per distinct node configuration (``Fleet.device_plugin_configs``);
each node selects its own with the ``nvidia.com/device-plugin.config`` label it joined with, so the expectations
the conformance suite checks and the configs the plugin runs are the same objects. The keys are derived from the
config's content, so a sharing change is a new key and a label change, which the plugin's config manager reloads
on (it does not watch the content of a key it already uses). Workload shapes follow what
NVIDIA ships upstream (least privilege: no privileged containers where upstream needs none).

Every GPU DaemonSet (device plugin, GFD, dcgm-exporter, the DRA kubelet plugin) tolerates ``nvidia.com/gpu`` and
every taint of every pool's ``node_taints`` (:func:`gpu_tolerations`), so a pool with an extra taint gets every
add-on. GPU workloads do not inherit those: the RuntimeClass adds only ``nvidia.com/gpu`` (``gpuready plan``
says which pools' taints a workload must tolerate itself).

The device plugin and GFD pods follow NVIDIA's Helm chart (k8s-device-plugin v0.19.3,
``deployments/helm/nvidia-device-plugin/templates/daemonset-device-plugin.yml`` and ``daemonset-gfd.yml``,
``templates/_helpers.tpl``, ``values.yaml``; ``cmd/config-manager/main.go``) where a difference would break a real
node (facts, each checked by ``tests/unit/test_addons.py``):

* With a ConfigMap of configs the chart runs ``config-manager`` twice: an init container with ``ONESHOT=true`` and
  ``SEND_SIGNAL=false`` (the config file exists before the plugin starts, else the plugin fails to open
  ``/config/config.yaml``), and a sidecar with ``ONESHOT=false``, ``SEND_SIGNAL=true``, ``SIGNAL=1`` (SIGHUP) and
  ``PROCESS_TO_SIGNAL`` = the program it serves (``nvidia-device-plugin`` or ``gpu-feature-discovery``); the pod
  has ``shareProcessNamespace: true`` so the sidecar finds that process (``findPidToSignal`` walks /proc and
  matches ``cmdline[0]``). config-manager's own defaults are ``SEND_SIGNAL=true`` and
  ``PROCESS_TO_SIGNAL=nvidia-device-plugin``: without the shared process namespace its first update fails with
  "no process found" and the sidecar exits; GFD's sidecar with the default would signal a process that is not in
  its pod. Both get ``NODE_LABEL=nvidia.com/device-plugin.config``, ``CONFIG_FILE_SRCDIR=/available-configs``,
  ``CONFIG_FILE_DST=/config/config.yaml``, ``FALLBACK_STRATEGIES=named,single`` (``values.yaml``
  ``config.fallbackStrategies``) and an empty ``KUBECONFIG`` (in-cluster).
* The plugin container mounts the host's ``/var/run/cdi`` (``cdi-root``, hostPath ``DirectoryOrCreate``): in CDI
  mode (``deviceListStrategy: cdi-cri``) the plugin writes the CDI spec of the devices it hands out there, and
  containerd resolves the names from the host's directory. It also mounts ``mps-root`` (``/run/nvidia/mps``,
  ``DirectoryOrCreate``) at ``/mps`` and ``mps-shm`` (``/run/nvidia/mps/shm``) at ``/dev/shm``, with
  ``MPS_ROOT=/run/nvidia/mps`` (``values.yaml`` ``mps.root``), and sets ``NVIDIA_VISIBLE_DEVICES=all`` and
  ``NVIDIA_DRIVER_CAPABILITIES=compute,utility``.
* Where a MIG strategy other than none is possible (here: a pool shares by MIG), the plugin and GFD get
  ``NVIDIA_MIG_MONITOR_DEVICES=all`` (``addMigMonitorDevices``) and the ``SYS_ADMIN`` capability instead of
  dropping all (``requiresCapSysAdmin``): the NVIDIA runtime hands the MIG monitor device only to a container with
  CAP_SYS_ADMIN. The sidecars keep all capabilities dropped (they read the ConfigMap, write a symlink in an
  emptyDir and signal a process of the same user), where the chart gives them the plugin's context.

Pools with ``gpu_sharing = "mps"`` get the MPS control daemon (:func:`mps_control_daemon`), as the chart's
``templates/daemonset-mps-control-daemon.yml`` has it: on GPU nodes labelled ``nvidia.com/mps.capable=true`` (GFD
sets it where the node's config shares by MPS), ``hostPID: true`` (``values.yaml`` ``mps.enableHostPID: true``; the
chart then sets no ``shareProcessNamespace``), an init container ``mps-control-daemon mount-shm`` (privileged,
``/mps`` with ``Bidirectional`` propagation: it mounts the shm the MPS clients share), the config-manager init
container and sidecar (the sidecar signals ``/usr/bin/mps-control-daemon``, the chart's value) and the privileged
``mps-control-daemon`` container (run as ``/usr/bin/mps-control-daemon``: the chart's ``command:
[mps-control-daemon]`` gives the process that ``cmdline[0]``, which the sidecar's ``/usr/bin/...`` never matches;
config-manager's one-shot init often reads the node's config label before its informer has listed the node and
picks the default config, so the sidecar must be able to signal the daemon with the right one) with ``/dev/shm`` (mps-shm) and ``/mps`` (mps-root), ``CONFIG_FILE``,
``NVIDIA_VISIBLE_DEVICES=all`` and ``NVIDIA_DRIVER_CAPABILITIES=compute,utility``. The device plugin of an MPS node
waits for the daemon's ``.ready`` file under ``/run/nvidia/mps`` and hands out its pipe and shm: without the
daemon, MPS pools advertise nothing usable. Fleets without an MPS pool get no such DaemonSet.

GFD's labels reach a Node only through node-feature-discovery (:mod:`gpuready.deploy.nfd_addons`: nfd-master, an
nfd-worker on every GPU node with the same node selector and tolerations as GFD, their CRDs and RBAC), rendered
unless ``addons_nfd = False`` (a cluster that runs its own NFD). GFD publishes them as a NodeFeature object
(:data:`GFD_RULES`), which needs NFD's CRDs in the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuready.deploy import dra_addons, nfd_addons
from gpuready.kube import MANAGED_BY
from gpuready.nvidia import mig_layout
from gpuready.spec import DEVICE_PLUGIN_CONFIG_LABEL, GPU_PRESENT_LABEL, Fleet, Images, NodeSpec, knobs
from gpuready.spec.model import DEFAULT_DEVICE_PLUGIN_CONFIG, GPU_TOLERATION, RUNTIME_CLASS

Manifest = dict[str, Any]
GPU_NODE_SELECTOR = {GPU_PRESENT_LABEL: "true"}
GPU_TOLERATIONS = [GPU_TOLERATION]
DEVICE_PLUGIN_CONFIGMAP = "nvidia-device-plugin-configs"
DCGM_PORT = 9400
CDI_ROOT = "/var/run/cdi"  # the chart's cdi-root volume: where the plugin writes its CDI specs in CDI mode
MPS_ROOT = "/run/nvidia/mps"  # values.yaml mps.root
SIGHUP = "1"  # the chart's sidecar SIGNAL


def gpu_tolerations(fleet: Fleet | None = None) -> list[dict[str, str]]:
    """What the GPU DaemonSets tolerate: ``nvidia.com/gpu`` (any value) and each pool's ``node_taints``, taint by
    taint (same key, value and effect), so every add-on lands on every GPU node whatever extra taints a pool has.
    The DaemonSet controller adds the not-ready/unreachable/pressure/unschedulable ones itself."""
    out: list[dict[str, str]] = [dict(t) for t in GPU_TOLERATIONS]
    for node in fleet.nodes.values() if fleet else ():
        for taint in node.taints:
            toleration = {"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}
            if not taint.value:
                toleration = {"key": taint.key, "operator": "Exists", "effect": taint.effect}
            if not any(_tolerates(t, taint) for t in out):
                out.append(toleration)
    return out


def _tolerates(toleration: dict[str, str], taint: Any) -> bool:
    """Kubernetes' ToleratesTaint: key, effect (empty tolerates all) and value (Exists tolerates any)."""
    if toleration.get("effect") and toleration["effect"] != taint.effect:
        return False
    if toleration.get("key") and toleration["key"] != taint.key:
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return toleration.get("value", "") == taint.value


def untolerated_taints(fleet: Fleet, tolerations: list[dict[str, str]]) -> dict[str, list[str]]:
    """Per node, the NoSchedule/NoExecute taints ``tolerations`` leave untolerated (what keeps a pod off it)."""
    out: dict[str, list[str]] = {}
    for name, node in fleet.nodes.items():
        left = [
            str(t)
            for t in node.taints
            if t.effect in ("NoSchedule", "NoExecute") and not any(_tolerates(x, t) for x in tolerations)
        ]
        if left:
            out[name] = left
    return out


def uses_mps(fleet: Fleet) -> bool:
    """A device-plugin pool shares its GPUs by MPS (the DRA driver's MPS is a claim's config, not this daemon)."""
    return any(str(node.sharing.mode) == "mps" and not node.dra for node in fleet.nodes.values())


def uses_mig(fleet: Fleet) -> bool:
    """A pool runs the plugin with a MIG strategy (the chart's ``allPossibleMigStrategiesAreNone`` is false)."""
    return any(node.sharing.mig_strategy != "none" for node in fleet.nodes.values())


@dataclass(frozen=True)
class AddonSettings:
    namespace: str = knobs.KNOBS["addons_namespace"].default
    device_plugin_image: str = Images.device_plugin
    gfd_image: str = Images.gfd
    dcgm_exporter_image: str = Images.dcgm_exporter
    dra_driver_image: str = Images.dra_driver
    nfd: bool = knobs.KNOBS["addons_nfd"].default  # deploy node-feature-discovery
    nfd_image: str = Images.nfd
    gpu_resource_quotas: tuple[tuple[str, int], ...] = ()
    priority_classes: tuple[tuple[str, int], ...] = ()

    @classmethod
    def from_node(cls, node: NodeSpec) -> AddonSettings:
        """The settings of a validated node (fleet-wide knobs: every node gives the same)."""
        k = node.knobs
        return cls(
            namespace=k["addons_namespace"],
            device_plugin_image=node.images.device_plugin,
            gfd_image=node.images.gfd,
            dcgm_exporter_image=node.images.dcgm_exporter,
            dra_driver_image=node.images.dra_driver,
            nfd=k["addons_nfd"],
            nfd_image=node.images.nfd,
            gpu_resource_quotas=tuple(sorted(k["gpu_resource_quotas"].items())),
            priority_classes=tuple(sorted(k["priority_classes"].items())),
        )


def _meta(name: str, namespace: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {**MANAGED_BY, **(labels or {})}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def _daemonset(
    name: str, namespace: str, pod_spec: dict[str, Any], tolerations: list[dict[str, str]] | None = None
) -> Manifest:
    labels = {"app.kubernetes.io/name": name}
    spec = {
        "nodeSelector": GPU_NODE_SELECTOR,
        "tolerations": tolerations if tolerations is not None else GPU_TOLERATIONS,
        "priorityClassName": "system-node-critical",
        # containerd's default runtime stays runc (nvidia-ctk's default too): without the nvidia handler these
        # pods get no driver libraries and cannot load NVML. They request no GPU, so in CDI mode too they need the
        # handler (the deploy writes it in both modes), as the GPU Operator's operands do.
        "runtimeClassName": RUNTIME_CLASS,
        **pod_spec,
    }
    return daemonset_object(name, namespace, labels, spec)


def daemonset_object(name: str, namespace: str, labels: dict[str, str], pod: dict[str, Any]) -> Manifest:
    """The DaemonSet around a pod spec: selected by its labels, rolled one node at a time."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(name, namespace, labels),
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": {**MANAGED_BY, **labels}}, "spec": pod},
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
        "metadata": _meta(RUNTIME_CLASS),
        "handler": RUNTIME_CLASS,
        "scheduling": {"nodeSelector": GPU_NODE_SELECTOR, "tolerations": GPU_TOLERATIONS},
    }


def device_plugin_configmap(fleet: Fleet, settings: AddonSettings) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(DEVICE_PLUGIN_CONFIGMAP, settings.namespace),
        "data": fleet.device_plugin_configs(),
    }


def _config_env(oneshot: bool, signal_process: str) -> list[dict[str, Any]]:
    """config-manager's environment as the chart sets it: the node's label names a key of the ConfigMap; the
    init container (``oneshot``) writes the first config and signals nobody, the sidecar follows the label and
    sends SIGHUP to ``signal_process`` after each change."""
    return [
        {"name": "ONESHOT", "value": str(oneshot).lower()},
        {"name": "KUBECONFIG", "value": ""},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "NODE_LABEL", "value": DEVICE_PLUGIN_CONFIG_LABEL},
        {"name": "CONFIG_FILE_SRCDIR", "value": "/available-configs"},
        {"name": "CONFIG_FILE_DST", "value": "/config/config.yaml"},
        {"name": "DEFAULT_CONFIG", "value": DEFAULT_DEVICE_PLUGIN_CONFIG},
        {"name": "FALLBACK_STRATEGIES", "value": "named,single"},
        {"name": "SEND_SIGNAL", "value": str(not oneshot).lower()},
        {"name": "SIGNAL", "value": "" if oneshot else SIGHUP},
        {"name": "PROCESS_TO_SIGNAL", "value": "" if oneshot else signal_process},
    ]


def _security(mig: bool) -> dict[str, Any]:
    """The chart's ``securityContext`` helper: SYS_ADMIN where MIG is possible (the MIG monitor device), else
    nothing beyond an unprivileged container."""
    return {"capabilities": {"add": ["SYS_ADMIN"]}} if mig else _no_privilege()


def _plugin_pod(
    settings: AddonSettings,
    name: str,
    command: list[str],
    mounts: list[Any],
    volumes: list[Any],
    image: str,
    env: list[dict[str, Any]] | None = None,
    mig: bool = False,
) -> dict[str, Any]:
    config_mounts = [
        {"name": "available-configs", "mountPath": "/available-configs"},
        {"name": "config", "mountPath": "/config"},
    ]
    program = command[0]
    main_env: list[dict[str, Any]] = [
        *(env or []),
        {"name": "CONFIG_FILE", "value": "/config/config.yaml"},
        *([{"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"}] if mig else []),
    ]
    return {
        "serviceAccountName": "nvidia-device-plugin",
        # the sidecar signals the program in the other container: it must see its process
        "shareProcessNamespace": True,
        "initContainers": [
            {
                "name": f"{name}-init",
                "image": image,
                "command": ["config-manager"],
                "env": _config_env(True, ""),
                "securityContext": _no_privilege(),
                "volumeMounts": config_mounts,
            }
        ],
        # The program first, unlike the chart (sidecar first): the kubelet starts a pod's containers in order, and
        # v0.19.3's sidecar exits on "error finding pid: no process found" when it signals a program not yet
        # started, which it does at each start on a node whose config label is not the default (its first read
        # of the label is "", so it applies the default, then the label). Seen after the rolling upgrade's reboot
        # in CI: the sidecar started 1 s before the plugin, crash-looped into CrashLoopBackOff, and the node
        # stayed cordoned on node/test_device_plugin_ready.
        "containers": [
            {
                "name": name,
                "image": image,
                "command": command,
                "env": main_env,
                "securityContext": _security(mig),
                "volumeMounts": config_mounts + mounts,
            },
            {
                "name": "config-manager",
                "image": image,
                "command": ["config-manager"],
                "env": _config_env(False, program),
                "securityContext": _no_privilege(),
                "volumeMounts": config_mounts,
            },
        ],
        "volumes": [
            {"name": "available-configs", "configMap": {"name": DEVICE_PLUGIN_CONFIGMAP}},
            {"name": "config", "emptyDir": {}},
            *volumes,
        ],
    }


def device_plugin(
    settings: AddonSettings, tolerations: list[dict[str, str]] | None = None, mig: bool = False
) -> Manifest:
    """On every GPU node but those of ``gpu_allocation = "dra"`` pools (the DRA driver serves those)."""
    pod = _plugin_pod(
        settings,
        "nvidia-device-plugin",
        [mig_layout.DEVICE_PLUGIN_PROGRAM],
        [
            {"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"},
            {"name": "mps-shm", "mountPath": "/dev/shm"},
            {"name": "mps-root", "mountPath": "/mps"},
            {"name": "cdi-root", "mountPath": CDI_ROOT},
            # the driver's files, for the CDI specs the plugin writes (the chart's nvidiaDriverRoot "/": upstream
            # always mounts it at /driver-root). Without it NVIDIA's real plugin exits in CDI mode: "failed to
            # locate libcuda.so" (found by the lab's real-kubelet test, docs/lab-real-kubelet.md)
            {"name": "driver-root", "mountPath": "/driver-root", "readOnly": True},
        ],
        [
            _host_path("device-plugin", "/var/lib/kubelet/device-plugins"),
            _host_path("mps-root", MPS_ROOT, "DirectoryOrCreate"),
            _host_path("mps-shm", f"{MPS_ROOT}/shm"),
            _host_path("cdi-root", CDI_ROOT, "DirectoryOrCreate"),
            _host_path("driver-root", "/", "Directory"),
        ],
        settings.device_plugin_image,
        env=[
            {"name": "MPS_ROOT", "value": MPS_ROOT},
            {"name": "NVIDIA_DRIVER_ROOT", "value": "/"},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
        ],
        mig=mig,
    )
    return _daemonset(
        "nvidia-device-plugin",
        settings.namespace,
        {**pod, "affinity": dra_addons.NOT_DRA_AFFINITY},
        tolerations,
    )


# GFD exits while NFD's API is missing, so the kubelet backs its restarts off (up to 5 minutes). The pod template
# says who runs NFD, so a deploy that turns addons_nfd on (or off) rolls GFD at once instead of leaving it to its next
# back-off: measured on the lab's real kubelet, GFD's labels reached the Node 173 s after NFD was deployed.
GFD_NFD_ANNOTATION = "gpuready.io/nfd"


def gpu_feature_discovery(
    settings: AddonSettings, tolerations: list[dict[str, str]] | None = None, mig: bool = False
) -> Manifest:
    gfd = _daemonset(
        "gpu-feature-discovery",
        settings.namespace,
        _plugin_pod(
            settings,
            "gpu-feature-discovery",
            [mig_layout.GFD_PROGRAM],
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
            settings.gfd_image,
            env=[
                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            ],
            mig=mig,
        ),
        tolerations,
    )
    gfd["spec"]["template"]["metadata"]["annotations"] = {
        GFD_NFD_ANNOTATION: "gpuready" if settings.nfd else "external"
    }
    return gfd


MPS_CAPABLE_LABEL = "nvidia.com/mps.capable"
MPS_CONTROL_DAEMON = "nvidia-device-plugin-mps-control-daemon"
MPS_DAEMON_PATH = "/usr/bin/mps-control-daemon"  # the chart's PROCESS_TO_SIGNAL


def mps_control_daemon(
    settings: AddonSettings, tolerations: list[dict[str, str]] | None = None, mig: bool = False
) -> Manifest:
    """The MPS control daemon on every node whose config shares by MPS (the chart's daemonset-mps-control-daemon)."""
    pod = _plugin_pod(
        settings,
        "mps-control-daemon",
        ["mps-control-daemon"],
        [{"name": "mps-shm", "mountPath": "/dev/shm"}, {"name": "mps-root", "mountPath": "/mps"}],
        [_host_path("mps-root", MPS_ROOT, "DirectoryOrCreate"), _host_path("mps-shm", f"{MPS_ROOT}/shm")],
        settings.device_plugin_image,
        env=[
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
        ],
        mig=mig,
    )
    # hostPID instead of a shared process namespace (the API refuses both)
    del pod["shareProcessNamespace"]
    pod["hostPID"] = True
    main, sidecar = pod["containers"]  # the program first (_plugin_pod)
    for env in sidecar["env"]:
        if env["name"] == "PROCESS_TO_SIGNAL":
            env["value"] = MPS_DAEMON_PATH
    main["command"] = [MPS_DAEMON_PATH]  # its argv[0], which the sidecar looks for
    main["securityContext"] = {"privileged": True}
    mounts = {
        "name": "mps-control-daemon-mounts",
        "image": settings.device_plugin_image,
        "command": ["mps-control-daemon", "mount-shm"],
        "securityContext": {"privileged": True},
        "volumeMounts": [{"name": "mps-root", "mountPath": "/mps", "mountPropagation": "Bidirectional"}],
    }
    pod["initContainers"] = [mounts, *pod["initContainers"]]
    pod["nodeSelector"] = {**GPU_NODE_SELECTOR, MPS_CAPABLE_LABEL: "true"}
    pod["affinity"] = dra_addons.NOT_DRA_AFFINITY
    return _daemonset(MPS_CONTROL_DAEMON, settings.namespace, pod, tolerations)


# GPU feature discovery publishes its labels as a NodeFeature object (``nvidia-features-for-<node>`` in its own
# namespace) through NFD's API: k8s-device-plugin v0.19.3's ``--use-node-feature-api`` defaults to true
# (cmd/gpu-feature-discovery/main.go), so it writes no features file unless told to; nfd-master makes Node labels of
# every NodeFeature. It reads its pod for the owner reference. The chart's templates/role.yml grants both with GFD.
GFD_RULES = [
    {
        "apiGroups": [nfd_addons.GROUP],
        "resources": ["nodefeatures"],
        "verbs": ["get", "list", "watch", "create", "update"],
    },
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
]


def device_plugin_rbac(settings: AddonSettings) -> list[Manifest]:
    """The config manager reads its own Node's labels (get/list/watch nodes); GFD writes its NodeFeature and reads
    its own pod (:data:`GFD_RULES`), as the chart's role grants them."""
    name = "nvidia-device-plugin"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, settings.namespace)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta(name),
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
                *GFD_RULES,
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(name),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": settings.namespace}],
        },
    ]


def dcgm_exporter(
    settings: AddonSettings, dra: bool = False, tolerations: list[dict[str, str]] | None = None
) -> list[Manifest]:
    """dcgm-exporter on :9400 with Kubernetes pod mapping (needs the kubelet's pod-resources socket); ``dra``: a
    pool uses DRA, so DRA mapping too (``DCGM_EXPORTER_KUBERNETES_ENABLE_DRA``, off by default upstream): a GPU held
    through a ResourceClaim then carries its pod and the claim's ``dra_claim_*`` labels."""
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
                    *([{"name": "DCGM_EXPORTER_KUBERNETES_ENABLE_DRA", "value": "true"}] if dra else []),
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
    return [_daemonset(name, settings.namespace, pod, tolerations), service]


def quotas_and_priorities(settings: AddonSettings) -> list[Manifest]:
    out: list[Manifest] = []
    for namespace, gpus in settings.gpu_resource_quotas:
        # The team's namespace is created when missing, so a quota for a new team works on the first run. It
        # carries no managed-by label: it holds the team's workloads, and pruning must never delete it.
        out.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
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
                "value": value,  # globalDefault stays unset (false): the API server omits a false one
                "description": "GPU workloads (gpuready)",
            }
        )
    return out


# Kinds the prune looks at even when the spec renders none of them: nfd-master's Deployment and nfd-worker's
# Role/RoleBinding once addons_nfd is off (the other NFD kinds are rendered anyway). CustomResourceDefinitions are
# never pruned: deleting one deletes every object of it, and the NFD that replaces gpuready's may use them.
PRUNED_KINDS = (
    ("apps/v1", "Deployment"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
)


def nfd(settings: AddonSettings, tolerations: list[dict[str, str]] | None = None) -> list[Manifest]:
    """node-feature-discovery (what turns GFD's features file into Node labels), or nothing with
    ``addons_nfd = False``; its worker goes where GFD goes."""
    if not settings.nfd:
        return []
    return nfd_addons.render(
        _meta,
        daemonset_object,
        settings.namespace,
        settings.nfd_image,
        GPU_NODE_SELECTOR,
        tolerations if tolerations is not None else GPU_TOLERATIONS,
    )


def render_all(fleet: Fleet, settings: AddonSettings) -> list[Manifest]:
    """Every object the add-ons deploy applies, in apply order (namespace and RBAC before workloads)."""
    tolerations = gpu_tolerations(fleet)
    mig = uses_mig(fleet)

    def daemonset(name: str, namespace: str, pod_spec: dict[str, Any]) -> Manifest:
        return _daemonset(name, namespace, pod_spec, tolerations)

    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(settings.namespace)},
        runtime_class(),
        *device_plugin_rbac(settings),
        device_plugin_configmap(fleet, settings),
        device_plugin(settings, tolerations, mig),
        *([mps_control_daemon(settings, tolerations, mig)] if uses_mps(fleet) else []),
        gpu_feature_discovery(settings, tolerations, mig),
        *nfd(settings, tolerations),
        *dcgm_exporter(settings, dra=dra_addons.uses_dra(fleet), tolerations=tolerations),
        *dra_addons.render(fleet, _meta, daemonset, settings.namespace, settings.dra_driver_image),
        *quotas_and_priorities(settings),
    ]


# The alert rules (``prometheus_rules``). dcgm-exporter labels each series with gpu, UUID, modelName, the exporter's
# Hostname (``hostname`` after 4.5.3-4.8.2; the exporter pod's name unless it runs on the host network) and, with
# Kubernetes mapping on, the namespace/pod holding the GPU (empty, so absent in Prometheus, when none does).
# A ``node`` label, where the scrape config adds one from __meta_kubernetes_pod_node_name, names the node instead.
IDLE_GPU_UTIL_PERCENT = 10  # GPUUnderutilised: a GPU held by a pod under this utilisation ...
IDLE_GPU_FOR = "30m"  # ... at every evaluation for this long
GPU_TEMP_ALERT_C = 85  # GPUTemperatureHigh: above this (data-centre GPUs slow down at about 87-93 C) ...
GPU_TEMP_ALERT_FOR = "5m"  # ... for this long (brief peaks under load are normal)
_WHERE = (
    "GPU {{ $labels.gpu }} ({{ $labels.modelName }}, {{ $labels.UUID }}) on "
    "{{ with $labels.node }}{{ . }}{{ else }}{{ $labels.Hostname }}{{ $labels.hostname }}{{ end }}"
)
_HELD_BY = "{{ with $labels.pod }} held by {{ $labels.namespace }}/{{ . }}{{ end }}"


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_:
        rule["for"] = for_
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {"summary": summary, "description": description}
    return rule


def prometheus_rule_groups() -> list[dict[str, Any]]:
    """The rule groups, as a Prometheus rule file (``groups:``) holds them: ``promtool check rules`` reads this."""
    return [
        {
            "name": "gpuready.gpu",
            "rules": [
                _alert(
                    "GPUUnderutilised",
                    # instant value + `for`: pending from the first idle sample of a pod-held GPU, reset by any
                    # busy one, firing after IDLE_GPU_FOR (an avg_over_time window under `for` would wait up to
                    # twice as long after a busy spell ends)
                    f'DCGM_FI_DEV_GPU_UTIL{{pod!=""}} < {IDLE_GPU_UTIL_PERCENT}',
                    IDLE_GPU_FOR,
                    "warning",
                    f"{_WHERE} is allocated to {{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} but under "
                    f"{IDLE_GPU_UTIL_PERCENT}% busy",
                    f"Utilisation has stayed below {IDLE_GPU_UTIL_PERCENT}% for {IDLE_GPU_FOR} while a pod holds "
                    "the GPU; free it for other work or right-size the request.",
                ),
                _alert(
                    "GPUXidError",
                    "DCGM_FI_DEV_XID_ERRORS > 0",
                    "",
                    "warning",
                    f"{_WHERE} reported XID {{{{ $value }}}}{_HELD_BY}",
                    "The driver logged an XID error (the value is the last XID code). 13, 31 and 43 are usually "
                    "the application's fault; 48, 63, 64, 74, 79, 92, 94 and 95 mean drain the node and reset "
                    "or repair the GPU. `gpuready check` (gpu layer) names every XID since boot.",
                ),
                _alert(
                    "GPURowRemapFailure",
                    "DCGM_FI_DEV_ROW_REMAP_FAILURE > 0",
                    "",
                    "critical",
                    f"{_WHERE} failed to remap a memory row{_HELD_BY}",
                    "Row remapping failed (no spare rows left): the GPU's memory is no longer reliable. Drain "
                    "the node and have the GPU repaired.",
                ),
                _alert(
                    "GPUUncorrectableRemappedRows",
                    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS > 0",
                    "",
                    "warning",
                    f"{_WHERE} has {{{{ $value }}}} rows remapped after uncorrectable ECC errors{_HELD_BY}",
                    "Uncorrectable ECC errors made the GPU remap memory rows; a remap takes effect after a GPU "
                    "reset. Drain the node and reset the GPU if `nvidia-smi -q` shows a remap pending (the "
                    "conformance suite's gpu layer checks it).",
                ),
                _alert(
                    "GPUTemperatureHigh",
                    f"DCGM_FI_DEV_GPU_TEMP > {GPU_TEMP_ALERT_C}",
                    GPU_TEMP_ALERT_FOR,
                    "warning",
                    f"{_WHERE} is at {{{{ $value }}}} C, above {GPU_TEMP_ALERT_C} C{_HELD_BY}",
                    f"The GPU has been hotter than {GPU_TEMP_ALERT_C} C for {GPU_TEMP_ALERT_FOR}; it will "
                    "throttle its clocks near its slowdown temperature. Check airflow, fans and the "
                    "node's cooling.",
                ),
            ],
        }
    ]


def prometheus_rules(settings: AddonSettings) -> Manifest:
    """The GPU alerts as a PrometheusRule (Prometheus Operator; its ``spec`` is a plain rule file): GPUs allocated
    to a pod but idle (the costliest waste in a GPU fleet), XID errors, row remapping, temperature."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": _meta("gpuready-gpu-alerts", settings.namespace),
        "spec": {"groups": prometheus_rule_groups()},
    }


ALERTS = (
    "reports/gpu-alerts.yaml"  # relative to where pyinfra runs: the alert rules for the site's Prometheus
)


def alert_rules_text(rules: Manifest) -> str:
    """The alert rules file's content (:func:`prometheus_rules` as YAML). The add-ons deploy writes it with an
    operation (``cluster_objects.local_file``), never when the deploy file is loaded: ``pyinfra --dry`` writes
    nothing, and a second run with the same rules changes nothing."""
    import yaml

    return yaml.safe_dump(rules, sort_keys=False)
