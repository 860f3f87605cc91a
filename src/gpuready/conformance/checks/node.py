"""Node layer: the Kubernetes Node object says what the inventory says.

The checks judge plain API objects (the JSON dicts the API server returns): the suite lists the nodes and the
pods of the whole fleet once per run and hands each check its node's slice, so the cost of this layer grows with
the fleet, not with fleet x checks. Only ``nvidia.com/`` resources and labels are compared: the rest of a Node
belongs to the kubelet and the cluster, not to this inventory.
"""

from __future__ import annotations

from typing import Any

from gpuready.conformance.checks import CannotCheck
from gpuready.spec.kubesyntax import image_repository
from gpuready.spec.model import NodeSpec

Obj = dict[str, Any]
NVIDIA_PREFIX = "nvidia.com/"
# How the add-on pods are recognised, whoever deployed them (gpuready's add-ons deploy or the GPU Operator):
# by the image they run, which both use. GPU feature discovery and the MPS control daemon ship in the device
# plugin's image: a pod running either is not a device plugin.
ADDON_IMAGES = {
    "device plugin": "k8s-device-plugin",
    "dcgm-exporter": "dcgm-exporter",
    "DRA kubelet plugin": "dra-driver",  # dra-driver-nvidia-gpu, and NVIDIA's k8s-dra-driver-gpu before the move
}
# words in a pod's name or its containers' command lines that say it is another program of the same image
NOT_THE_ADDON: dict[str, tuple[str, ...]] = {
    "device plugin": ("feature-discovery", "mps-control-daemon"),
    "dcgm-exporter": (),
    "DRA kubelet plugin": ("controller",),
}


def _need(node: NodeSpec, obj: Obj | None) -> Obj:
    if obj is None:
        raise CannotCheck("no Node object with this name; test_ready reports it")
    return obj


def ready(node: NodeSpec, obj: Obj | None) -> list[str]:
    """The Ready condition is True; otherwise its status, reason and message (what ``kubectl describe`` shows)."""
    if obj is None:
        return ["no Node object with this name: the node has not joined the cluster (kubeadm join, kubelet)"]
    conditions = (obj.get("status") or {}).get("conditions") or []
    cond = next((c for c in conditions if c.get("type") == "Ready"), None)
    if cond is None:
        return ["the Node has no Ready condition yet (the kubelet has not posted its status)"]
    if cond.get("status") == "True":
        return []
    why = cond.get("reason") or "no reason"
    detail = f": {cond['message']}" if cond.get("message") else ""
    return [f"NotReady (Ready = {cond.get('status')}, {why}{detail})"]


def explain(node: NodeSpec, key: str) -> str:
    """Where the expected count of ``key`` comes from, in the inventory's words."""
    s = node.sharing
    gpus = f"{node.gpu_count} GPU{'s' if node.gpu_count != 1 else ''}"
    if s.mode in ("time-slicing", "mps"):
        return f"{s.mode} replicas {s.replicas} x {gpus}"
    if s.mode == "none":
        return f"{gpus}, not shared"
    counts = node.mig_device_counts()
    replicas = f" x {s.mig_replicas} replicas" if s.mig_replicas > 1 else ""
    if s.mig_strategy == "single":
        return f"MIG single: {sum(counts.values())} instances{replicas}"
    profile = key.removeprefix(NVIDIA_PREFIX + "mig-").removesuffix(".shared")
    if profile in counts:
        return f"MIG mixed: {counts[profile]} x {profile} in mig_layout{replicas}"
    whole = len(s.mig_layout) - len(node.mig_enabled_gpus)
    return f"MIG mixed: {whole} GPU(s) with MIG disabled"


def nvidia_resources(obj: Obj, field: str) -> dict[str, int]:
    """``nvidia.com/*`` quantities of ``status.<field>``; a 0 counts as absent (the kubelet keeps the key of a
    resource whose plugin went away, at 0)."""
    out = {}
    for key, value in ((obj.get("status") or {}).get(field) or {}).items():
        if key.startswith(NVIDIA_PREFIX):
            try:
                count = int(str(value))
            except ValueError:
                count = -1
            if count != 0:
                out[key] = count
    return out


def gpu_resources(node: NodeSpec, obj: Obj | None, field: str) -> list[str]:
    """``status.allocatable`` or ``status.capacity``: nvidia.com/* = ``NodeSpec.expected_allocatable``."""
    have = nvidia_resources(_need(node, obj), field)
    listed = ((obj or {}).get("status") or {}).get(field) or {}
    want = node.expected_allocatable
    problems = []
    for key in sorted(set(want) | set(have)):
        if have.get(key, 0) != want.get(key, 0):
            actual = have.get(key, 0 if key in listed else "absent")  # 0: listed, none usable
            expected = want.get(key, 0)
            why = f" ({explain(node, key)})" if key in want else " (the inventory expects none)"
            problems.append(
                f"{field} {key} = {actual}, expected {expected}{why}{_unhealthy(node, obj, field, key)}"
            )
    return problems


def _unhealthy(node: NodeSpec, obj: Obj | None, field: str, key: str) -> str:
    """Why allocatable is short of capacity: the kubelet counts in capacity every device its plugin lists and in
    allocatable only the healthy ones, so the difference is the devices the plugin marked unhealthy (after a
    critical XID, for NVIDIA's plugin until it restarts). Said, because it points at a GPU, not at the plugin.

    A shared GPU is several devices (its replicas). NVIDIA's plugin up to v0.19.3 keeps one device per GPU for its
    XID watch and so takes out one replica of the GPU an XID came from, leaving the others schedulable onto a
    broken GPU (NVIDIA/k8s-device-plugin#1929, fixed by #1930): a drop that is not whole GPUs says so."""
    if field != "allocatable" or obj is None:
        return ""
    capacity = nvidia_resources(obj, "capacity").get(key, 0)
    allocatable = nvidia_resources(obj, "allocatable").get(key, 0)
    if allocatable == 0 < capacity:
        # the kubelet also zeroes allocatable (and keeps capacity a while) when the plugin itself is gone, and when
        # it drops a running plugin's registration: v1.36.3's devicemanager disconnects whichever client holds the
        # resource name when an old plugin's stream ends, so a quick re-registration (NVIDIA's config-manager
        # sidecar SIGHUPs the plugin right after it starts) can lose to the old one (kubernetes/kubernetes#121994)
        return (
            f"; none of the {capacity} in capacity is usable: the device plugin marked every one unhealthy (NVIDIA's "
            "does when it cannot tell which GPU a critical XID came from, or NVML's event wait fails), or it is "
            "gone (node/test_device_plugin_ready tells which), or, with its pod Ready, the kubelet dropped its "
            "registration after a quick restart of the plugin (kubernetes/kubernetes#121994: delete the node's "
            "device plugin pod)"
        )
    if not 0 < allocatable < capacity:
        return ""
    out = f"; {capacity - allocatable} of {capacity} in capacity marked unhealthy by the device plugin"
    shared = str(node.sharing.mode) in ("time-slicing", "mps")
    replicas = node.sharing.replicas if shared else node.sharing.mig_replicas
    if replicas > 1 and (capacity - allocatable) % replicas:
        out += (
            f", not whole GPUs ({replicas} replicas each): the rest of a broken GPU's replicas still take pods "
            "(NVIDIA's plugin up to v0.19.3 takes out one replica per XID, NVIDIA/k8s-device-plugin#1929)"
        )
    return out


def _diff_labels(have: dict[str, str], want: dict[str, str], what: str) -> list[str]:
    problems = []
    for key, value in sorted(want.items()):
        if key not in have:
            problems.append(f"{what} {key} missing, expected {value!r}")
        elif have[key] != value:
            problems.append(f"{what} {key} = {have[key]!r}, expected {value!r}")
    return problems


def gfd_labels(
    node: NodeSpec, obj: Obj | None, pods: list[Obj] | None = None, nfd_masters: list[Obj] | None = None
) -> list[str]:
    """GPU feature discovery's labels (product, count, replicas, sharing strategy, memory, MIG) = spec. When every
    one is missing, says whether node-feature-discovery (``pods``: the node's; ``nfd_masters``: the cluster's
    nfd-master pods) is there to carry them: GFD writes a features file, only NFD makes Node labels of it."""
    labels = (_need(node, obj).get("metadata") or {}).get("labels") or {}
    problems = _diff_labels(labels, node.expected_labels, "GFD label")
    if pods is None or nfd_masters is None or not node.expected_labels:
        return problems
    if any(key in labels for key in node.expected_labels):
        return problems
    return [*problems, nfd_state(node, pods, nfd_masters)]


NFD_IMAGE = (
    "node-feature-discovery"  # registry.k8s.io/nfd/node-feature-discovery: gpuready's and the GPU Operator's
)


def is_nfd(pod: Obj, program: str, node: NodeSpec | None = None) -> bool:
    """Whether ``pod`` runs ``program`` (nfd-master, nfd-worker) from NFD's image (upstream's repository name, or
    the repository of the configured ``nfd_image``: a mirror may rename it)."""
    repos = (NFD_IMAGE, *((image_repository(node.images.nfd),) if node else ()))
    for c in (pod.get("spec") or {}).get("containers") or []:
        words = " ".join([*(c.get("command") or []), *(c.get("args") or [])])
        if program in words and any(r in (c.get("image") or "") for r in repos):
            return True
    return False


def nfd_state(node: NodeSpec, pods: list[Obj], nfd_masters: list[Obj]) -> str:
    """Why GFD's labels cannot reach this node through node-feature-discovery, or that NFD looks in place."""
    through = "GFD's labels reach the Node only through node-feature-discovery"
    workers = [p for p in pods if is_nfd(p, "nfd-worker", node)]
    if not workers:
        return f"no nfd-worker pod on this node: {through} (addons_nfd, or the cluster's own NFD)"
    ready = [p for p in workers if pod_ready(p)]
    if not ready:
        shown = ", ".join(
            f"{p['metadata'].get('namespace')}/{p['metadata']['name']} ({_pod_state(p)})" for p in workers
        )
        return f"nfd-worker pod {shown} not Ready: {through}"
    if not any(pod_ready(p) for p in nfd_masters):
        shown = ", ".join(
            f"{p['metadata'].get('namespace')}/{p['metadata']['name']} ({_pod_state(p)})" for p in nfd_masters
        )
        return f"no Ready nfd-master pod in the cluster{f' ({shown})' if shown else ''}: {through}"
    return (
        f"node-feature-discovery runs (nfd-worker {ready[0]['metadata'].get('namespace')}/"
        f"{ready[0]['metadata']['name']} on this node and a Ready nfd-master): GFD has written no labels for it "
        "(is the gpu-feature-discovery pod on this node Ready?)"
    )


def inventory_labels(node: NodeSpec, obj: Obj | None) -> list[str]:
    """The labels the node joined with: the inventory's ``node_labels`` plus the GPU-node markers."""
    labels = (_need(node, obj).get("metadata") or {}).get("labels") or {}
    return _diff_labels(labels, node.node_labels, "label")


def taints(node: NodeSpec, obj: Obj | None) -> list[str]:
    """Every inventory taint is on the node (others, e.g. the control plane's, are not this inventory's)."""
    have = {
        (t.get("key"), t.get("value") or "", t.get("effect"))
        for t in (_need(node, obj).get("spec") or {}).get("taints") or []
    }
    return [
        f"taint {t} missing (node_taints in the inventory)"
        for t in node.taints
        if (t.key, t.value, t.effect) not in have
    ]


def runtime_class(found: Obj | None) -> list[str]:
    """The RuntimeClass ``nvidia`` exists and names the ``nvidia`` handler."""
    if found is None:
        return ["RuntimeClass nvidia not found (the cluster add-ons deploy creates it)"]
    if found.get("handler") != "nvidia":
        return [f"RuntimeClass nvidia has handler {found.get('handler')!r}, expected 'nvidia'"]
    return []


def _pod_state(pod: Obj) -> str:
    status = pod.get("status") or {}
    parts = [status.get("phase") or "Unknown"]
    for cs in status.get("containerStatuses") or []:
        for state in ("waiting", "terminated"):
            detail = (cs.get("state") or {}).get(state)
            if detail:
                parts.append(f"{cs.get('name')} {state} {detail.get('reason') or ''}".strip())
        if cs.get("restartCount"):
            parts.append(f"{cs.get('name')} restarted {cs['restartCount']}x")
    return ", ".join(parts)


def pod_ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def addon_pod_ready(node: NodeSpec, pods: list[Obj], component: str) -> list[str]:
    """A pod of ``component`` (a key of ADDON_IMAGES) runs on the node and is Ready."""
    other = NOT_THE_ADDON[component]
    # the upstream repository name, or the repository of the node's configured image (a mirror may rename it)
    configured = {
        "device plugin": node.images.device_plugin,
        "DRA kubelet plugin": node.images.dra_driver,
    }.get(component, node.images.dcgm_exporter)
    repos = (ADDON_IMAGES[component], image_repository(configured))

    def runs(pod: Obj) -> bool:
        containers = (pod.get("spec") or {}).get("containers") or []
        words = " ".join(" ".join([*(c.get("command") or []), *(c.get("args") or [])]) for c in containers)
        name = pod["metadata"].get("name", "")
        if any(o in words or o in name for o in other):
            return False
        return any(r in (c.get("image") or "") for c in containers for r in repos)

    mine = [p for p in pods if runs(p)]
    if not mine:
        return [f"no {component} pod on the node (is its DaemonSet deployed and does it select this node?)"]
    if any(pod_ready(p) for p in mine):
        return []
    return [
        f"{component} pod {p['metadata'].get('namespace')}/{p['metadata']['name']} not Ready ({_pod_state(p)})"
        for p in mine
    ]
