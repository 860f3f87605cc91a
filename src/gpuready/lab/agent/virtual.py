"""Virtual nodes: Ready nodes with a hardware profile and no host behind them, for scale tests.

The agent registers them with the real API server and renews their Leases like a kubelet does (one batch of
renewals per interval), so the real node lifecycle controller treats them like any node; `stop(name)` silences
one to simulate a dead kubelet. Their InternalIPs are in VIRTUAL_NET, which the agent answers for (kubelet API).
"""

from __future__ import annotations

import ipaddress
import threading
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .api import ApiError, object_path

if TYPE_CHECKING:
    from .agent import Agent

VIRTUAL_NET = "10.213.128.0/17"  # the default; the lab passes its plan's range (--node-addresses)

Obj = dict[str, Any]

PROFILES: dict[str, Obj] = {
    "dgx-h100": {
        "capacity": {
            "cpu": "224",
            "memory": "2113389276Ki",
            "ephemeral-storage": "1844284980Ki",
            "pods": "110",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
            "nvidia.com/gpu": "8",
        },
        "labels": {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.count": "8",
            "nvidia.com/gpu.memory": "81559",
            "nvidia.com/gpu.family": "hopper",
            "nvidia.com/gpu.replicas": "1",
            "nvidia.com/gpu.sharing-strategy": "none",
            "node.kubernetes.io/instance-type": "dgx-h100",
        },
    },
    "a100-pcie-4": {
        "capacity": {
            "cpu": "64",
            "memory": "527988860Ki",
            "ephemeral-storage": "921000000Ki",
            "pods": "110",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
            "nvidia.com/gpu": "4",
        },
        "labels": {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": "NVIDIA-A100-PCIE-40GB",
            "nvidia.com/gpu.count": "4",
            "nvidia.com/gpu.memory": "40960",
            "nvidia.com/gpu.family": "ampere",
            "nvidia.com/gpu.replicas": "1",
            "nvidia.com/gpu.sharing-strategy": "none",
            "node.kubernetes.io/instance-type": "a100-pcie-4",
        },
    },
    "cpu": {
        "capacity": {
            "cpu": "16",
            "memory": "65842396Ki",
            "ephemeral-storage": "253869360Ki",
            "pods": "110",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
        },
        "labels": {"node.kubernetes.io/instance-type": "cpu"},
    },
}


def micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def virtual_ip(network: str, index: int) -> str:
    """The index-th InternalIP of the virtual nodes' range (a range the lab routes to the agent)."""
    return str(ipaddress.IPv4Network(network).network_address + index + 1)


def node_object(
    name: str,
    profile: str,
    index: int,
    kubelet_version: str,
    ip: str,
    extra_labels: dict[str, str] | None = None,
) -> Obj:
    p = PROFILES[profile]
    now = now_time()
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "gpuready.lab/virtual": "true",
        **p["labels"],
        **(extra_labels or {}),
    }

    def cond(type_: str, status: str, reason: str, message: str) -> Obj:
        return {
            "type": type_,
            "status": status,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
            "reason": reason,
            "message": message,
        }

    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {},
        "status": {
            "capacity": dict(p["capacity"]),
            "allocatable": dict(p["capacity"]),
            "conditions": [
                cond(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond(
                    "PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"
                ),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"{index:032x}",
                "systemUUID": f"{index:08x}-0000-0000-0000-000000000000",
                "bootID": f"{index:08x}-b007-0000-0000-000000000000",
                "kernelVersion": "6.1.0-28-amd64",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.7.24",
                "kubeletVersion": kubelet_version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


class VirtualNodes:
    def __init__(
        self, server: Agent, kubelet_version: str, network: str = VIRTUAL_NET, interval: float = 10.0
    ) -> None:
        self._network = network
        self._version = kubelet_version
        self._leases: dict[str, Obj] = {}
        self._addresses = 0  # one InternalIP per node ever added, never reused
        self._server = server
        self._names: list[str] = []
        self._silenced: set[str] = set()
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def names(self) -> list[str]:
        return list(self._names)

    def add(self, count: int, profile: str = "dgx-h100", prefix: str = "virt-node-") -> list[str]:
        if profile not in PROFILES:
            raise ValueError(
                f"unknown virtual node profile {profile!r}; known: {', '.join(sorted(PROFILES))}"
            )
        first = sum(n.startswith(prefix) for n in self._names)
        created = []
        for i in range(first, first + count):
            name = f"{prefix}{i:04d}"
            self._addresses += 1
            node = self._create(
                "nodes",
                node_object(
                    name, profile, self._addresses, self._version, virtual_ip(self._network, self._addresses)
                ),
            )
            self._leases[name] = self._create(
                "leases.coordination.k8s.io", _lease(name, node["metadata"]["uid"])
            )
            created.append(name)
        self._names.extend(created)
        if self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="agent-virtual-heartbeat", daemon=True)
            self._thread.start()
        return created

    def _create(self, key: str, obj: Obj) -> Obj:
        try:
            return self._server.store.create(key, obj)
        except ApiError as exc:  # left from an earlier agent: take it over
            if exc.status != 409:
                raise
            meta = obj["metadata"]
            return self._server.store.api.request(
                "GET", object_path(key, meta.get("namespace", ""), meta["name"])
            )

    def remove(self, names: list[str]) -> None:
        """Delete the nodes (their Leases go with them: owner references); their pods are the pod GC's."""
        for name in names:
            if name in self._names:
                self._names.remove(name)
            self._leases.pop(name, None)
            self._server.store.delete("nodes", "", name)

    def stop(self, name: str) -> None:
        """Stop heartbeating one node, as if its kubelet died."""
        self._silenced.add(name)

    def resume(self, name: str) -> None:
        """Heartbeat again and report Ready, as a restarted kubelet does."""
        self._silenced.discard(name)
        self._renew(name, post_ready=True)

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _beat(self) -> None:
        # every `interval` from the start of the last round, as each kubelet renews every 10 s: a round of 1000
        # sequential renewals takes seconds, which must not stretch the period (leases last 40 s)
        next_round = time.monotonic() + self._interval
        while not self._stop.wait(max(0.0, next_round - time.monotonic())):
            next_round = time.monotonic() + self._interval
            for name in list(self._names):
                if name not in self._silenced:
                    self._renew(name)

    def _renew(self, name: str, post_ready: bool = False) -> None:
        store = self._server.store
        stamp = micro_time()
        lease = self._leases.get(name)
        path = object_path("leases.coordination.k8s.io", "kube-node-lease", name)
        try:  # one request per renewal, like a kubelet: PUT the copy it holds, refetch only on a conflict
            if lease is None:
                lease = store.api.request("GET", path)
            lease["spec"]["renewTime"] = stamp
            self._leases[name] = store.api.request("PUT", path, lease)
        except ApiError:
            self._leases.pop(name, None)
        node = store.get("nodes", "", name)
        ready = next(
            (c for c in ((node or {}).get("status") or {}).get("conditions") or [] if c["type"] == "Ready"),
            None,
        )
        if post_ready or (ready is not None and ready.get("status") != "True"):
            now = now_time()

            def change(obj: Obj) -> None:
                for c in obj["status"]["conditions"]:
                    if c["type"] not in KUBELET_CONDITIONS:
                        continue  # another writer's condition (node-problem-detector, gpuready's verdict): not ours
                    c["lastHeartbeatTime"] = now
                    if c["type"] == "Ready" and c["status"] != "True":
                        c.update(
                            {
                                "status": "True",
                                "reason": "KubeletReady",
                                "message": "kubelet is posting ready status",
                                "lastTransitionTime": now,
                            }
                        )
                    elif c["type"] != "Ready" and c["status"] != "False":
                        c.update({"status": "False", "lastTransitionTime": now})

            store.modify("nodes", "", name, change)


# the conditions a kubelet owns and posts; any other type on a Node belongs to whoever wrote it
KUBELET_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")


def _lease(name: str, node_uid: str) -> Obj:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": "kube-node-lease",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}],
        },
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": micro_time()},
    }
