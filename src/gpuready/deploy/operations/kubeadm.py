"""Joining the cluster with kubeadm, the secret kept off every command line and log."""

from __future__ import annotations

import shlex
from typing import Any

import yaml
from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation

from gpuready.deploy.facts.kubeadm import KubeletJoined
from gpuready.deploy.node_facts import node_fact
from gpuready.spec import NodeSpec

JOIN_DIR = "/etc/kubernetes/gpuready"
JOIN_FILE = f"{JOIN_DIR}/join.yaml"
# What kubeadm join writes before the node has joined (its kubelet-start phase), and its preflight then refuses to
# overwrite: an interrupted join leaves them, and without kubelet.conf they belong to no finished join.
JOIN_LEFTOVERS = ("/etc/kubernetes/pki/ca.crt", "/etc/kubernetes/bootstrap-kubelet.conf")
KUBELET_LOG_LINES = 30  # shown after a failed join


def join_configuration(node: NodeSpec, token: str) -> str:
    """kubeadm's JoinConfiguration (v1beta4) for the node: name, CRI socket, labels and taints from the spec."""
    labels = ",".join(f"{k}={v}" for k, v in sorted(node.node_labels.items()))
    doc = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "JoinConfiguration",
        "discovery": {
            "bootstrapToken": {
                "apiServerEndpoint": node.join.api_endpoint,
                "token": token,
                "caCertHashes": [node.join.ca_cert_hash],
            }
        },
        "nodeRegistration": {
            "name": node.name,
            "criSocket": node.join.cri_socket,
            "taints": [t.as_dict() for t in node.taints],
            "kubeletExtraArgs": [{"name": "node-labels", "value": labels}],
        },
    }
    # lab hosts on the real kubelet only (knobs kube_join_ignore_preflight_errors, kube_join_patches_dir)
    if node.join.ignore_preflight_errors:
        registration: dict[str, Any] = doc["nodeRegistration"]  # type: ignore[assignment]
        registration["ignorePreflightErrors"] = list(node.join.ignore_preflight_errors)
    if node.join.patches_dir:
        doc["patches"] = {"directory": node.join.patches_dir}
    return yaml.safe_dump(doc, sort_keys=False)


@operation()
def join(node: NodeSpec):
    """
    Join the node with ``kubeadm join --config``, unless it has joined already.

    The JoinConfiguration holds the bootstrap token: it reaches the host on the command's standard input (never a
    command-line argument, never an uploaded temp file), lives in a root-only file only while kubeadm runs, and is
    removed whether the join worked, failed or was interrupted: written, used and removed by ONE shell with a trap
    (:func:`join_script`), never by separate commands an interruption could fall between.

    + node: the node's spec (name, endpoint, CA hash, labels, taints)
    """
    joined = node_fact(KubeletJoined)
    if joined:
        host.noop(f"node has joined {joined}")
        return
    config = join_configuration(node, node.join.read_token())
    yield StringCommand("sh", "-c", QuoteString(join_script()), _stdin=config)


def join_script(join_file: str = JOIN_FILE, leftovers: tuple[str, ...] = JOIN_LEFTOVERS) -> str:
    """One shell: write the JoinConfiguration from standard input to a root-only file, run ``kubeadm join`` on it,
    and remove it on every way out (the EXIT trap; HUP, INT and TERM exit through it), so an interrupted deploy or
    a lost SSH session leaves no token on the host. Only SIGKILL of the shell itself could, and a rerun removes
    the file first.

    It runs only on a node that has not joined (no kubelet.conf), so it first removes what an interrupted join left
    (``leftovers``): kubeadm's preflight would refuse them and the rerun would never converge.

    When the join fails, the kubelet's last journal lines follow kubeadm's own message: its usual failure ("timed
    out waiting for the kubelet's healthz") says only where to look, and the deploy's output is where the user
    is looking. They carry no token: the kubelet never sees the JoinConfiguration."""
    path, folder = shlex.quote(join_file), shlex.quote(join_file.rsplit("/", 1)[0] or "/")
    stale = " ".join(shlex.quote(p) for p in leftovers)
    # in a subshell, and SIGPIPE trapped: after a killed deploy the SSH channel is gone, and a shell that wrote to
    # it would die of SIGPIPE without running its EXIT trap, leaving the token (test_lab_interrupt caught that)
    kubelet_log = (
        '( echo "kubeadm join exited $rc; the kubelet\'s last log lines (journalctl -u kubelet):" >&2; '
        f"journalctl -u kubelet -n {KUBELET_LOG_LINES} --no-pager -o cat 2>&1 | sed 's/^/  kubelet: /' >&2 )"
    )
    return (
        f'umask 077 && rm -f {path} {stale} && mkdir -p {folder} && trap "rm -f {path}" EXIT && '
        f"trap 'exit 129' HUP && trap 'exit 130' INT && trap 'exit 141' PIPE && trap 'exit 143' TERM && "
        f"cat > {path} && {{ kubeadm join --config {path} || {{ rc=$?; {kubelet_log}; exit $rc; }}; }}"
    )
