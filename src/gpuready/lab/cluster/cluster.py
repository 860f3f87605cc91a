"""The lab's Kubernetes: the real control plane plus the node agent, started and stopped together.

`up` gets the binaries (built or fetched once per version, see binaries), starts the control plane inside the
lab's network namespace on the plan's control-plane address (see controlplane), routes the node agent's address
ranges to it, then starts the agent (see gpuready.lab.agent) with the admin kubeconfig. `down` stops them in the
other order, each by the pid recorded in the lab state. The returned entry is the state's ``apiserver`` entry:
what the inventory and the suite read (endpoint, CA hash, token file, admin kubeconfig) plus the agent's pid and
control socket.

Addresses inside the namespace, besides the network plan's: the pod network (``POD_SUBNET``, from which the
controller-manager gives each node its podCIDR) and the plan's second /17 (``pod_cidr``: the virtual nodes'
InternalIPs) are routed to ``lo`` as local, so the agent's listeners answer for every address in them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuready.lab import network
from gpuready.lab.cluster import binaries, controlplane, kube_proxy
from gpuready.lab.network import LabNetwork

AGENT_START_TIMEOUT_S = 60.0
DEFAULT_VERSION = "1.36.3"
AGENT_MODULE = "gpuready.lab.agent"

Progress = Callable[[str], None]


class ClusterError(RuntimeError):
    pass


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
    agent: bool = True,
) -> dict[str, Any]:
    """Start the control plane and (unless `agent` is False: a lab of hosts, whose kubelets are real) the node
    agent of virtual nodes for the lab whose state dir is `root`; return the state entry."""
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
        if not agent:
            return entry
        entry["agent"] = start_agent(
            root / "agent",
            net,
            Path(entry["kubeconfig"]),
            f"v{version}",
            progress,
            virtual_nodes=virtual_nodes,
            virtual_profile=virtual_profile,
            heartbeat_s=heartbeat_for(node_monitor_grace_period),
        )
    except BaseException:
        controlplane.stop(entry)
        raise
    return entry


def heartbeat_for(grace_period: str) -> float:
    """Lease renewal interval of virtual nodes: a kubelet's 10 s, or a quarter of a shorter node-monitor grace
    period (tests use a few seconds to see NotReady fast), so a live node is never taken for a dead one."""
    seconds = float(grace_period.removesuffix("s"))
    return min(10.0, seconds / 4)


def down(entry: dict[str, Any]) -> None:
    """Stop the agent and the real-kubelet lab's kube-proxy, then the control plane; safe on a half-started entry
    and twice."""
    stop_agent(entry.get("agent") or {})
    kube_proxy.stop(entry.get("kube_proxy") or {})
    controlplane.stop(entry)


def start_agent(
    state_dir: Path,
    net: LabNetwork,
    kubeconfig: Path,
    kubelet_version: str,
    progress: Progress,
    *,
    virtual_nodes: int = 0,
    virtual_profile: str = "dgx-h100",
    heartbeat_s: float = 10.0,
) -> dict[str, Any]:
    state_dir.mkdir(parents=True, exist_ok=True)
    ready = state_dir / "ready.json"
    ready.unlink(missing_ok=True)
    argv = [
        sys.executable, "-m", AGENT_MODULE, "--kubeconfig", str(kubeconfig), "--state-dir", str(state_dir),
        "--kubelet-version", kubelet_version, "--node-addresses", net.pod_cidr, "--ready-file", str(ready),
        "--virtual-nodes", str(virtual_nodes), "--virtual-profile", virtual_profile, "--heartbeat", str(heartbeat_s),
    ]  # fmt: skip
    log = state_dir / "agent.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            network.exec_argv(net.netns, argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    progress(
        f"node agent started (pid {proc.pid}){f', registering {virtual_nodes} virtual nodes' * bool(virtual_nodes)}"
    )
    deadline = time.monotonic() + AGENT_START_TIMEOUT_S + virtual_nodes * 0.2
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_agent({"pid": proc.pid})
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
            raise ClusterError(f"the lab's node agent did not start (exit {proc.poll()}); {log}:\n{tail}")
        time.sleep(0.1)
    info = json.loads(ready.read_text())
    return {
        "pid": proc.pid,
        "control": info["control"],
        "log": str(log),
        "virtual_nodes": info["virtual_nodes"],
    }


def stop_agent(entry: dict[str, Any], timeout: float = 10.0) -> None:
    """SIGTERM the agent by its pid (if that pid is still the agent), SIGKILL after `timeout`."""
    if entry.get("pid"):
        controlplane.stop_pids({AGENT_MODULE: entry["pid"]}, timeout)
