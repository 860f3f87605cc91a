"""The lab's node agent: the kubelet of the virtual nodes (no host behind them) that the scale benches and the
cluster tests register, against the real control plane. Lab hosts run the real kubelet instead.

One process for the whole lab, inside the lab's network namespace, with the admin kubeconfig (as kwok's
controller runs). It mirrors pods, nodes, ConfigMaps and RuntimeClasses from the real API server, runs every pod
the real scheduler binds to one of the virtual nodes it registers, decides each container's fate from its image
(:mod:`.runtime`), and serves what the API server dials for logs: the kubelet API. Virtual nodes carry a hardware
profile's GPU capacity and GFD's labels from registration (:mod:`.virtual`); nothing on them imitates NVIDIA's
device plugin, GFD, NFD or DRA driver, which run for real on the lab's hosts.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from .api import Client, Mirror
from .endpoints import Endpoints
from .kubelet import Kubelet
from .runtime import CatalogueRuntime, PodRuntime
from .virtual import VIRTUAL_NET, VirtualNodes

Obj = dict[str, Any]
log = logging.getLogger(__name__)
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
        self.runtime: PodRuntime = CatalogueRuntime()
        self._managed: set[str] = set()
        self.kubelet = Kubelet(self)
        self.virtual = VirtualNodes(self, kubelet_version, node_addresses, heartbeat_s)
        self.endpoints = Endpoints(self, state_dir)

    # what the kubelet asks -----------------------------------------------------------------------------------

    def manages(self, node_name: str) -> bool:
        return node_name in self._managed

    # lifecycle ------------------------------------------------------------------------------------------------

    def start(self, virtual_nodes: int = 0, virtual_profile: str = "dgx-h100") -> None:
        self.store.start()
        self.endpoints.start()
        if virtual_nodes:
            self.add_virtual_nodes(virtual_nodes, virtual_profile)
        self.kubelet.start()

    def add_virtual_nodes(
        self, count: int, profile: str, prefix: str = "virt-node-", timeout: float | None = None
    ) -> list[str]:
        """Register virtual nodes and return once the node lifecycle controller has lifted the not-ready taint a
        new node carries at first (a fraction of a second), so a caller's next pod is never refused by it."""
        names = self.virtual.add(count, profile, prefix)
        self._managed.update(names)
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
        raise ValueError(f"unknown op {op!r}: add_virtual, remove_virtual, stop_heartbeat, resume_heartbeat")

    def stop(self) -> None:
        self.virtual.shutdown()
        self.kubelet.stop()
        self.endpoints.stop()
        self.store.stop()
