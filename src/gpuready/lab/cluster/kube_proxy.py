"""The real kube-proxy of a real-kubelet lab: Services (the ``kubernetes`` one first) reach their endpoints.

Pods on real lab hosts talk to the API server the way every in-cluster client does: ``KUBERNETES_SERVICE_HOST``
= the ``kubernetes`` Service's ClusterIP (10.96.0.1:443). Without a Service proxy that address leads nowhere and
NVIDIA's config-manager, nfd-master/worker, the DRA kubelet plugin and the suite's own Job fail to list anything
("dial tcp 10.96.0.1:443: connect: network is unreachable"). So the lab runs the real kube-proxy, built from the
same ``k8s.io/kubernetes`` module as the kubelet (:func:`gpuready.lab.kubelet_build.ensure_kubelet` with
``KUBE_PROXY_PACKAGE``), in nftables mode, with this machine's ``nft`` (Debian's ``nftables``).

Lab-only, and said so: the hosts share one network namespace, so the lab runs **one** kube-proxy in that
namespace (as a real node runs one in its own), started beside the control plane and stopped by its pid at
``down``; it reads the cluster with the admin kubeconfig (a real node's kube-proxy uses its ServiceAccount and
``system:node-proxier``). Its conntrack settings are all zero so that it writes no ``/proc/sys`` tunable (this
machine's must never change); nftables mode needs none of iptables mode's sysctls.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from gpuready.lab import network
from gpuready.lab.cluster.controlplane import POD_SUBNET, stop_pids

COMMAND = "kube-proxy"
EARLY_EXIT_S = 2.0  # a kube-proxy that cannot start (flags, binary, kubeconfig) exits within this
TABLE = ("ip", "kube-proxy")  # the nftables table kube-proxy owns (pkg/proxy/nftables: kubeProxyTable)


def arguments(kubeconfig: Path, node_name: str) -> list[str]:
    """kube-proxy's settings as flags, not a ``--config`` file: with a file it opens an inotify watcher on it
    (``Options.initWatcher``), and this machine's 128 inotify instances are shared by every lab host's systemd,
    kubelet and containerd (a second real lab beside the session lab ran out: "failed complete: too many open
    files"). nftables mode, the lab's pod network as the cluster CIDR (pod traffic is not masqueraded), no
    conntrack tunable written (0 leaves each as it is), metrics on loopback only."""
    return [
        "--proxy-mode=nftables",
        f"--cluster-cidr={POD_SUBNET}",
        f"--hostname-override={node_name}",
        f"--kubeconfig={kubeconfig}",
        "--metrics-bind-address=127.0.0.1:10249",
        "--conntrack-max-per-core=0",
        "--conntrack-min=0",
        "--conntrack-tcp-timeout-established=0s",
        "--conntrack-tcp-timeout-close-wait=0s",
        "--conntrack-udp-timeout=0s",
        "--conntrack-udp-timeout-stream=0s",
    ]


def start(state_dir: Path, netns: str, binary: Path, kubeconfig: Path, node_name: str) -> dict[str, Any]:
    """Start kube-proxy in the lab's namespace; returns the state entry (pid, log) that :func:`stop` takes.

    It does not wait for kube-proxy's nftables table: at lab up no Node exists yet, and kube-proxy first waits 30 s
    for its own (``NewNodeManager`` in pkg/proxy/node.go, unconditionally) before it programs anything, which made
    that wait half of a three-host `lab up`. The table is there long before the node deploy has joined a kubelet
    and a pod needs a Service; :func:`programmed` (shown by `lab status`) tells whether it is. A kube-proxy that
    exits at once (a bad flag, a missing binary) still fails the `up` here, with its log."""
    state_dir.mkdir(parents=True, exist_ok=True)
    log = state_dir / "kube-proxy.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            network.exec_argv(netns, [str(binary), *arguments(kubeconfig, node_name)]),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    entry = {"pid": proc.pid, "log": str(log)}
    try:
        proc.wait(timeout=EARLY_EXIT_S)
    except subprocess.TimeoutExpired:
        return entry
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
    raise RuntimeError(f"kube-proxy exited {proc.returncode} at start; {log}:\n{tail}")


def programmed(netns: str) -> bool:
    """Whether kube-proxy has written its nftables table in the lab's namespace."""
    probe = network.exec_argv(netns, ["nft", "list", "table", *TABLE])
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def stop(entry: dict[str, Any], timeout: float = 10.0) -> None:
    """SIGTERM kube-proxy by its pid (if that pid is still kube-proxy), SIGKILL after `timeout`."""
    if entry.get("pid"):
        stop_pids({COMMAND: entry["pid"]}, timeout)
