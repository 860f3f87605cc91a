"""The emulated kubeadm and kubelet, run as processes against an in-process simulator with a fake host root.

They are the scripts the lab's `kubeadm`/`kubelet` packages install; here `GPUREADY_LAB_K8S_ROOT` moves their
/etc/kubernetes and /var/lib/kubelet into a temporary directory and a stand-in `systemctl` starts the kubelet the
way the packaged unit and its kubeadm drop-in do.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuready.lab import emulator
from gpuready.lab.apiserver import ApiServer
from gpuready.lab.apiserver.tls import ca_cert_hash

from .conftest import KUBECTL, wait_for

EMULATOR = Path(emulator.__file__).parent
KUBEADM = EMULATOR / "kubeadm.py"
KUBELET = EMULATOR / "kubelet.py"
TOKEN_ID, TOKEN_SECRET = "abcdef", "0123456789abcdef"
TOKEN = f"{TOKEN_ID}.{TOKEN_SECRET}"
NODE = "lab-gpu-1"

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
    sim: ApiServer
    seen_args: list[str] = field(default_factory=list)

    def kubeadm(
        self, *args: str, stdin: str | None = None, watch_ps: bool = False
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.Popen([sys.executable, str(KUBEADM), *args], env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        sampler = None
        stop = threading.Event()
        if watch_ps:
            sampler = threading.Thread(target=self._sample_ps, args=(stop,), daemon=True)
            sampler.start()
        out, err = proc.communicate(stdin, timeout=120)
        stop.set()
        if sampler is not None:
            sampler.join()
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def _sample_ps(self, stop: threading.Event) -> None:
        while not stop.is_set():
            ps = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout
            self.seen_args.extend(ps.splitlines())

    def kubelet(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(KUBELET), *args], env=self.env, capture_output=True, text=True,
                              timeout=60)  # fmt: skip

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
            "discovery": {"bootstrapToken": {"apiServerEndpoint": self.sim.host_port, "token": TOKEN,
                                             "caCertHashes": [ca_cert_hash(self.sim.ca_path.read_bytes())]}},
            "nodeRegistration": {
                "name": NODE,
                "criSocket": "unix:///run/containerd/containerd.sock",
                "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
                           {"key": "gpuready.io/burn-in", "effect": "NoExecute"}],
                "kubeletExtraArgs": [{"name": "node-labels", "value": "nvidia.com/gpu.present=true,pool=gpu"}],
            },
        }  # fmt: skip
        doc["discovery"]["bootstrapToken"].update(overrides)
        path = self.state / "join.yaml"
        # the file the deploy writes (operations/kube.py: yaml.safe_dump, root-only)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        path.chmod(0o600)
        return path


def _bootstrap_token(sim: ApiServer) -> None:
    data = {"token-id": TOKEN_ID, "token-secret": TOKEN_SECRET, "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true", "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token"}  # fmt: skip
    sim.create_internal("secrets", {"metadata": {"name": f"bootstrap-token-{TOKEN_ID}", "namespace": "kube-system"},
                                    "type": "bootstrap.kubernetes.io/token",
                                    "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}})  # fmt: skip


def _fast_kubelet_config(sim: ApiServer) -> None:
    """The cluster's kubelet-config (kubeadm copies it to config.yaml): heartbeats well inside the test's grace."""
    cfg = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "cgroupDriver": "systemd",
           "nodeLeaseDurationSeconds": 2, "nodeStatusUpdateFrequency": "500ms", "maxPods": 110}  # fmt: skip
    sim.create_internal("configmaps", {"metadata": {"name": "kubelet-config", "namespace": "kube-system"},
                                       "data": {"kubelet": yaml.safe_dump(cfg)}})  # fmt: skip


def _sign_cluster_info(sim: ApiServer, secret: str = TOKEN_SECRET) -> None:
    """What the bootstrap signer controller does: a detached HS256 JWS of the kubeconfig, keyed by the token."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    def sign(cm: dict[str, Any]) -> None:
        header = b64(json.dumps({"alg": "HS256", "kid": TOKEN_ID}, separators=(",", ":")).encode())
        payload = b64(cm["data"]["kubeconfig"].encode())
        sig = hmac.new(secret.encode(), f"{header}.{payload}".encode(), hashlib.sha256).digest()
        cm["data"][f"jws-kubeconfig-{TOKEN_ID}"] = f"{header}..{b64(sig)}"

    sim.store.modify("configmaps", "kube-public", "cluster-info", sign)


@pytest.fixture
def host(sim: ApiServer, tmp_path: Path) -> Iterator[Host]:
    root, state = tmp_path / "hostroot", tmp_path / "hoststate"
    root.mkdir()
    state.mkdir()
    (state / "systemctl.py").write_text(FAKE_SYSTEMCTL)
    env = {**os.environ, "GPUREADY_LAB_K8S_ROOT": str(root), "FAKE_SYSTEMCTL_STATE": str(state),
           "FAKE_KUBELET": str(KUBELET), "GPUREADY_LAB_SYSTEMCTL": f"{sys.executable} {state / 'systemctl.py'}"}  # fmt: skip
    _bootstrap_token(sim)
    _fast_kubelet_config(sim)
    h = Host(root, state, env, sim)
    try:
        yield h
    finally:
        subprocess.run([sys.executable, str(state / "systemctl.py"), "stop", "kubelet"], env=env, timeout=60)


def _node(sim: ApiServer) -> dict[str, Any] | None:
    return sim.store.get("nodes", "", NODE)


def _ready(sim: ApiServer) -> str | None:
    node = _node(sim) or {}
    conds = (node.get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conds if c["type"] == "Ready"), None)


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink()
    }


JOINED = """\
This node has joined the cluster:
* Certificate signing request was sent to apiserver and a response was received.
* The Kubelet was informed of the new secure connection details.

Run 'kubectl get nodes' on the control-plane to see this node join the cluster.
"""


@pytest.fixture
def joined(host: Host) -> Host:
    out = host.kubeadm("join", "--config", str(host.config_file()), watch_ps=True)
    assert out.returncode == 0, f"{out.stdout}\n{out.stderr}\n{host.kubelet_log()}"
    assert out.stdout.endswith(JOINED + "\n")
    wait_for(lambda: _ready(host.sim) == "True", 20, "the joined node to turn Ready")
    return host


def test_join_registers_a_ready_node_with_labels_taints_and_host_capacity(joined: Host, kubectl) -> None:
    sim, node = joined.sim, _node(joined.sim)
    assert node is not None
    labels = node["metadata"]["labels"]
    assert {k: labels[k] for k in ("nvidia.com/gpu.present", "pool", "kubernetes.io/hostname", "kubernetes.io/os")} == {
        "nvidia.com/gpu.present": "true", "pool": "gpu", "kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux"}  # fmt: skip
    taints = [(t["key"], t.get("value"), t["effect"]) for t in node["spec"]["taints"]]
    assert taints == [("nvidia.com/gpu", "true", "NoSchedule"), ("gpuready.io/burn-in", None, "NoExecute")]
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
    assert info["kubeletVersion"] == "v1.34.1"
    assert info["kernelVersion"] == os.uname().release
    if shutil.which("containerd"):
        version = subprocess.run(["containerd", "--version"], capture_output=True, text=True).stdout.split()[
            2
        ]
        assert info["containerRuntimeVersion"] == f"containerd://{version}"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == ("True", "KubeletReady",
                                                                    "kubelet is posting ready status")  # fmt: skip
    lease = sim.store.get("leases.coordination.k8s.io", "kube-node-lease", NODE)
    assert lease is not None and lease["spec"]["holderIdentity"] == NODE
    assert lease["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
    out = kubectl("get", "nodes", NODE, "--no-headers").stdout.split()
    assert out[:2] == [NODE, "Ready"] and out[-1] == "v1.34.1"


def test_join_writes_what_kubeadm_writes_and_never_the_token(joined: Host) -> None:
    root, sim = joined.root, joined.sim
    assert (root / "var/lib/kubelet/kubeadm-flags.env").read_text() == (
        'KUBELET_KUBEADM_ARGS="--hostname-override=lab-gpu-1 --node-labels=nvidia.com/gpu.present=true,pool=gpu '
        '--register-with-taints=nvidia.com/gpu=true:NoSchedule,gpuready.io/burn-in:NoExecute"\n')  # fmt: skip
    kubeconfig = yaml.safe_load((root / "etc/kubernetes/kubelet.conf").read_text())
    cluster = kubeconfig["clusters"][0]["cluster"]
    assert cluster["server"] == sim.url
    assert base64.b64decode(cluster["certificate-authority-data"]) == sim.ca_path.read_bytes()
    pem = "/var/lib/kubelet/pki/kubelet-client-current.pem"
    assert kubeconfig["users"][0]["user"] == {"client-certificate": pem, "client-key": pem}
    assert oct((root / "etc/kubernetes/kubelet.conf").stat().st_mode & 0o777) == "0o600"
    # real client-go loads it (kubectl config view resolves the current context)
    view = subprocess.run([str(KUBECTL), "config", "view", "--raw", "--minify", "-o", "json", "--kubeconfig",
                           str(root / "etc/kubernetes/kubelet.conf")], capture_output=True, text=True, check=True)  # fmt: skip
    assert json.loads(view.stdout)["clusters"][0]["cluster"]["server"] == sim.url
    assert (root / "etc/kubernetes/pki/ca.crt").read_bytes() == sim.ca_path.read_bytes()
    config = yaml.safe_load((root / "var/lib/kubelet/config.yaml").read_text())
    assert config["kind"] == "KubeletConfiguration" and config["nodeLeaseDurationSeconds"] == 2
    assert config["containerRuntimeEndpoint"] == "unix:///run/containerd/containerd.sock"
    # the client certificate is the node's identity, signed through an auto-approved kubelet CSR
    csrs = sim.store.list("certificatesigningrequests.certificates.k8s.io")[0]
    assert [(c["spec"]["username"], c["spec"]["signerName"]) for c in csrs] == [
        (f"system:bootstrap:{TOKEN_ID}", "kubernetes.io/kube-apiserver-client-kubelet")]  # fmt: skip
    assert not (root / "etc/kubernetes/bootstrap-kubelet.conf").exists()
    written = _files(root)
    assert written and not [p for p, data in written.items() if TOKEN_SECRET.encode() in data]
    assert joined.seen_args, "ps was never sampled while kubeadm ran"
    assert any("kubeadm.py join --config" in a for a in joined.seen_args)
    assert not [a for a in joined.seen_args if TOKEN_SECRET in a]


def test_kubelet_stop_makes_the_node_not_ready(joined: Host, kubectl) -> None:
    joined.systemctl("stop", "kubelet")
    wait_for(lambda: _ready(joined.sim) == "Unknown", 15, "the node to go NotReady after the kubelet stopped")
    ready = next(c for c in _node(joined.sim)["status"]["conditions"] if c["type"] == "Ready")  # type: ignore[index]
    assert ready["reason"] == "NodeStatusUnknown"
    assert kubectl("get", "nodes", NODE, "--no-headers").stdout.split()[1] == "NotReady"
    assert '"Shutting down kubelet"' in joined.kubelet_log()
    joined.systemctl("restart", "kubelet")
    wait_for(
        lambda: _ready(joined.sim) == "True", 15, "the node to be Ready again once the kubelet restarted"
    )


def test_rejoin_is_refused_by_preflight(joined: Host) -> None:
    out = joined.kubeadm("join", "--config", str(joined.config_file()))
    assert out.returncode == 1
    assert (
        "[ERROR FileAvailable--etc-kubernetes-kubelet.conf]: /etc/kubernetes/kubelet.conf already exists"
        in out.stderr
    )
    assert out.stderr.startswith("error execution phase preflight: [preflight] Some fatal errors occurred:\n")


def test_reset_removes_what_join_wrote(joined: Host) -> None:
    out = joined.kubeadm("reset", "-f")
    assert out.returncode == 0, out.stderr
    assert "[reset] Stopping the kubelet service" in out.stdout
    assert not (joined.state / "kubelet.pid").exists()
    assert _files(joined.root) == {}
    again = joined.kubeadm("join", "--config", str(joined.config_file()))
    assert again.returncode == 0, again.stderr


def test_wrong_token_is_refused(host: Host) -> None:
    out = host.kubeadm("join", "--config", str(host.config_file(token="abcdef.ffffffffffffffff")))
    assert out.returncode == 1
    assert out.stderr.splitlines()[0] == (
        'error execution phase preflight: couldn\'t validate the identity of the API Server: token id "abcdef" is '
        'invalid for this cluster or it has expired. Use "kubeadm token create" on the control-plane node to '
        "create a new valid token")  # fmt: skip
    assert "ffffffffffffffff" not in out.stdout + out.stderr
    assert not host.path("/etc/kubernetes/kubelet.conf").exists()
    assert _node(host.sim) is None


def test_wrong_ca_hash_is_refused_with_kubeadms_text(host: Host) -> None:
    pinned = "sha256:" + "0" * 64
    out = host.kubeadm("join", "--config", str(host.config_file(caCertHashes=[pinned])))
    assert out.returncode == 1
    real = ca_cert_hash(host.sim.ca_path.read_bytes())
    assert out.stderr.splitlines()[0] == (
        "error execution phase preflight: couldn't validate the identity of the API Server: cluster CA found in "
        f'cluster-info ConfigMap is invalid: none of the public keys "{real}" are pinned')  # fmt: skip
    assert _files(host.root) == {}


def test_token_checked_by_the_cluster_info_signature_flag_form(host: Host) -> None:
    digest = ca_cert_hash(host.sim.ca_path.read_bytes())
    _sign_cluster_info(host.sim, secret="ffffffffffffffff")
    bad = host.kubeadm("join", host.sim.host_port, "--token", TOKEN, "--discovery-token-ca-cert-hash", digest,
                       "--node-name", NODE)  # fmt: skip
    assert bad.returncode == 1
    assert bad.stderr.splitlines()[0] == (
        "error execution phase preflight: couldn't validate the identity of the API Server: failed to verify JWS "
        "signature of received cluster info object, can't trust this API Server")  # fmt: skip
    _sign_cluster_info(host.sim)
    good = host.kubeadm("join", host.sim.host_port, "--token", TOKEN, "--discovery-token-ca-cert-hash", digest,
                        "--node-name", NODE, watch_ps=True)  # fmt: skip
    assert good.returncode == 0, good.stderr
    assert TOKEN_SECRET not in good.stdout + good.stderr
    # The flag form shows the token to anyone running ps, as with real kubeadm: why the deploy uses --config.
    assert [a for a in host.seen_args if f"--token {TOKEN}" in a]
    wait_for(lambda: _ready(host.sim) == "True", 20, "the node joined with the flag form to turn Ready")


def test_config_and_flags_do_not_mix(host: Host) -> None:
    out = host.kubeadm("join", "--config", str(host.config_file()), "--node-name", "x")
    assert out.returncode == 1
    assert out.stderr.splitlines()[0] == "can not mix '--config' with arguments [node-name]"


def test_kubelet_without_kubeconfig_exits_like_an_unjoined_kubelet(host: Host) -> None:
    out = host.kubelet("--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
                       "--kubeconfig=/etc/kubernetes/kubelet.conf")  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1].endswith(
        '"command failed" err="failed to run Kubelet: unable to load bootstrap kubeconfig: stat '
        '/etc/kubernetes/bootstrap-kubelet.conf: no such file or directory"')  # fmt: skip
    assert host.kubelet("--version").stdout == "Kubernetes v1.34.1\n"


def test_kubeadm_version(host: Host) -> None:
    assert host.kubeadm("version", "-o", "short").stdout == "v1.34.1\n"
    line = host.kubeadm("version").stdout
    assert line.startswith('kubeadm version: &version.Info{Major:"1", Minor:"34", EmulationMajor:"", ')
    assert 'GitVersion:"v1.34.1", ' in line and line.endswith('Compiler:"gc", Platform:"linux/amd64"}\n')
