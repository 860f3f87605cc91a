"""Turn a bare GPU host into a Kubernetes GPU node: ``pyinfra inventory/<env>.py deploys/gpu_node.py``.

Order as the GPU Operator and holodeck do it: host prerequisites, driver, container toolkit, containerd with the
``nvidia`` runtime, Kubernetes packages, join, MIG layout (the package repositories of all of them first, so a
fresh node refreshes its apt lists once); after the driver, the diag layer's tools where ``diag_tools`` asks for them. Every step is a ``@deploy`` in ``gpuready.deploy.tasks`` that can
be used alone; every expectation comes from the fleet spec (``gpuready plan`` shows it).
"""

from gpuready.deploy.tasks.containerd import containerd_runtime
from gpuready.deploy.tasks.diag import diag_tools
from gpuready.deploy.tasks.driver import nvidia_driver
from gpuready.deploy.tasks.host import host_prerequisites
from gpuready.deploy.tasks.kubernetes import join_cluster, kubernetes_packages
from gpuready.deploy.tasks.mig import mig_layout
from gpuready.deploy.tasks.repos import package_repositories
from gpuready.deploy.tasks.toolkit import container_toolkit

host_prerequisites()
package_repositories()  # all of the tasks' repositories, then one apt update for them
nvidia_driver()
diag_tools()
container_toolkit()
containerd_runtime()
kubernetes_packages()
join_cluster()
mig_layout()
