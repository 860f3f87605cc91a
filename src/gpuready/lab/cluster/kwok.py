"""KWOK (``sigs.k8s.io/kwok``), Kubernetes' own simulator of nodes and pods, is the kubelet of the lab's virtual
nodes: Ready GPU nodes with no host behind them, for the cluster tests and the scale benches (issue #27: the lab's
own imitation of a kubelet, the node agent, is retired for it).

How it is used, read from v0.7.0's source (``pkg/kwok/cmd/root.go``, ``kustomize/stage/``):

* ``kwok`` with the admin kubeconfig runs KWOK's own stages: a managed node without ``Ready=True`` is initialized
  Ready (``node-initialize``, which keeps the capacity, addresses and nodeInfo the Node was created with), its
  Lease is renewed every quarter of ``--node-lease-duration-seconds`` and its status posted every 10 minutes
  (``node-heartbeat-with-lease``); with no pod stages configured, a pod bound to a managed node gets Running and
  Ready with an IP from ``--cidr`` (``pod-ready``), a Job's pod completes (``pod-complete``), a deleted pod goes at
  once (``pod-delete``).
* The node stages are passed with ``--config`` (``NODE_STAGES``, read from the module's ``kustomize/stage/node``
  at build time): v0.7.0's default picks them with ``getDefaultNodeStages(NodeLeaseDurationSeconds == 0)``, so a
  lease duration gets the lease-less heartbeat, a status patch per node every 20 to 25 s (44 PATCH nodes/s on 1000
  nodes, measured with bench/apiserver.py) where a kubelet with a Lease posts every 5 minutes.
* It manages only the nodes with the annotation ``kwok.x-k8s.io/node: fake``
  (``--manage-nodes-with-annotation-selector``), so the lab's real-kubelet hosts are never its.
* It renews a node's Lease only while it holds it: a Lease another holder renewed and that has not expired is left
  alone (``tryAcquireOrRenew``), and retried every renew interval. So :meth:`VirtualNodes.stop` hands the Lease to
  a holder that never renews it, as a dead kubelet stops renewing: the real node lifecycle controller marks the node
  NotReady after its grace period, and KWOK writes nothing to a node whose Lease it does not hold.
  :meth:`VirtualNodes.resume` deletes the Lease: KWOK creates it again and, the node not being Ready, initializes
  it Ready (``node-initialize``), as a restarted kubelet reports.
* Pods on virtual nodes run no containers: no logs, no exit codes. Whatever runs for real (the device plugin, GFD,
  the DRA driver, the suite's workloads) runs on the lab's hosts under the real kubelet.
* Built with ``go install sigs.k8s.io/kwok/cmd/kwok@v<version>`` (pure Go, ``CGO_ENABLED=0``; its version is a
  constant in ``pkg/consts``, no ``-X`` stamp): about 75 s cold on 2 cores with the module downloads. Cached at
  ``<cache>/kwok-v<version>/bin/kwok``.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuready.lab import network
from gpuready.lab.gobuild import Progress, download_module, ensure_built, go_build
from gpuready.lab.network import LabNetwork
from gpuready.lab.state import cache_dir

MODULE = "sigs.k8s.io/kwok"
VERSION = "0.7.0"
COMMAND = "kwok"
ANNOTATION = "kwok.x-k8s.io/node"
MANAGED = "fake"
POD_CIDR = "10.112.0.0/16"  # virtual pods' IPs (nothing routes to them: they run nothing)
# KWOK's own node stages, from its module (kustomize/stage/node/...), written beside the binary
NODE_STAGES = ("fast/node-initialize.yaml", "heartbeat-with-lease/node-heartbeat-with-lease.yaml")
LEASE_NAMESPACE = "kube-node-lease"
STOPPED_HOLDER = "gpuready-lab/stopped-kubelet"  # holds a stopped node's Lease and never renews it

Obj = dict[str, Any]

# Hardware profiles of virtual nodes: the capacity and GFD labels a node of that kind registers with.
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


# --- the binary -------------------------------------------------------------------------------------------------


def kwok_cache(version: str = VERSION, cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / f"kwok-v{version}"


def cached_kwok(version: str = VERSION, cache: Path | None = None) -> Path | None:
    """The built binary of `version` (its node stages beside it), or None when the cache has none."""
    path = kwok_cache(version, cache) / "bin" / COMMAND
    return path if path.is_file() and stages_file(path).is_file() else None


def stages_file(binary: Path) -> Path:
    return binary.parent.parent / "node-stages.yaml"


def ensure_kwok(progress: Progress, version: str = VERSION, cache: Path | None = None) -> Path:
    """KWOK's controller of `version`, built once into the cache."""
    target = kwok_cache(version, cache)

    def build(tmp: Path) -> None:
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "", "GOBIN": str(tmp / "bin")}
        module = download_module(MODULE, f"v{version}", tmp, env)
        stages = [(module.dir / "kustomize/stage/node" / name).read_text() for name in NODE_STAGES]
        (tmp / "node-stages.yaml").write_text("---\n".join(stages))
        progress(f"KWOK v{version}: compiling {MODULE}/cmd/kwok (about a minute cold)")
        go_build([f"{MODULE}/cmd/{COMMAND}@v{version}"], tmp, f"go install of KWOK v{version}", env, "-s -w",
                 verb="install")  # fmt: skip

    found, _ = ensure_built(
        target,
        target.parent / f".kwok-v{version}.lock",
        lambda: cached_kwok(version, cache),
        build,
        f"KWOK v{version}",
        progress,
    )
    return found


# --- the controller ----------------------------------------------------------------------------------------------


def lease_seconds(grace_period: str) -> int:
    """The virtual nodes' Lease duration: a kubelet's 40 s, or the node-monitor grace period where that is shorter
    (tests use a few seconds to see NotReady fast). KWOK renews every quarter of it, so a live node is never
    taken for a dead one."""
    return max(1, min(40, int(float(grace_period.removesuffix("s")))))


def start(state_dir: Path, net: LabNetwork, kubeconfig: Path, grace_period: str, progress: Progress) -> Obj:
    """Run KWOK in the lab's network namespace (where the API server listens) for the nodes annotated as its;
    returns the state entry (pid, log)."""
    binary = ensure_kwok(progress)
    state_dir.mkdir(parents=True, exist_ok=True)
    log = state_dir / "kwok.log"
    argv = [
        str(binary), "--kubeconfig", str(kubeconfig), "--config", str(stages_file(binary)),
        "--manage-nodes-with-annotation-selector", f"{ANNOTATION}={MANAGED}",
        "--node-lease-duration-seconds", str(lease_seconds(grace_period)), "--cidr", POD_CIDR,
        "-v", "WARN",  # not a line per Lease renewal
    ]  # fmt: skip
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            network.exec_argv(net.netns, argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    progress(f"KWOK v{VERSION} started (pid {proc.pid}) for the virtual nodes; log {log}")
    return {"pid": proc.pid, "log": str(log)}


def stop(entry: Obj, timeout: float = 10.0) -> None:
    """SIGTERM KWOK by its pid (if that pid is still KWOK), SIGKILL after `timeout`."""
    from gpuready.lab.cluster.controlplane import stop_pids

    if entry.get("pid"):
        stop_pids({COMMAND: entry["pid"]}, timeout)


# --- virtual nodes -----------------------------------------------------------------------------------------------


def node_object(name: str, profile: str, index: int, kubelet_version: str, address: str) -> Obj:
    """A Node of `profile` as a kubelet registers it (capacity, GFD's labels, nodeInfo), annotated as KWOK's.
    Its conditions are KWOK's to write (``node-initialize``)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown virtual node profile {profile!r}; known: {', '.join(sorted(PROFILES))}")
    p = PROFILES[profile]
    labels = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "gpuready.lab/virtual": "true",
        **p["labels"],
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {ANNOTATION: MANAGED}},
        "spec": {},
        "status": {
            "capacity": dict(p["capacity"]),
            "allocatable": dict(p["capacity"]),
            "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
            "nodeInfo": {
                # not all digits: KWOK's node-initialize template writes the value unquoted into YAML
                "machineID": f"ab{index:030x}",
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
    """Registers virtual nodes for KWOK through the API server, with the kubernetes client."""

    def __init__(self, kubeconfig: Path, kubelet_version: str, addresses: str) -> None:
        from kubernetes import client, config

        self._api = config.new_client_from_config(config_file=str(kubeconfig))
        self._core = client.CoreV1Api(self._api)
        self._version = kubelet_version
        self._network = ipaddress.IPv4Network(addresses)
        self._count = 0  # one InternalIP per node ever added, never reused

    def close(self) -> None:
        self._api.close()

    def add(
        self, count: int, profile: str = "dgx-h100", prefix: str = "virt-node-", timeout: float = 60.0
    ) -> list[str]:
        """Create `count` nodes named ``<prefix>NNNN`` and return their names once KWOK reports them Ready."""
        names = []
        for i in range(count):
            self._count += 1
            name = f"{prefix}{i:04d}"
            address = str(self._network.network_address + self._count)
            self._core.create_node(node_object(name, profile, self._count, self._version, address))  # type: ignore[arg-type]
            names.append(name)
        self._wait(
            lambda: self._ready(names), timeout, f"KWOK to report {len(names)} node(s) {prefix}* Ready"
        )
        return names

    def remove(self, names: list[str]) -> None:
        """Delete the nodes (their Leases go with them: owner references); their pods are the pod GC's."""
        for name in names:
            self._core.delete_node(name)

    def stop(self, name: str) -> None:
        """Stop the node's heartbeats, as if its kubelet died: its Lease goes to a holder that never renews it."""
        from kubernetes import client

        now = datetime.now(UTC)
        spec = {"holderIdentity": STOPPED_HOLDER, "leaseDurationSeconds": 86400, "renewTime": now}
        client.CoordinationV1Api(self._api).patch_namespaced_lease(name, LEASE_NAMESPACE, {"spec": spec})

    def resume(self, name: str) -> None:
        """Heartbeat again and report Ready, as a restarted kubelet does: KWOK makes the Lease anew."""
        from kubernetes import client

        client.CoordinationV1Api(self._api).delete_namespaced_lease(name, LEASE_NAMESPACE)

    def _ready(self, names: list[str]) -> bool:
        """Every one of `names` has Ready=True (one list, raw JSON: a bench registers a thousand)."""
        raw: Any = self._core.list_node(_preload_content=False)
        ready = {
            n["metadata"]["name"]
            for n in json.loads(raw.data)["items"]
            if any(
                c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions") or []
            )
        }
        return set(names) <= ready

    @staticmethod
    def _wait(done: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.2)
