"""Joining the cluster with kubeadm, the secret kept off every command line and log."""

from __future__ import annotations

import yaml
from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation

from gpuready.deploy.facts.kubeadm import KubeletJoined
from gpuready.deploy.node_facts import node_fact
from gpuready.spec import NodeSpec

JOIN_DIR = "/etc/kubernetes/gpuready"
JOIN_FILE = f"{JOIN_DIR}/join.yaml"


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
    return yaml.safe_dump(doc, sort_keys=False)


@operation()
def join(node: NodeSpec):
    """
    Join the node with ``kubeadm join --config``, unless it has joined already.

    The JoinConfiguration holds the bootstrap token: it reaches the host on the command's standard input (never a
    command-line argument, never an uploaded temp file), lives in a root-only file only while kubeadm runs, and is
    removed whether the join worked or not.

    + node: the node's spec (name, endpoint, CA hash, labels, taints)
    """
    joined = node_fact(KubeletJoined)
    if joined:
        host.noop(f"node has joined {joined}")
        return
    config = join_configuration(node, node.join.read_token())
    write = f"umask 077 && mkdir -p {JOIN_DIR} && cat > {JOIN_FILE}"
    yield StringCommand("sh", "-c", QuoteString(write), _stdin=config)
    run = f"kubeadm join --config {JOIN_FILE}; rc=$?; rm -f {JOIN_FILE}; exit $rc"
    yield StringCommand("sh", "-c", QuoteString(run))
