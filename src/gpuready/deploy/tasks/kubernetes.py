"""kubelet/kubeadm/kubectl from the Kubernetes repository of the inventory's minor version, pinned and held."""

from __future__ import annotations

from pyinfra.api import deploy

from gpuready.deploy.context import current_node
from gpuready.deploy.facts.host import UnitState
from gpuready.deploy.facts.kubeadm import KubeletJoined
from gpuready.deploy.node_facts import FactSpec, reads
from gpuready.deploy.operations import host as host_ops
from gpuready.deploy.operations import kubeadm
from gpuready.deploy.tasks.repos import install_pinned, task_repository
from gpuready.spec import knobs

UNIT = "kubelet"


@reads
def facts_read() -> list[FactSpec]:
    """The facts kubernetes_packages and join_cluster read (the repository and pins: tasks.repos declares those)."""
    return [(UnitState, {"unit": UNIT}), (KubeletJoined, {})]


@deploy("Kubernetes node packages", data_defaults=knobs.defaults("deploy"))
def kubernetes_packages() -> None:
    node = current_node()
    pins = node.apt_packages["kubernetes"]
    task_repository("kubernetes")
    install_pinned(f"kubelet, kubeadm, kubectl {node.versions.kubernetes}", pins)
    host_ops.service(name="Enable kubelet", unit=UNIT, enabled=True)


@deploy("Join the cluster", data_defaults=knobs.defaults("deploy"))
def join_cluster() -> None:
    node = current_node()
    if node.join.enabled:
        kubeadm.join(name=f"kubeadm join {node.join.api_endpoint}", node=node)
        # a deploy killed after kubeadm wrote kubelet.conf, but before it started the kubelet, leaves a node the
        # rerun takes for joined (the join is a no-op then) with its kubelet stopped: start it (found by
        # tests/lab/test_lab_interrupt.py, whose rejoined node never came back Ready)
        host_ops.service(name="kubelet running", unit=UNIT, running=True)
