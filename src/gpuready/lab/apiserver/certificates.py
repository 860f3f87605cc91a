"""CertificateSigningRequests: kubeadm's auto-approval of kubelet client CSRs and the CA signer.

This is the TLS-bootstrap half of `kubeadm join`: a kubelet holding a bootstrap token posts a CSR for
`system:node:<name>` / `system:nodes`; it is approved (as kubeadm's RBAC for system:bootstrappers allows) and
signed by the lab CA, and the kubelet then authenticates with that client certificate.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from cryptography import x509
from cryptography.x509.oid import NameOID

from .controllers import _Loop
from .store import Event, now_rfc3339
from .tls import sign_client_csr

if TYPE_CHECKING:
    from .server import ApiServer

Obj = dict[str, Any]
KUBELET_CLIENT = "kubernetes.io/kube-apiserver-client-kubelet"
CLIENT = "kubernetes.io/kube-apiserver-client"


def _subject(csr_pem: bytes) -> tuple[str, list[str]]:
    csr = x509.load_pem_x509_csr(csr_pem)
    cn = [a.value for a in csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    orgs = [str(a.value) for a in csr.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    return (str(cn[0]) if cn else ""), orgs


class CsrController(_Loop):
    keys = ("certificatesigningrequests.certificates.k8s.io",)

    def __init__(self, server: ApiServer) -> None:
        super().__init__(server)
        self._dirty: set[str] = set()

    def observe(self, ev: Event) -> None:
        if ev.type != "DELETED":
            self._dirty.add(ev.obj["metadata"]["name"])

    def reconcile(self) -> None:
        dirty, self._dirty = self._dirty, set()
        for name in sorted(dirty):
            csr = self.store.get(self.keys[0], "", name)
            if csr is not None:
                self._sync(csr)

    def _sync(self, csr: Obj) -> None:
        spec, status = csr.get("spec") or {}, csr.get("status") or {}
        conditions = {c.get("type") for c in status.get("conditions") or []}
        if "Denied" in conditions or "Failed" in conditions or status.get("certificate"):
            return
        try:
            pem = base64.b64decode(spec.get("request", ""))
            cn, orgs = _subject(pem)
        except ValueError:
            return
        if "Approved" not in conditions:
            if self._auto_approvable(spec, cn, orgs):
                self._set(csr, approve=True)
            return
        if spec.get("signerName") in (KUBELET_CLIENT, CLIENT):
            self._set(csr, certificate=base64.b64encode(sign_client_csr(self.server.pki, pem)).decode())

    @staticmethod
    def _auto_approvable(spec: Obj, cn: str, orgs: list[str]) -> bool:
        if (
            spec.get("signerName") != KUBELET_CLIENT
            or orgs != ["system:nodes"]
            or not cn.startswith("system:node:")
        ):
            return False
        groups = spec.get("groups") or []
        renewing_self = spec.get("username") == cn and "system:nodes" in groups
        return "system:bootstrappers" in groups or renewing_self

    def _set(self, csr: Obj, approve: bool = False, certificate: str | None = None) -> None:
        now = now_rfc3339()

        def change(obj: Obj) -> None:
            status = obj.setdefault("status", {})
            if approve:
                status.setdefault("conditions", []).append({
                    "type": "Approved", "status": "True", "reason": "AutoApproved",
                    "message": "Auto approving kubelet client certificate after SubjectAccessReview.",
                    "lastUpdateTime": now, "lastTransitionTime": now})  # fmt: skip
            if certificate:
                status["certificate"] = certificate

        self.store.modify(self.keys[0], "", csr["metadata"]["name"], change)
