"""``@deploy`` building blocks that the entry scripts in ``deploys/`` compose, and that a deploy of your own can
import (``from gpuready.deploy.tasks import nvidia_driver``): each carries its knobs' defaults as
``data_defaults``, so it needs no group_data of this repository; the inventory is validated on first use."""

from gpuready.deploy.tasks.containerd import containerd_runtime
from gpuready.deploy.tasks.diag import diag_tools
from gpuready.deploy.tasks.driver import nvidia_driver
from gpuready.deploy.tasks.host import host_prerequisites
from gpuready.deploy.tasks.kubernetes import join_cluster, kubernetes_packages
from gpuready.deploy.tasks.mig import mig_layout
from gpuready.deploy.tasks.toolkit import container_toolkit

__all__ = [
    "container_toolkit",
    "containerd_runtime",
    "diag_tools",
    "host_prerequisites",
    "join_cluster",
    "kubernetes_packages",
    "mig_layout",
    "nvidia_driver",
]
