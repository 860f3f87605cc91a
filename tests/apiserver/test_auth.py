"""Authentication and authorization: 401 for bad credentials, 403 Status with the real wording for missing rights."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.request
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client
from kubernetes.client.rest import ApiException

from gpuready.lab.apiserver.tls import ca_cert_hash, sign_client_csr

BOOTSTRAP = "abcdef.0123456789abcdef"


def _get(
    sim, path: str, token: str | None = None, cert: tuple[str, str] | None = None
) -> tuple[int, dict | str]:
    ctx = ssl.create_default_context(cafile=str(sim.ca_path))
    if cert:
        ctx.load_cert_chain(*cert)
    req = urllib.request.Request(sim.url + path)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            status, body = resp.status, resp.read()
    except urllib.error.HTTPError as err:
        status, body = err.code, err.read()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode()


def _bootstrap_secret(sim, expiration: str | None = None) -> None:
    data = {"token-id": "abcdef", "token-secret": "0123456789abcdef", "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true", "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token"}  # fmt: skip
    if expiration:
        data["expiration"] = expiration
    sim.create_internal("secrets", {"metadata": {"name": "bootstrap-token-abcdef", "namespace": "kube-system"},
                                    "type": "bootstrap.kubernetes.io/token",
                                    "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}})  # fmt: skip


def test_bad_token_is_401(sim) -> None:
    status, body = _get(sim, "/api/v1/nodes", token="wrong")
    assert status == 401
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "Unauthorized",
                    "reason": "Unauthorized", "code": 401}  # fmt: skip


def test_kubectl_with_bad_token(kubectl) -> None:
    out = kubectl("get", "nodes", "--token", "wrong", check=False)
    assert out.returncode == 1
    # what kubectl 1.37 prints against a real cluster when discovery gets a 401
    assert out.stderr.strip().endswith(
        "error: You must be logged in to the server (the server has asked for the client to provide credentials)"
    )


def test_anonymous_is_403_except_public_info(sim) -> None:
    status, body = _get(sim, "/api/v1/nodes")
    assert status == 403
    assert body["message"] == ('nodes is forbidden: User "system:anonymous" cannot list resource "nodes" in API '
                               'group "" at the cluster scope')  # fmt: skip
    assert body["reason"] == "Forbidden"
    assert _get(sim, "/version")[0] == 200
    status, cm = _get(sim, "/api/v1/namespaces/kube-public/configmaps/cluster-info")
    assert status == 200 and "kubeconfig" in cm["data"]
    assert sim.url in cm["data"]["kubeconfig"]


def test_anonymous_disabled_gives_401(tmp_path: Path) -> None:
    from gpuready.lab.apiserver import ApiServer

    with ApiServer(tmp_path / "s", anonymous_auth=False) as server:
        assert _get(server, "/api/v1/nodes")[0] == 401


def test_bootstrap_token_rights(sim) -> None:
    _bootstrap_secret(sim)
    status, node = _get(sim, "/api/v1/nodes/virt-node-0000", token=BOOTSTRAP)
    assert status == 200 and node["metadata"]["name"] == "virt-node-0000"
    status, body = _get(sim, "/api/v1/namespaces/default/pods", token=BOOTSTRAP)
    assert status == 403
    assert body["message"] == ('pods is forbidden: User "system:bootstrap:abcdef" cannot list resource "pods" in '
                               'API group "" in the namespace "default"')  # fmt: skip
    assert _get(sim, "/apis/certificates.k8s.io/v1/certificatesigningrequests", token=BOOTSTRAP)[0] == 200


def test_wrong_or_expired_bootstrap_token_is_401(sim) -> None:
    _bootstrap_secret(sim, expiration="2020-01-01T00:00:00Z")
    assert _get(sim, "/api/v1/nodes/virt-node-0000", token=BOOTSTRAP)[0] == 401
    assert _get(sim, "/api/v1/nodes/virt-node-0000", token="abcdef.xxxxxxxxxxxxxxxx")[0] == 401


def _node_cert(sim, tmp_path: Path, node: str) -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (x509.CertificateSigningRequestBuilder().subject_name(x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
        x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}")])).sign(key, hashes.SHA256()))  # fmt: skip
    cert = sign_client_csr(sim.pki, csr.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "node.crt").write_bytes(cert)
    (tmp_path / "node.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                          serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))  # fmt: skip
    return str(tmp_path / "node.crt"), str(tmp_path / "node.key")


def test_node_client_certificate_may_update_only_its_own_node(sim, tmp_path: Path) -> None:
    crt, key = _node_cert(sim, tmp_path, "virt-node-0001")
    cfg = client.Configuration(host=sim.url)
    cfg.ssl_ca_cert, cfg.cert_file, cfg.key_file = str(sim.ca_path), crt, key
    with client.ApiClient(cfg) as api:
        v1 = client.CoreV1Api(api)
        assert len(v1.list_node().items) == 3
        v1.patch_node_status("virt-node-0001", {"status": {"allocatable": {"example.com/x": "1"}}})
        with pytest.raises(ApiException) as exc:
            v1.patch_node_status("virt-node-0002", {"status": {"allocatable": {"example.com/x": "1"}}})
        assert exc.value.status == 403
        assert json.loads(exc.value.body)["message"] == (
            'nodes "virt-node-0002" is forbidden: User "system:node:virt-node-0001" cannot patch resource '
            '"nodes/status" in API group "" at the cluster scope')  # fmt: skip
        with pytest.raises(ApiException) as sec:
            v1.create_namespaced_secret("default", {"metadata": {"name": "s"}})
        assert sec.value.status == 403


def test_ca_cert_hash_matches_kubeadm_format(sim) -> None:
    digest = ca_cert_hash(sim.ca_path.read_bytes())
    assert digest.startswith("sha256:") and len(digest) == len("sha256:") + 64
    cert = x509.load_pem_x509_certificate(sim.ca_path.read_bytes())
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "kubernetes"


def test_kubelet_tls_bootstrap_with_a_bootstrap_token(sim, tmp_path: Path) -> None:
    """Bootstrap token -> CSR auto-approved and signed -> the client certificate is the node's credential."""
    import time

    _bootstrap_secret(sim)
    key = ec.generate_private_key(ec.SECP256R1())
    csr_pem = (x509.CertificateSigningRequestBuilder().subject_name(x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
        x509.NameAttribute(NameOID.COMMON_NAME, "system:node:virt-node-0000")])).sign(key, hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM))  # fmt: skip
    cfg = client.Configuration(host=sim.url, api_key={"authorization": f"Bearer {BOOTSTRAP}"})
    cfg.ssl_ca_cert = str(sim.ca_path)
    with client.ApiClient(cfg) as api:
        certs = client.CertificatesV1Api(api)
        created = certs.create_certificate_signing_request({"metadata": {"generateName": "csr-"}, "spec": {
            "request": base64.b64encode(csr_pem).decode(), "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            "usages": ["digital signature", "client auth"], "username": "forged"}})  # fmt: skip
        assert created.spec.username == "system:bootstrap:abcdef"
        assert "system:bootstrappers" in created.spec.groups
        deadline = time.monotonic() + 10
        while True:
            got = certs.read_certificate_signing_request(created.metadata.name)
            if got.status.certificate or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert [(c.type, c.reason) for c in got.status.conditions] == [("Approved", "AutoApproved")]
    (tmp_path / "kubelet.crt").write_bytes(base64.b64decode(got.status.certificate))
    (tmp_path / "kubelet.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                             serialization.PrivateFormat.PKCS8,
                                                             serialization.NoEncryption()))  # fmt: skip
    status, node = _get(sim, "/api/v1/nodes/virt-node-0000", cert=(str(tmp_path / "kubelet.crt"),
                                                                   str(tmp_path / "kubelet.key")))  # fmt: skip
    assert status == 200 and node["metadata"]["name"] == "virt-node-0000"


def test_kubectl_auth_can_i(sim, kubectl) -> None:
    _bootstrap_secret(sim)
    assert kubectl("auth", "can-i", "delete", "nodes").stdout.strip() == "yes"
    answers = {}
    for args in (("list", "pods"), ("get", "nodes/virt-node-0000"), ("create", "certificatesigningrequests"),
                 ("get", "configmaps/cluster-info", "-n", "kube-public"), ("get", "configmaps/x", "-n", "kube-public")):  # fmt: skip
        out = kubectl("--token", BOOTSTRAP, "auth", "can-i", *args, check=False)
        answers[" ".join(args)] = out.stdout.strip()
    assert answers == {"list pods": "no", "get nodes/virt-node-0000": "yes", "create certificatesigningrequests": "yes",
                       "get configmaps/cluster-info -n kube-public": "yes", "get configmaps/x -n kube-public": "no"}  # fmt: skip
