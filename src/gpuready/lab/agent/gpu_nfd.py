"""node-feature-discovery on the lab's GPU nodes: its image runs, and GFD's labels reach a Node only through it.

On a real node GFD writes its labels as a features file into ``/etc/kubernetes/node-feature-discovery/features.d``;
nfd-worker's ``local`` source reads it and publishes the node's NodeFeature, and nfd-master turns that into Node
labels. The agent emulates the effect of that path, gated as the real one is: GFD's labels are applied to a Node
only while an nfd-worker pod runs on that node and an nfd-master pod runs somewhere in the cluster (each with its
NFD container running and the pod not being deleted). Without them, GFD still starts and writes its file, and no
label of it appears on the Node.

When NFD goes away, the labels already on the Node stay as they are and are no longer updated: a stopped worker
publishes nothing new, and a stopped master changes no label. (nfd-gc, which gpuready does not deploy, would
delete a gone Node's NodeFeature; nfd-master would then remove the labels it set. Not emulated: they stay.)

The NFD image (``registry.k8s.io/nfd/node-feature-discovery``, any vX.Y.Z tag) runs its programs as long-lived
daemons with a few of upstream's start-up log lines; they need no driver (runc is enough).
"""

from __future__ import annotations

import threading
from typing import Any

from .runtime import ContainerPlan, container_argv, normalize_image

Obj = dict[str, Any]
NFD_REPO = "registry.k8s.io/nfd/node-feature-discovery"
MASTER = "nfd-master"
WORKER = "nfd-worker"
LEADER_LEASE = "nfd-master.nfd.kubernetes.io"


def nfd_role(pod: Obj) -> tuple[str, str] | None:
    """(``nfd-master`` or ``nfd-worker``, container name) of a pod that runs one of them from the NFD image."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        if normalize_image(c.get("image", ""))[0] != NFD_REPO:
            continue
        argv = container_argv(c, [], [WORKER])  # the image CMD the agent gives it (gpu_images.IMAGES)
        prog = argv[0].rsplit("/", 1)[-1] if argv else ""
        if prog in (MASTER, WORKER):
            return prog, c.get("name", "")
    return None


def _running(pod: Obj, container: str) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == container:
            return "running" in (cs.get("state") or {})
    return False


class NfdPods:
    """Which NFD pods run, kept from the pod events the GPU loop sees (no listing of every pod per node sync)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._masters: set[tuple[str, str]] = set()
        self._workers: dict[tuple[str, str], str] = {}  # pod -> its node

    @classmethod
    def from_pods(cls, pods: list[Obj]) -> NfdPods:
        out = cls()
        for pod in pods:
            out.observe(pod)
        return out

    def observe(self, pod: Obj, deleted: bool = False) -> tuple[bool, str | None]:
        """Note a pod's state. Returns (whether a master started or stopped, the node whose worker did)."""
        meta = pod.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        role = nfd_role(pod)
        running = role is not None and not deleted and _running(pod, role[1])
        node = (pod.get("spec") or {}).get("nodeName") or ""
        with self._lock:
            was_master = key in self._masters
            was_worker = self._workers.get(key)
            self._masters.discard(key)
            self._workers.pop(key, None)
            if running and role is not None and role[0] == MASTER:
                self._masters.add(key)
            if running and role is not None and role[0] == WORKER and node:
                self._workers[key] = node
            master_changed = was_master != (key in self._masters)
            now_worker = self._workers.get(key)
        worker_node = None if was_worker == now_worker else (now_worker or was_worker)
        return master_changed, worker_node

    def publishes(self, node: str) -> bool:
        """Whether NFD would carry GFD's features to ``node``'s labels now: a master runs and a worker runs there."""
        with self._lock:
            return bool(self._masters) and node in self._workers.values()


def nfd_plan(prog: str, pod: Obj, tag: str) -> ContainerPlan:
    """nfd-master / nfd-worker start and keep running (the labels are the GPU backend's, gated on these pods)."""
    from .gpu_images import klog  # gpu_images dispatches here: imported when a container starts

    meta = pod.get("metadata") or {}
    node = (pod.get("spec") or {}).get("nodeName", "")
    namespace = meta.get("namespace", "")
    if prog == MASTER:
        logs = klog(
            "I",
            "nfd-master.go:277",
            f'"Node Feature Discovery Master" version="{tag}" nodeName="{node}" namespace="{namespace}"',
        )
        logs += klog("I", "nfd-master.go:1359", '"starting the nfd api controller"')
        logs += klog(
            "I", "leaderelection.go:257", f"attempting to acquire leader lease {namespace}/{LEADER_LEASE}..."
        )
        logs += klog("I", "leaderelection.go:271", f"successfully acquired lease {namespace}/{LEADER_LEASE}")
        return ContainerPlan(logs=logs, exit_code=None)
    if prog == WORKER:
        logs = klog(
            "I",
            "nfd-worker.go:314",
            f'"Node Feature Discovery Worker" version="{tag}" nodeName="{node}" namespace="{namespace}"',
        )
        logs += klog("I", "nfd-worker.go:564", '"starting feature discovery..."')
        logs += klog("I", "nfd-worker.go:577", '"feature discovery completed"')
        return ContainerPlan(logs=logs, exit_code=None)
    if prog in ("nfd-gc", "nfd-topology-updater"):  # in the image too; gpuready deploys neither
        return ContainerPlan(exit_code=None)
    return ContainerPlan(
        exit_code=128,
        reason="StartError",
        message=(
            "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
            "failed: unable to start container process: error during container init: exec: "
            f'"{prog}": executable file not found in $PATH: unknown'
        ),
    )
