"""A Kubernetes API-server simulator that real kubectl and the official Python client accept.

Entry points: `ApiServer` (embed) and `python -m gpuready.lab.apiserver` (process). Extension points for
emulated GPU behaviour: `NodeBackend` / `PodRuntime` in `runtime.py`.
"""

from .runtime import CatalogueRuntime, ContainerPlan, NodeBackend, PodRuntime, ProxyResponse
from .server import ApiServer

__all__ = ["ApiServer", "CatalogueRuntime", "ContainerPlan", "NodeBackend", "PodRuntime", "ProxyResponse"]
