"""The kubelet dropping a device plugin's registration, and the remedy an operator applies: restart the plugin.

The kubelet (v1.36.3 ``pkg/kubelet/cm/devicemanager/plugin/v1beta1/handler.go``, ``runClient``) keys plugin
clients by resource name only; when an old plugin's ListAndWatch ends it disconnects *whichever* client is
registered under that name, the new one if the plugin re-registered first (kubernetes/kubernetes#121994, #127803;
the fix, #135437, is not in v1.36.3). The node then keeps the resource's capacity with nothing allocatable, and
the plugin, still Running and Ready, never registers again. NVIDIA's device plugin re-registers quickly by design:
its config-manager sidecar SIGHUPs it for the default config and then for the node's label right after each start,
so a reboot (the rolling upgrade's) or a plugin restart can meet the race on any node.

:class:`PluginRestarts` deletes the device plugin pod of a node whose resources stayed unregistered while the pod
has been Ready for :data:`DROPPED_FOR_S`, a bounded number of times, and says so; :func:`wait_registered` is the
upgrade's wait for a rebooted node's resources before its conformance run. API calls: one Node read per poll, one
pod list when a restart is due.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from gpuready.kube import Cluster

DEVICE_PLUGIN_SELECTOR = "app.kubernetes.io/name=nvidia-device-plugin"  # deploy/addons.py's DaemonSet label
# A resource counts as dropped when it has had nothing allocatable for this long while the node's device plugin
# pod has been Ready for as long: a registration after a start or a SIGHUP takes a second or two (an MPS node's
# plugin first waits for the MPS daemon), and a restarted kubelet shows capacity with 0 allocatable until then.
DROPPED_FOR_S = 20.0
MAX_RESTARTS = 2  # per node and wait: a restarted plugin gets the sidecar's SIGHUPs, and so the race, again
POLL_SECONDS = 2.0


def unregistered(node: client.V1Node, resources: Iterable[str]) -> list[str]:
    """Those of ``resources`` the node has nothing allocatable of (0, or absent once the kubelet's grace ends)."""
    allocatable = (node.status.allocatable if node.status else None) or {}
    return [r for r in resources if str(allocatable.get(r, "0")) == "0"]


@dataclass
class PluginRestarts:
    """Restarts the device plugin of a node whose resources the kubelet dropped, at most ``max_restarts`` times
    per node; ``say`` gets one line per restart naming node, pod, resources and cause."""

    core: client.CoreV1Api
    namespace: str
    say: Callable[[str], None]
    max_restarts: int = MAX_RESTARTS
    clock: Callable[[], float] = time.monotonic
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    dropped_since: dict[str, float] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)

    def observe(self, missing: dict[str, list[str]]) -> list[str]:
        """``missing``: each node's unregistered resources now (a node with none may be left out). Deletes the
        plugin pod of each node missing them for :data:`DROPPED_FOR_S`; returns the deleted pods' names."""
        tick = self.clock()
        self.dropped_since = {n: self.dropped_since.get(n, tick) for n, lost in missing.items() if lost}
        due = {n for n, since in self.dropped_since.items()
               if tick - since >= DROPPED_FOR_S and self.restarts.get(n, 0) < self.max_restarts}  # fmt: skip
        if not due:
            return []
        deleted = []
        wall = self.now()
        pods: list[Any] = self.core.list_namespaced_pod(
            self.namespace, label_selector=DEVICE_PLUGIN_SELECTOR
        ).items
        for pod in pods:
            node = pod.spec.node_name
            if node not in due or pod.metadata.deletion_timestamp or not _ready_for(pod, wall, DROPPED_FOR_S):
                continue
            self.say(f"{node}: {', '.join(missing[node])} in capacity, nothing allocatable for "
                     f"{tick - self.dropped_since[node]:.0f} s while its device plugin {pod.metadata.name} is Ready: "
                     "the kubelet dropped the plugin's registration (kubernetes/kubernetes#121994); restarting the "
                     f"plugin ({self.restarts.get(node, 0) + 1}/{self.max_restarts})")  # fmt: skip
            self.core.delete_namespaced_pod(pod.metadata.name, self.namespace)
            self.restarts[node] = self.restarts.get(node, 0) + 1
            self.dropped_since.pop(node)
            due.discard(node)  # one pod per node and restart
            deleted.append(pod.metadata.name)
        return deleted

    def gave_up(self, node: str) -> bool:
        """Every restart spent and the node's resources dropped again for :data:`DROPPED_FOR_S`: what is left is
        not the race (GPUs the plugin found unhealthy, a plugin that cannot start); the suite says which."""
        since = self.dropped_since.get(node)
        spent = self.restarts.get(node, 0) >= self.max_restarts
        return spent and since is not None and self.clock() - since >= DROPPED_FOR_S


def _ready_for(pod: Any, wall: datetime, seconds: float) -> bool:
    ready = [c for c in pod.status.conditions or [] if c.type == "Ready" and c.status == "True"]
    since = ready[0].last_transition_time if ready else None
    return since is not None and (wall - since).total_seconds() >= seconds


def wait_registered(
    cluster: Cluster,
    node: str,
    resources: Iterable[str],
    namespace: str,
    timeout: float,
    say: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Wait until ``node`` has each of ``resources`` (its expected ``nvidia.com/*``) allocatable, restarting a
    plugin the kubelet dropped (:class:`PluginRestarts`); the resources still unregistered after ``timeout``, or
    once restarting has not helped."""
    wanted = list(resources)
    if not wanted:  # a DRA node: no device plugin
        return []
    restarts = PluginRestarts(cluster.core, namespace, say, clock=clock)
    deadline = clock() + timeout
    while True:
        missing = unregistered(cluster.core.read_node(node), wanted)
        if not missing or clock() >= deadline:
            return missing
        restarts.observe({node: missing})
        if restarts.gave_up(node):
            return missing
        sleep(POLL_SECONDS)
