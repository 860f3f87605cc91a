"""The lab's Kubernetes: the real control plane plus KWOK for the virtual nodes, started and stopped together.

`up` gets the binaries (built or fetched once per version, see binaries), starts the control plane inside the
lab's network namespace on the plan's control-plane address (see controlplane), routes the pod network to it, then
(for a cluster of virtual nodes) starts KWOK (see kwok) with the admin kubeconfig. `down` stops them in the other
order, each by the pid recorded in the lab state. The returned entry is the state's ``apiserver`` entry: what the
inventory and the suite read (endpoint, CA hash, token file, admin kubeconfig) plus KWOK's pid and the virtual
nodes registered at the start.

Addresses inside the namespace, besides the network plan's: the pod network (``POD_SUBNET``, from which the
controller-manager gives each node its podCIDR) and the plan's second /17 (``pod_cidr``: the virtual nodes'
InternalIPs) are routed to ``lo`` as local.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuready.lab.cluster import binaries, controlplane, kube_proxy, kwok
from gpuready.lab.network import LabNetwork

DEFAULT_VERSION = "1.36.3"

Progress = Callable[[str], None]


def up(
    root: Path,
    net: LabNetwork,
    mirror: str,
    progress: Progress,
    *,
    version: str = DEFAULT_VERSION,
    virtual_nodes: int = 0,
    virtual_profile: str = "dgx-h100",
    node_monitor_grace_period: str = "40s",
    virtual: bool = True,
) -> dict[str, Any]:
    """Start the control plane and (unless `virtual` is False: a lab of hosts, whose kubelets are real) KWOK for
    virtual nodes, registering `virtual_nodes` of `virtual_profile`, for the lab whose state dir is `root`; return
    the state entry."""
    kube, _ = binaries.build_kube(version, progress)
    etcd = binaries.ensure_etcd(progress)
    entry = controlplane.start(
        root / "controlplane",
        kube,
        etcd,
        address=net.control_plane,
        netns=net.netns,
        progress=progress,
        node_monitor_grace_period=node_monitor_grace_period,
    )
    try:
        for cidr in (controlplane.POD_SUBNET, net.pod_cidr):
            subprocess.run(
                ["ip", "-n", net.netns, "route", "replace", "local", cidr, "dev", "lo"],
                check=True,
                capture_output=True,
            )
        if not virtual:
            return entry
        entry["kwok"] = kwok.start(
            root / "kwok", net, Path(entry["kubeconfig"]), node_monitor_grace_period, progress
        )
        entry["virtual_nodes"] = []
        if virtual_nodes:
            nodes = virtual_node_registry(entry, net, version)
            try:
                entry["virtual_nodes"] = nodes.add(
                    virtual_nodes, virtual_profile, timeout=60 + virtual_nodes * 0.2
                )
            finally:
                nodes.close()
            progress(f"{virtual_nodes} virtual {virtual_profile} node(s) registered, KWOK reports them Ready")
    except BaseException:
        down(entry)
        raise
    return entry


def virtual_node_registry(
    entry: dict[str, Any], net: LabNetwork, version: str = DEFAULT_VERSION
) -> kwok.VirtualNodes:
    """What adds, stops and removes the cluster's virtual nodes (close it after use)."""
    return kwok.VirtualNodes(Path(entry["kubeconfig"]), f"v{version}", net.pod_cidr)


def down(entry: dict[str, Any]) -> None:
    """Stop KWOK and the real-kubelet lab's kube-proxy, then the control plane; safe on a half-started entry and
    twice."""
    kwok.stop(entry.get("kwok") or {})
    kube_proxy.stop(entry.get("kube_proxy") or {})
    controlplane.stop(entry)
