"""The lab's node agent: the kubelet of the virtual nodes (no host behind them) that the scale benches and the
cluster tests register, against the real control plane. Lab hosts run the real kubelet instead.

One process for the whole lab, inside the lab's network namespace, with the admin kubeconfig (as kwok's
controller runs). It mirrors pods, nodes, ConfigMaps and RuntimeClasses from the real API server, runs every pod
the real scheduler binds to one of its nodes (the virtual nodes it registers itself, and the stand-in hosts tests
attach), decides each container's fate from that host's real state
(device plugin and GFD from ConfigMap + node label + MIG state, allocation, the nvidia runtime handler,
dcgm-exporter metrics, faults), and serves what the API server dials: the kubelet API for logs and the pods'
ports for the pod proxy.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from .api import Client, Mirror
from .endpoints import Endpoints
from .gpu import ENDPOINT_GRACE_S, GpuSync, attach, attach_virtual
from .gpu_host import HostView
from .kubelet import Kubelet
from .runtime import NodeBackend, ProxyResponse
from .virtual import VIRTUAL_NET, VirtualNodes

Obj = dict[str, Any]
log = logging.getLogger(__name__)
DCGM_PORT = 9400
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


class Agent:
    def __init__(
        self,
        kubeconfig: str,
        state_dir: Path,
        kubelet_version: str,
        node_addresses: str = VIRTUAL_NET,
        heartbeat_s: float = 10.0,
    ) -> None:
        self.api = Client(kubeconfig)
        self.store = Mirror(self.api)
        self._backends: dict[str, NodeBackend] = {}
        self._default_backend = NodeBackend()
        self._managed: set[str] = set()
        self.kubelet = Kubelet(self)
        self.gpu_sync = GpuSync(self)
        self.virtual = VirtualNodes(self, kubelet_version, node_addresses, heartbeat_s)
        self.endpoints = Endpoints(self, state_dir)

    # what the kubelet and GPU logic ask ---------------------------------------------------------------------

    def manages(self, node_name: str) -> bool:
        return node_name in self._managed

    def set_backend(self, node_name: str, backend: NodeBackend) -> None:
        self._backends[node_name] = backend

    def backend(self, node_name: str) -> NodeBackend:
        return self._backends.get(node_name, self._default_backend)

    def node_changed(self, node_name: str) -> None:
        self.backend(node_name).sync_node(self, node_name)

    def serve_pod_port(
        self, pod_ip: str, port: int, method: str, path: str, query: str, body: bytes
    ) -> ProxyResponse | None:
        """A request the API server's pod proxy sent to ``pod_ip:port``, answered by that pod's container."""
        with self.store.lock:
            pods, _ = self.store.list("pods")
        for pod in pods:
            status = pod.get("status") or {}
            node = (pod.get("spec") or {}).get("nodeName", "")
            if status.get("podIP") == pod_ip and status.get("phase") == "Running" and self.manages(node):
                return self.backend(node).proxy(pod, str(port), method, path, query, body)
        return None

    # lifecycle ------------------------------------------------------------------------------------------------

    def start(self, virtual_nodes: int = 0, virtual_profile: str = "dgx-h100") -> None:
        self.store.start()
        self.endpoints.start()
        self.endpoints.ensure_pod_port(DCGM_PORT)
        if virtual_nodes:
            self.add_virtual_nodes(virtual_nodes, virtual_profile)
        self.kubelet.start()
        self.gpu_sync.start()

    def add_virtual_nodes(
        self, count: int, profile: str, prefix: str = "virt-node-", timeout: float | None = None
    ) -> list[str]:
        """Register virtual nodes and return once the node lifecycle controller has lifted the not-ready taint a
        new node carries at first (a fraction of a second), so a caller's next pod is never refused by it."""
        names = self.virtual.add(count, profile, prefix)
        self._managed.update(names)
        attach_virtual(self, self.gpu_sync, names, profile)
        timeout = timeout if timeout is not None else 60.0 + 0.1 * count
        deadline = time.monotonic() + timeout
        for name in names:
            while any(
                t.get("key") == NOT_READY_TAINT
                for t in ((self.store.get("nodes", "", name) or {}).get("spec") or {}).get("taints") or []
            ):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} still carries {NOT_READY_TAINT} after {timeout:.0f}s")
                time.sleep(0.05)
        return names

    def control(self, request: Obj) -> Obj:
        """One request on the control socket (tests and benches shape the agent's virtual fleet with these)."""
        op = request.get("op")
        if op == "add_virtual":
            return {
                "names": self.add_virtual_nodes(
                    int(request["count"]),
                    request.get("profile", "dgx-h100"),
                    request.get("prefix", "virt-node-"),
                )
            }
        if op == "remove_virtual":
            self.virtual.remove(request["names"])
            self._managed.difference_update(request["names"])
            return {}
        if op == "stop_heartbeat":
            self.virtual.stop(request["name"])
            return {}
        if op == "resume_heartbeat":
            self.virtual.resume(request["name"])
            return {}
        if op == "attach_host":  # a virtual node's GPUs, driver and containerd read from a host root's files
            name = request["name"]
            if name not in self._managed:
                raise ValueError(f"{name} is not a node of this agent (add it with add_virtual first)")
            view = HostView(name, Path(request["root"]), Path(request["hardware"]))
            stand_in = request.get("env")  # tests' stand-in tools for containers that look at the host
            attach(self, self.gpu_sync, name, view, float(request.get("grace_s", ENDPOINT_GRACE_S)), stand_in)
            return {}
        raise ValueError(
            f"unknown op {op!r}: add_virtual, remove_virtual, stop_heartbeat, resume_heartbeat, attach_host"
        )

    def stop(self) -> None:
        self.virtual.shutdown()
        self.gpu_sync.stop()
        self.kubelet.stop()
        self.endpoints.stop()
        self.store.stop()
