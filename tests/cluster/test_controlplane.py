"""The real control plane as kubeadm would start it: each test is a behaviour a real cluster has and a simulator may
lack (authorization, admission, the bootstrap signer, server-side apply), plus start/stop mechanics."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import ssl
import stat
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from polling import wait_for

from gpuready.lab.cluster import controlplane
from gpuready.lab.cluster.binaries import KubeBinaries, PrerequisiteError

from .conftest import VERSION, Kubectl, binaries, etc_kubernetes


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in (b"Z", b"X")


def _cmdlines_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and proc.name != str(os.getpid()):
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline and _alive(int(proc.name)):
                found.append(f"{proc.name}: {cmdline}")
    return found


@pytest.fixture
def namespace(api: client.ApiClient) -> Any:
    """Make a unique namespace (optionally labelled) once its default ServiceAccount exists (pods need it)."""
    core = client.CoreV1Api(api)
    made: list[str] = []

    def make(labels: dict[str, str] | None = None) -> str:
        name = f"t-{uuid.uuid4().hex[:8]}"
        core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
        made.append(name)
        wait_for(
            lambda: any(
                sa.metadata.name == "default" for sa in core.list_namespaced_service_account(name).items
            ),
            what=f"the serviceaccount controller to create {name}/default",
        )
        return name

    yield make
    for name in made:
        core.delete_namespace(name)


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "registry.k8s.io/pause:3.10", **spec.pop("container", {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container], **spec},
    }


def test_server_is_the_pinned_version(kubectl: Kubectl) -> None:
    version = json.loads(kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == f"v{VERSION}"


def test_admin_conf_is_kubeadm_cluster_admins_not_system_masters(kubectl: Kubectl) -> None:
    """kubeadm's admin.conf since 1.29: authorised only through the kubeadm:cluster-admins ClusterRoleBinding."""
    user = json.loads(kubectl("auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    assert "kubeadm:cluster-admins" in user["groups"]
    assert "system:masters" not in user["groups"]
    assert kubectl("auth", "can-i", "*", "*").stdout.strip() == "yes"


def test_rbac_denies_a_plain_service_account(kubectl: Kubectl) -> None:
    answer = kubectl("auth", "can-i", "create", "pods", "--as=system:serviceaccount:x:default", check=False)
    assert answer.stdout.strip() == "no"
    assert answer.returncode == 1


def test_resource_quota_caps_gpu_requests(api: client.ApiClient, namespace: Any) -> None:
    core = client.CoreV1Api(api)
    ns = namespace()
    core.create_namespaced_resource_quota(
        ns, {"metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "1"}}}
    )
    # The admission plugin refuses everything until the quota controller has written the quota's status.
    wait_for(lambda: core.read_namespaced_resource_quota("gpus", ns).status.hard or {}, what="quota status")
    gpu = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}
    core.create_namespaced_pod(ns, _pod("first", container=gpu))
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(ns, _pod("second", container=gpu))
    assert refused.value.status == 403
    assert "exceeded quota" in refused.value.body


def test_pod_security_enforces_restricted(kubectl: Kubectl, namespace: Any) -> None:
    ns = namespace({"pod-security.kubernetes.io/enforce": "restricted"})
    privileged = _pod("privileged", container={"securityContext": {"privileged": True}})
    refused = kubectl("-n", ns, "create", "-f", "-", input=json.dumps(privileged), check=False)
    assert refused.returncode != 0
    assert "(Forbidden)" in refused.stderr
    assert 'violates PodSecurity "restricted:latest"' in refused.stderr
    restricted = _pod(
        "restricted",
        securityContext={
            "runAsNonRoot": True,
            "runAsUser": 65534,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        container={"securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}},
    )
    kubectl("-n", ns, "create", "-f", "-", input=json.dumps(restricted))


def test_cluster_info_is_signed_and_public_as_kubeadm_join_expects(control_plane: dict[str, Any]) -> None:
    """kubeadm join's discovery: read cluster-info anonymously, trusting nothing yet; check the bootstrap signer's
    JWS with the token secret; pin the CA it carries with --discovery-token-ca-cert-hash."""
    token_id, token_secret = Path(control_plane["join_token_file"]).read_text().strip().split(".")
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    url = f"{control_plane['url']}/api/v1/namespaces/kube-public/configmaps/cluster-info"
    with urllib.request.urlopen(url, context=unverified, timeout=10) as response:  # no credentials: anonymous
        assert response.status == 200
        data = json.load(response)["data"]
    header, empty, signature = data[f"jws-kubeconfig-{token_id}"].split(".")
    assert empty == ""  # a detached JWS
    signed = f"{header}.{_b64url(data['kubeconfig'].encode())}".encode()
    assert signature == _b64url(hmac.new(token_secret.encode(), signed, hashlib.sha256).digest())
    cluster = yaml.safe_load(data["kubeconfig"])["clusters"][0]["cluster"]
    assert cluster["server"] == control_plane["url"]
    ca = base64.b64decode(cluster["certificate-authority-data"])
    assert controlplane.ca_cert_hash(ca) == control_plane["ca_cert_hash"]


def test_server_side_apply_conflict_between_field_managers(
    kubectl: Kubectl, api: client.ApiClient, namespace: Any
) -> None:
    ns = namespace()
    owned = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owned"}, "data": {"color": "red"}}
    kubectl("-n", ns, "apply", "--server-side", "--field-manager=alice", "-f", "-", input=json.dumps(owned))
    with pytest.raises(ApiException) as conflict:
        client.CoreV1Api(api).patch_namespaced_config_map(
            "owned",
            ns,
            {**owned, "data": {"color": "blue"}},
            field_manager="bob",
            _content_type="application/apply-patch+yaml",
        )
    assert conflict.value.status == 409
    assert "alice" in conflict.value.body


def test_secrets_stay_off_command_lines_and_in_0600_files(control_plane: dict[str, Any]) -> None:
    token_file = Path(control_plane["join_token_file"])
    token = token_file.read_text().strip()
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    config = Path(control_plane["kubeconfig"]).parent / "kubeadm.yaml"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert token in config.read_text()
    assert _cmdlines_mentioning(token.split(".")[1]) == []
    for log in Path(control_plane["log"]).iterdir():
        assert token.split(".")[1] not in log.read_text(errors="replace"), log


def test_machine_etc_kubernetes_is_left_alone(
    control_plane: dict[str, Any], etc_before: list[str] | None
) -> None:
    assert etc_kubernetes() == etc_before


def test_a_second_control_plane_runs_beside_and_stop_leaves_nothing(
    control_plane: dict[str, Any], kubectl: Kubectl, tmp_path: Path, own_network
) -> None:
    kube, etcd = binaries()
    second = controlplane.start(
        tmp_path / "second",
        kube,
        etcd,
        address=own_network.control_plane,
        netns=own_network.netns,
        progress=lambda line: None,
    )
    try:
        # each in a network namespace of its own, on its own subnet
        assert second["netns"] == own_network.netns != control_plane["netns"]
        assert second["ca_cert_hash"] != control_plane["ca_cert_hash"]
        answer = kubectl("--kubeconfig", second["kubeconfig"], "get", "--raw", "/readyz")
        assert answer.stdout.strip() == "ok"
        assert set(second["pids"]) == set(controlplane.COMPONENTS)
        assert all(_alive(pid) for pid in second["pids"].values())
    finally:
        controlplane.stop(second)
    assert [c for c, pid in second["pids"].items() if _alive(pid)] == []
    assert _cmdlines_mentioning(str(tmp_path / "second")) == []
    controlplane.stop(second)  # twice is fine
    kubectl("get", "--raw", "/readyz")  # and the first one never noticed


def test_a_loopback_address_is_refused_before_anything_starts(tmp_path: Path) -> None:
    kube, etcd = binaries()
    with pytest.raises(controlplane.ControlPlaneError) as refused:
        controlplane.start(tmp_path, kube, etcd, address="127.0.0.1", progress=lambda line: None)
    assert "cannot advertise the loopback address 127.0.0.1" in str(refused.value)
    assert not (tmp_path / "etc").exists()


def test_a_component_that_exits_is_named_with_its_log_and_nothing_is_left(
    tmp_path: Path, own_network
) -> None:
    kube, _ = binaries()
    fake_etcd = tmp_path / "etcd"
    fake_etcd.write_text(
        '#!/bin/sh\ncase "$1" in --version) echo "etcd Version: 3.6.16"; exit 0;; esac\n'
        'echo "simulated etcd failure: the disk is on fire" >&2\nexit 3\n'
    )
    fake_etcd.chmod(0o755)
    state_dir = tmp_path / "broken"
    with pytest.raises(controlplane.ControlPlaneError) as failed:
        controlplane.start(
            state_dir,
            kube,
            fake_etcd,
            address=own_network.control_plane,
            netns=own_network.netns,
            progress=lambda line: None,
        )
    assert "etcd exited (status 3)" in str(failed.value)
    assert "the disk is on fire" in str(failed.value)
    assert _cmdlines_mentioning(str(state_dir)) == []


def test_missing_binaries_say_what_builds_them(tmp_path: Path) -> None:
    with pytest.raises(PrerequisiteError) as missing:
        controlplane.start(
            tmp_path, KubeBinaries("1.36.3", tmp_path / "bin"), tmp_path / "etcd", address="10.0.0.1"
        )
    message = str(missing.value)
    assert "kube-apiserver" in message and "build_kube" in message
    assert "ensure_etcd" in message


def test_a_bootstrap_token_gets_a_node_client_certificate(control_plane: dict[str, Any]) -> None:
    """The TLS bootstrap a joining kubelet does: with the token, post a node client CSR; the controller-manager
    auto-approves it (kubeadm's RBAC) and signs it with the cluster CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    node = f"node-{uuid.uuid4().hex[:6]}"
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}"),
        ]
    )
    csr = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    pem = csr.public_bytes(serialization.Encoding.PEM)
    cfg = client.Configuration()
    cfg.host = control_plane["url"]
    cfg.ssl_ca_cert = str(Path(control_plane["kubeconfig"]).parent / "pki/ca.crt")
    cfg.api_key = {"authorization": "Bearer " + Path(control_plane["join_token_file"]).read_text().strip()}
    with client.ApiClient(cfg) as bootstrap:
        certificates = client.CertificatesV1Api(bootstrap)
        certificates.create_certificate_signing_request(
            {
                "metadata": {"name": f"csr-{node}"},
                "spec": {
                    "request": base64.b64encode(pem).decode(),
                    "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                    "usages": ["digital signature", "client auth"],
                },
            }
        )
        issued = wait_for(
            lambda: certificates.read_certificate_signing_request(f"csr-{node}").status.certificate,
            what="the CSR to be approved and signed",
        )
    cert = x509.load_pem_x509_certificate(base64.b64decode(issued))
    assert cert.subject == subject
    ca = x509.load_pem_x509_certificate(Path(cfg.ssl_ca_cert).read_bytes())
    assert cert.issuer == ca.subject


def test_the_suites_run_namespace_admits_its_gpu_pods_and_refuses_a_privileged_one(
    control_plane: dict[str, Any],
) -> None:
    """The conformance suite's per-run namespace enforces Pod Security "restricted" on the real API server: its
    own GPU pods are admitted there, a privileged pod is refused with the policy named."""
    from gpuready import kube
    from gpuready.conformance.workloads import Workloads, gpu_pod
    from gpuready.deploy.addons import runtime_class
    from gpuready.spec import load_fleet

    repo = Path(__file__).resolve().parents[2]
    node = next(iter(load_fleet(str(repo / "inventory/example.py")).nodes.values()))
    run = Workloads(kube.connect(control_plane["kubeconfig"]))
    kube.apply(run.cluster, runtime_class())  # what the add-ons deploy applies; the pods name it
    run.ensure_namespace()
    try:
        pod = gpu_pod(
            "vectoradd",
            node,
            "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
            "nvidia.com/gpu",
            check="vectoradd",
        )
        admitted = run.cluster.core.create_namespaced_pod(run.namespace, pod)
        assert admitted.metadata.name == "vectoradd"
        privileged = _pod("privileged", container={"securityContext": {"privileged": True}})
        with pytest.raises(ApiException) as refused:
            run.cluster.core.create_namespaced_pod(run.namespace, privileged)
        assert refused.value.status == 403
        assert 'violates PodSecurity "restricted:latest"' in json.loads(refused.value.body)["message"]
    finally:
        assert run.delete()
