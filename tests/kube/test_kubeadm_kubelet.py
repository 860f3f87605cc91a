"""The emulated kubeadm and kubelet, run as processes joining the test run's real control plane.

They are the scripts the lab's `kubeadm`/`kubelet` packages install; here `GPUREADY_LAB_K8S_ROOT` moves their
/etc/kubernetes and /var/lib/kubelet into a temporary directory and a stand-in `systemctl` starts the kubelet the
way the packaged unit and its kubeadm drop-in do. Everything they talk to is real: kube-public/cluster-info signed
by the controller-manager's bootstrap signer, the bootstrap token kubeadm created, the CSR approver and signer, the
Node authorizer and NodeRestriction admission that judge the node's own credentials, and the node lifecycle
controller that notices a stopped kubelet.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID
from kubernetes import client
from kubernetes.client.rest import ApiException
from polling import wait_for

from gpuready.lab import emulator

from .conftest import kubectl_path

EMULATOR = Path(emulator.__file__).parent
KUBEADM = EMULATOR / "kubeadm.py"
KUBELET = EMULATOR / "kubelet.py"
KUBELET_VERSION = "v1.36.3"  # what the emulated packages report: the control plane's own version

pytestmark = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="the emulated kubeadm needs the openssl CLI"
)

# A stand-in for systemctl: `restart kubelet` runs the kubelet with the command line the packaged unit and
# kubeadm's 10-kubeadm.conf drop-in give it (flags env file included), `stop kubelet` sends SIGTERM.
FAKE_SYSTEMCTL = """\
import os, shlex, signal, subprocess, sys, time
state = os.environ["FAKE_SYSTEMCTL_STATE"]
root = os.environ["GPUREADY_LAB_K8S_ROOT"]
pidfile = os.path.join(state, "kubelet.pid")

def stop():
    if not os.path.exists(pidfile):
        return
    pid = int(open(pidfile).read())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    while os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] != "Z":
        time.sleep(0.05)
    os.unlink(pidfile)

def start():
    env_args = ""
    flags = root + "/var/lib/kubelet/kubeadm-flags.env"
    if os.path.exists(flags):
        for line in open(flags):
            name, _, value = line.strip().partition("=")
            if name == "KUBELET_KUBEADM_ARGS":
                env_args = shlex.split(value)[0] if value else ""
    cmd = [sys.executable, os.environ["FAKE_KUBELET"], "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
           "--kubeconfig=/etc/kubernetes/kubelet.conf", "--config=/var/lib/kubelet/config.yaml", *env_args.split()]
    log = open(os.path.join(state, "kubelet.log"), "ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    open(pidfile, "w").write(str(proc.pid))

args = sys.argv[1:]
if args[:1] == ["daemon-reload"]:
    sys.exit(0)
if args == ["restart", "kubelet"]:
    stop(); start()
elif args == ["stop", "kubelet"]:
    stop()
else:
    sys.exit(f"fake systemctl: unsupported {args}")
"""


@dataclass
class Host:
    """One fake lab host: its root, the environment its kubeadm/kubelet run with, and the processes they leave."""

    root: Path
    state: Path
    env: dict[str, str]
    cluster: dict[str, Any]  # the control plane's entry (endpoint, url, kubeconfig, join token file, CA hash)
    node: str
    seen_args: list[str] = field(default_factory=list)

    @property
    def token(self) -> str:
        return Path(self.cluster["join_token_file"]).read_text().strip()

    @property
    def token_id(self) -> str:
        return self.token.split(".")[0]

    @property
    def token_secret(self) -> str:
        return self.token.split(".")[1]

    @property
    def ca_pem(self) -> bytes:
        return (Path(self.cluster["kubeconfig"]).parent / "pki" / "ca.crt").read_bytes()

    def kubeadm(
        self, *args: str, stdin: str | None = None, watch_ps: bool = False
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.Popen(
            [sys.executable, str(KUBEADM), *args],
            env=self.env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        sampler = None
        stop = threading.Event()
        if watch_ps:
            sampler = threading.Thread(target=self._sample_ps, args=(stop,), daemon=True)
            sampler.start()
        out, err = proc.communicate(stdin, timeout=180)
        stop.set()
        if sampler is not None:
            sampler.join()
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def _sample_ps(self, stop: threading.Event) -> None:
        while not stop.is_set():
            ps = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout
            self.seen_args.extend(ps.splitlines())

    def kubelet(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(KUBELET), *args], env=self.env, capture_output=True, text=True, timeout=60
        )

    def systemctl(self, *args: str) -> None:
        subprocess.run(
            [*self.env["GPUREADY_LAB_SYSTEMCTL"].split(), *args], env=self.env, check=True, timeout=60
        )

    def path(self, p: str) -> Path:
        return self.root / p.lstrip("/")

    def kubelet_log(self) -> str:
        log = self.state / "kubelet.log"
        return log.read_text() if log.exists() else ""

    def config_file(self, **overrides: Any) -> Path:
        doc: dict[str, Any] = {
            "apiVersion": "kubeadm.k8s.io/v1beta4",
            "kind": "JoinConfiguration",
            "discovery": {
                "bootstrapToken": {
                    "apiServerEndpoint": self.cluster["endpoint"],
                    "token": self.token,
                    "caCertHashes": [self.cluster["ca_cert_hash"]],
                }
            },
            "nodeRegistration": {
                "name": self.node,
                "criSocket": "unix:///run/containerd/containerd.sock",
                "taints": [
                    {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
                    {"key": "gpuready.io/burn-in", "effect": "NoExecute"},
                ],
                "kubeletExtraArgs": [
                    {"name": "node-labels", "value": "nvidia.com/gpu.present=true,pool=gpu"}
                ],
            },
        }
        doc["discovery"]["bootstrapToken"].update(overrides)
        path = self.state / "join.yaml"
        # the file the deploy writes (operations/kube.py: yaml.safe_dump, root-only)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        path.chmod(0o600)
        return path

    def node_client(self) -> client.ApiClient:
        """An API client with the node's own credentials: the client certificate its TLS bootstrap got."""
        cfg = client.Configuration()
        cfg.host = self.cluster["url"]
        cfg.ssl_ca_cert = str(Path(self.cluster["kubeconfig"]).parent / "pki" / "ca.crt")
        pem = str(self.path("/var/lib/kubelet/pki/kubelet-client-current.pem"))
        cfg.cert_file = cfg.key_file = pem
        return client.ApiClient(cfg)


@pytest.fixture
def host(lab_cluster: Any, api: client.ApiClient, tmp_path: Path) -> Iterator[Host]:
    root, state = tmp_path / "hostroot", tmp_path / "hoststate"
    root.mkdir()
    state.mkdir()
    (state / "systemctl.py").write_text(FAKE_SYSTEMCTL)
    env = {
        **os.environ,
        "GPUREADY_LAB_K8S_ROOT": str(root),
        "FAKE_SYSTEMCTL_STATE": str(state),
        "FAKE_KUBELET": str(KUBELET),
        "GPUREADY_LAB_SYSTEMCTL": f"{sys.executable} {state / 'systemctl.py'}",
    }
    h = Host(root, state, env, lab_cluster.entry, f"lab-gpu-{uuid.uuid4().hex[:6]}")
    try:
        yield h
    finally:
        subprocess.run([sys.executable, str(state / "systemctl.py"), "stop", "kubelet"], env=env, timeout=60)
        try:
            client.CoreV1Api(api).delete_node(h.node)
        except ApiException as exc:
            if exc.status != 404:
                raise


def _node(api: client.ApiClient, name: str) -> dict[str, Any] | None:
    try:
        return api.sanitize_for_serialization(client.CoreV1Api(api).read_node(name))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _ready(api: client.ApiClient, name: str) -> str | None:
    conds = ((_node(api, name) or {}).get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conds if c["type"] == "Ready"), None)


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink()
    }


def _csrs_for(api: client.ApiClient, node: str) -> list[client.V1CertificateSigningRequest]:
    """The CSRs whose request names this node (the cluster is shared: other nodes join it too)."""
    mine = []
    for csr in client.CertificatesV1Api(api).list_certificate_signing_request().items:
        request = x509.load_pem_x509_csr(base64.b64decode(csr.spec.request))
        names = request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        if names and names[0].value == f"system:node:{node}":
            mine.append(csr)
    return mine


JOINED = """\
This node has joined the cluster:
* Certificate signing request was sent to apiserver and a response was received.
* The Kubelet was informed of the new secure connection details.

Run 'kubectl get nodes' on the control-plane to see this node join the cluster.
"""


@pytest.fixture
def joined(host: Host, api: client.ApiClient) -> Host:
    out = host.kubeadm("join", "--config", str(host.config_file()), watch_ps=True)
    assert out.returncode == 0, f"{out.stdout}\n{out.stderr}\n{host.kubelet_log()}"
    assert out.stdout.endswith(JOINED + "\n")
    wait_for(lambda: _ready(api, host.node) == "True", 60, "the joined node to turn Ready")
    return host


def test_join_registers_a_ready_node_with_labels_taints_and_host_capacity(
    joined: Host, api: client.ApiClient, kubectl: Any
) -> None:
    # the kubelet registers with the not-ready taint; the real node lifecycle controller lifts it once Ready
    wait_for(
        lambda: (
            not any(
                t["key"] == "node.kubernetes.io/not-ready"
                for t in (_node(api, joined.node) or {}).get("spec", {}).get("taints") or []
            )
        ),
        60,
        "the node lifecycle controller to lift the not-ready taint",
    )
    node = _node(api, joined.node)
    assert node is not None
    labels = node["metadata"]["labels"]
    assert {
        k: labels[k] for k in ("nvidia.com/gpu.present", "pool", "kubernetes.io/hostname", "kubernetes.io/os")
    } == {
        "nvidia.com/gpu.present": "true",
        "pool": "gpu",
        "kubernetes.io/hostname": joined.node,
        "kubernetes.io/os": "linux",
    }
    taints = [(t["key"], t.get("value"), t["effect"]) for t in node["spec"]["taints"]]
    assert taints == [("nvidia.com/gpu", "true", "NoSchedule"), ("gpuready.io/burn-in", None, "NoExecute")]
    assert node["spec"]["podCIDR"].startswith("10.244.")  # the real controller-manager's node IPAM took it in
    status = node["status"]
    cpuinfo, meminfo = Path("/proc/cpuinfo").read_text(), Path("/proc/meminfo").read_text()
    assert status["capacity"]["cpu"] == str(
        sum(1 for ln in cpuinfo.splitlines() if ln.startswith("processor"))
    )
    mem_kib = next(int(ln.split()[1]) for ln in meminfo.splitlines() if ln.startswith("MemTotal:"))
    assert status["capacity"]["memory"] == f"{mem_kib}Ki"
    assert (
        status["allocatable"]["memory"] == f"{mem_kib - 100 * 1024}Ki"
    )  # less evictionHard memory.available
    assert status["capacity"]["pods"] == "110"
    info = status["nodeInfo"]
    assert info["kubeletVersion"] == KUBELET_VERSION
    assert info["kernelVersion"] == os.uname().release
    if shutil.which("containerd"):
        version = subprocess.run(["containerd", "--version"], capture_output=True, text=True).stdout.split()[
            2
        ]
        assert info["containerRuntimeVersion"] == f"containerd://{version.lstrip('v')}"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "True",
        "KubeletReady",
        "kubelet is posting ready status",
    )
    lease = client.CoordinationV1Api(api).read_namespaced_lease(joined.node, "kube-node-lease")
    assert lease.spec.holder_identity == joined.node
    assert lease.metadata.owner_references[0].uid == node["metadata"]["uid"]
    out = kubectl("get", "nodes", joined.node, "--no-headers").stdout.split()
    assert out[:2] == [joined.node, "Ready"] and out[-1] == KUBELET_VERSION


def test_join_writes_what_kubeadm_writes_and_never_the_token(joined: Host, api: client.ApiClient) -> None:
    root, cluster = joined.root, joined.cluster
    assert (root / "var/lib/kubelet/kubeadm-flags.env").read_text() == (
        f'KUBELET_KUBEADM_ARGS="--hostname-override={joined.node} --node-labels=nvidia.com/gpu.present=true,pool=gpu '
        '--register-with-taints=nvidia.com/gpu=true:NoSchedule,gpuready.io/burn-in:NoExecute"\n'
    )
    kubeconfig = yaml.safe_load((root / "etc/kubernetes/kubelet.conf").read_text())
    server = kubeconfig["clusters"][0]["cluster"]
    assert server["server"] == cluster["url"]
    assert base64.b64decode(server["certificate-authority-data"]) == joined.ca_pem
    pem = "/var/lib/kubelet/pki/kubelet-client-current.pem"
    assert kubeconfig["users"][0]["user"] == {"client-certificate": pem, "client-key": pem}
    assert oct((root / "etc/kubernetes/kubelet.conf").stat().st_mode & 0o777) == "0o600"
    # real client-go loads it (kubectl config view resolves the current context)
    kubectl = kubectl_path()
    assert kubectl is not None
    view = subprocess.run([kubectl, "config", "view", "--raw", "--minify", "-o", "json", "--kubeconfig",
                           str(root / "etc/kubernetes/kubelet.conf")], capture_output=True, text=True, check=True,
                          env={**os.environ, "HOME": str(joined.state)})  # fmt: skip
    assert json.loads(view.stdout)["clusters"][0]["cluster"]["server"] == cluster["url"]
    assert (root / "etc/kubernetes/pki/ca.crt").read_bytes() == joined.ca_pem
    # config.yaml is the cluster's kubelet-config (uploaded by the real `kubeadm init phase upload-config`) with
    # this node's CRI endpoint
    config = yaml.safe_load((root / "var/lib/kubelet/config.yaml").read_text())
    uploaded = (
        client.CoreV1Api(api).read_namespaced_config_map("kubelet-config", "kube-system").data["kubelet"]
    )
    assert config == {
        **yaml.safe_load(uploaded),
        "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
    }
    assert config["kind"] == "KubeletConfiguration"
    # the client certificate is the node's identity, signed through a kubelet CSR that the real controller-manager
    # auto-approved (kubeadm's RBAC for bootstrap tokens) and signed with the cluster CA
    csrs = _csrs_for(api, joined.node)
    assert [(c.spec.username, c.spec.signer_name) for c in csrs] == [
        (f"system:bootstrap:{joined.token_id}", "kubernetes.io/kube-apiserver-client-kubelet")
    ]
    approved = next(c for c in csrs[0].status.conditions if c.type == "Approved")
    assert (approved.status, approved.reason) == ("True", "AutoApproved")
    cert = x509.load_pem_x509_certificate(joined.path(pem).read_bytes())
    assert cert.subject.rfc4514_string() == f"CN=system:node:{joined.node},O=system:nodes"
    assert cert.issuer == x509.load_pem_x509_certificate(joined.ca_pem).subject
    assert base64.b64decode(csrs[0].status.certificate) in joined.path(pem).read_bytes()
    assert not (root / "etc/kubernetes/bootstrap-kubelet.conf").exists()
    written = _files(root)
    assert written and not [p for p, data in written.items() if joined.token_secret.encode() in data]
    assert joined.seen_args, "ps was never sampled while kubeadm ran"
    assert any("kubeadm.py join --config" in a for a in joined.seen_args)
    assert not [a for a in joined.seen_args if joined.token_secret in a]


def test_node_credentials_pass_the_node_authorizer_and_node_restriction(
    joined: Host, api: client.ApiClient, virtual_nodes: Any
) -> None:
    """The certificate is a node's identity: it may write its own Node, and NodeRestriction refuses it another's."""
    (other,) = virtual_nodes(1, "cpu")
    with joined.node_client() as as_node:
        review = client.AuthenticationV1Api(as_node).create_self_subject_review({})
        assert review.status.user_info.username == f"system:node:{joined.node}"
        assert "system:nodes" in review.status.user_info.groups
        own = client.CoreV1Api(as_node).patch_node(
            joined.node, {"metadata": {"labels": {"gpuready.io/own": "1"}}}
        )
        assert own.metadata.labels["gpuready.io/own"] == "1"
        with pytest.raises(ApiException) as refused:
            client.CoreV1Api(as_node).patch_node(other, {"metadata": {"labels": {"gpuready.io/own": "1"}}})
        assert refused.value.status == 403
        assert json.loads(refused.value.body)["message"] == (
            f'nodes "{other}" is forbidden: node "{joined.node}" is not allowed to modify node "{other}"'
        )
        with pytest.raises(ApiException) as secrets:
            client.CoreV1Api(as_node).list_namespaced_secret("kube-system")
        assert secrets.value.status == 403


def test_kubelet_stop_makes_the_node_not_ready(joined: Host, api: client.ApiClient, kubectl: Any) -> None:
    joined.systemctl("stop", "kubelet")
    # the real node lifecycle controller: no Lease renewal within the grace period (6 s in tests)
    wait_for(
        lambda: _ready(api, joined.node) == "Unknown", 60, "the node to go NotReady after the kubelet stopped"
    )
    node = _node(api, joined.node)
    assert node is not None
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["reason"], ready["message"]) == (
        "NodeStatusUnknown",
        "Kubelet stopped posting node status.",
    )
    assert kubectl("get", "nodes", joined.node, "--no-headers").stdout.split()[1] == "NotReady"
    wait_for(
        lambda: (
            {"node.kubernetes.io/unreachable"}
            <= {t["key"] for t in (_node(api, joined.node) or {}).get("spec", {}).get("taints") or []}
        ),
        60,
        "the node lifecycle controller to taint the unreachable node",
    )
    assert '"Shutting down kubelet"' in joined.kubelet_log()
    joined.systemctl("restart", "kubelet")
    wait_for(
        lambda: _ready(api, joined.node) == "True",
        60,
        "the node to be Ready again once the kubelet restarted",
    )


def test_rejoin_is_refused_by_preflight(joined: Host) -> None:
    out = joined.kubeadm("join", "--config", str(joined.config_file()))
    assert out.returncode == 1
    assert (
        "[ERROR FileAvailable--etc-kubernetes-kubelet.conf]: /etc/kubernetes/kubelet.conf already exists"
        in out.stderr
    )
    assert out.stderr.startswith("error execution phase preflight: [preflight] Some fatal errors occurred:\n")


def test_reset_removes_what_join_wrote(joined: Host, api: client.ApiClient) -> None:
    out = joined.kubeadm("reset", "-f")
    assert out.returncode == 0, out.stderr
    assert "[reset] Stopping the kubelet service" in out.stdout
    assert not (joined.state / "kubelet.pid").exists()
    assert _files(joined.root) == {}
    again = joined.kubeadm("join", "--config", str(joined.config_file()))
    assert again.returncode == 0, again.stderr
    # a fresh TLS bootstrap: a second CSR, approved and signed like the first
    csrs = _csrs_for(api, joined.node)
    assert len(csrs) == 2 and all(c.status.certificate for c in csrs)


def test_wrong_token_is_refused(host: Host, api: client.ApiClient) -> None:
    out = host.kubeadm("join", "--config", str(host.config_file(token="abcdef.ffffffffffffffff")))
    assert out.returncode == 1
    assert out.stderr.splitlines()[0] == (
        'error execution phase preflight: couldn\'t validate the identity of the API Server: token id "abcdef" is '
        'invalid for this cluster or it has expired. Use "kubeadm token create" on the control-plane node to '
        "create a new valid token"
    )
    assert "ffffffffffffffff" not in out.stdout + out.stderr
    assert not host.path("/etc/kubernetes/kubelet.conf").exists()
    assert _node(api, host.node) is None


def test_wrong_ca_hash_is_refused_with_kubeadms_text(host: Host) -> None:
    pinned = "sha256:" + "0" * 64
    out = host.kubeadm("join", "--config", str(host.config_file(caCertHashes=[pinned])))
    assert out.returncode == 1
    assert out.stderr.splitlines()[0] == (
        "error execution phase preflight: couldn't validate the identity of the API Server: cluster CA found in "
        f'cluster-info ConfigMap is invalid: none of the public keys "{host.cluster["ca_cert_hash"]}" are pinned'
    )
    assert _files(host.root) == {}


def test_token_checked_by_the_cluster_info_signature_flag_form(host: Host, api: client.ApiClient) -> None:
    """The token's secret is proven by the real bootstrap signer's JWS over cluster-info: the right token id with a
    wrong secret finds the signature but cannot verify it."""
    digest = host.cluster["ca_cert_hash"]
    endpoint = host.cluster["endpoint"]
    forged = f"{host.token_id}.ffffffffffffffff"
    bad = host.kubeadm("join", endpoint, "--token", forged, "--discovery-token-ca-cert-hash", digest,
                       "--node-name", host.node)  # fmt: skip
    assert bad.returncode == 1
    assert bad.stderr.splitlines()[0] == (
        "error execution phase preflight: couldn't validate the identity of the API Server: failed to verify JWS "
        "signature of received cluster info object, can't trust this API Server"
    )
    assert _files(host.root) == {}
    good = host.kubeadm("join", endpoint, "--token", host.token, "--discovery-token-ca-cert-hash", digest,
                        "--node-name", host.node, watch_ps=True)  # fmt: skip
    assert good.returncode == 0, good.stderr
    assert host.token_secret not in good.stdout + good.stderr
    # The flag form shows the token to anyone running ps, as with real kubeadm: why the deploy uses --config.
    assert [a for a in host.seen_args if f"--token {host.token}" in a]
    wait_for(lambda: _ready(api, host.node) == "True", 60, "the node joined with the flag form to turn Ready")


def test_config_and_flags_do_not_mix(host: Host) -> None:
    out = host.kubeadm("join", "--config", str(host.config_file()), "--node-name", "x")
    assert out.returncode == 1
    assert out.stderr.splitlines()[0] == "can not mix '--config' with arguments [node-name]"


def test_kubelet_without_kubeconfig_exits_like_an_unjoined_kubelet(host: Host) -> None:
    out = host.kubelet(
        "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
        "--kubeconfig=/etc/kubernetes/kubelet.conf",
    )
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1].endswith(
        '"command failed" err="failed to run Kubelet: unable to load bootstrap kubeconfig: stat '
        '/etc/kubernetes/bootstrap-kubelet.conf: no such file or directory"'
    )
    assert host.kubelet("--version").stdout == f"Kubernetes {KUBELET_VERSION}\n"


def test_kubeadm_version(host: Host) -> None:
    assert host.kubeadm("version", "-o", "short").stdout == f"{KUBELET_VERSION}\n"
    line = host.kubeadm("version").stdout
    assert line.startswith('kubeadm version: &version.Info{Major:"1", Minor:"36", EmulationMajor:"", ')
    assert f'GitVersion:"{KUBELET_VERSION}", ' in line and line.endswith(
        'Compiler:"gc", Platform:"linux/amd64"}\n'
    )


def test_expired_token_is_refused(host: Host, api: client.ApiClient) -> None:
    """A bootstrap token past its expiration: the real bootstrap signer does not sign cluster-info with it (and the
    token cleaner deletes it), so the join fails in discovery the way kubeadm's does."""
    token_id, secret = "exp1r3", "0123456789abcdef"
    client.CoreV1Api(api).create_namespaced_secret(
        "kube-system",
        {
            "metadata": {"name": f"bootstrap-token-{token_id}"},
            "type": "bootstrap.kubernetes.io/token",
            "stringData": {
                "token-id": token_id,
                "token-secret": secret,
                "expiration": "2020-01-01T00:00:00Z",
                "usage-bootstrap-authentication": "true",
                "usage-bootstrap-signing": "true",
                "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
            },
        },
    )
    out = host.kubeadm("join", "--config", str(host.config_file(token=f"{token_id}.{secret}")))
    assert out.returncode == 1
    assert out.stderr.splitlines()[0] == (
        f'error execution phase preflight: couldn\'t validate the identity of the API Server: token id "{token_id}" '
        'is invalid for this cluster or it has expired. Use "kubeadm token create" on the control-plane node to '
        "create a new valid token"
    )
    assert secret not in out.stdout + out.stderr
    assert not host.path("/etc/kubernetes/kubelet.conf").exists()
