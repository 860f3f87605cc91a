"""Join state: a node that joined has a kubelet kubeconfig; joining again would fail (and must not be tried)."""

from __future__ import annotations

from pyinfra.api import FactBase


class KubeletJoined(FactBase[str | None]):
    """
    Returns the API server URL in ``/etc/kubernetes/kubelet.conf``, or ``None`` when the node has not joined.

    .. code:: python

        "https://10.0.0.1:6443"
    """

    def command(self) -> str:
        return "test -f /etc/kubernetes/kubelet.conf && sed -n 's/^ *server: *//p' /etc/kubernetes/kubelet.conf || true"

    @staticmethod
    def process(output: list[str]) -> str | None:
        servers = [line.strip() for line in output if line.strip()]
        return servers[0] if servers else None
