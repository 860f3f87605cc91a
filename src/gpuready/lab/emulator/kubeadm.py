"""Emulated `kubeadm` for lab hosts: `join` (token discovery + TLS bootstrap), `reset`, `version`.

Stdlib + the openssl CLI only (installed into Debian lab hosts by the lab's `kubeadm` package, next to a copy of
the emulated kubelet module whose API client and YAML helpers it uses). `join` follows real kubeadm's token
discovery: cluster-info is fetched anonymously without verifying TLS, its CA is pinned by the public-key hash,
the token is checked by the bootstrap signer's JWS signature over cluster-info (or, where the control plane
publishes none, by authenticating with it once the CA is trusted, so the token never goes to an unverified
server). The TLS bootstrap (a kubelet client CSR, auto-approved for bootstrap tokens) is done here rather than by
the kubelet, so no file ever holds the token: real kubeadm writes it to bootstrap-kubelet.conf for the kubelet's
first minutes. Everything else it writes is where and how real kubeadm and kubelet write it.

`GPUREADY_LAB_K8S_ROOT` (tests only) prefixes every absolute host path; `GPUREADY_LAB_SYSTEMCTL` (tests only)
replaces `systemctl`.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import http.client
import json
import os
import re
import shlex
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from typing import Any

import kubelet as kl

TOKEN_RE = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
HASH_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
KUBELET_CONF = "/etc/kubernetes/kubelet.conf"
BOOTSTRAP_CONF = "/etc/kubernetes/bootstrap-kubelet.conf"
CA_CRT = "/etc/kubernetes/pki/ca.crt"
KUBELET_DIR = "/var/lib/kubelet"
KUBELET_CONFIG = f"{KUBELET_DIR}/config.yaml"
INSTANCE_CONFIG = f"{KUBELET_DIR}/instance-config.yaml"
FLAGS_ENV = f"{KUBELET_DIR}/kubeadm-flags.env"
KUBELET_PKI = f"{KUBELET_DIR}/pki"
DEFAULT_CRI = "unix:///var/run/containerd/containerd.sock"
KUBELET_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
STACK_HINT = "To see the stack trace of this error execute with --v=5 or higher"
# The emulation cannot know the real builds' commits; an all-zero commit says so plainly.
BUILD = {"gitCommit": "0" * 40, "buildDate": "2025-09-09T00:00:00Z", "goVersion": "go1.24.6"}


class JoinError(Exception):
    """A failure kubeadm reports as `error execution phase <phase>: <message>`."""

    def __init__(self, message: str, phase: str = "preflight") -> None:
        super().__init__(message)
        self.phase = phase


def say(line: str = "") -> None:
    print(line, flush=True)


# --- configuration ------------------------------------------------------------------------------------------------


def _extra_args(value: Any) -> dict[str, str]:
    """kubeletExtraArgs: v1beta4's [{name, value}] list (or v1beta3's map)."""
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    return {str(a.get("name")): str(a.get("value", "")) for a in value or [] if isinstance(a, dict)}


def join_options(argv: list[str]) -> dict[str, Any]:
    """Flags or a JoinConfiguration file -> one options dict (kubeadm refuses to mix the two)."""
    opts: dict[str, Any] = {
        "endpoint": "",
        "token": "",
        "tls_token": "",
        "hashes": [],
        "unsafe": False,
        "name": "",
        "cri": "",
        "taints": None,
        "extra": {},
        "ignore": set(),
        "discovery_timeout": 300.0,
        "health_timeout": 240.0,
        "tls_timeout": 300.0,
    }
    config, given, positional = "", [], []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        takes_value = name in (
            "--config",
            "--token",
            "--discovery-token",
            "--tls-bootstrap-token",
            "--node-name",
            "--discovery-token-ca-cert-hash",
            "--cri-socket",
            "--ignore-preflight-errors",
            "--v",
            "-v",
        )
        if takes_value and not eq:
            i += 1
            if i >= len(argv):
                raise JoinError(f"flag needs an argument: {name}", "")
            value = argv[i]
        i += 1
        if name in ("--v", "-v"):
            continue
        if not arg.startswith("-"):
            positional.append(arg)
        elif name == "--config":
            config = value
        elif name in ("--token", "--discovery-token", "--tls-bootstrap-token"):
            given.append(name.lstrip("-"))
            if name != "--tls-bootstrap-token":
                opts["token"] = value
            if name != "--discovery-token":
                opts["tls_token"] = value
        elif name == "--discovery-token-ca-cert-hash":
            given.append("discovery-token-ca-cert-hash")
            opts["hashes"].append(value)
        elif name == "--discovery-token-unsafe-skip-ca-verification":
            given.append("discovery-token-unsafe-skip-ca-verification")
            opts["unsafe"] = True
        elif name == "--node-name":
            given.append("node-name")
            opts["name"] = value
        elif name == "--cri-socket":
            given.append("cri-socket")
            opts["cri"] = value
        elif name == "--ignore-preflight-errors":
            opts["ignore"].update(v.strip().lower() for v in value.split(",") if v.strip())
        else:
            raise JoinError(f"unknown flag: {name}", "")
    if config:
        if given or positional:
            mixed = ", ".join(given + (["apiserver-advertise-address"] if positional else []))
            raise JoinError(f"can not mix '--config' with arguments [{mixed}]", "")
        _from_file(config, opts)
    elif positional:
        opts["endpoint"] = positional[0]
    opts["tls_token"] = opts["tls_token"] or opts["token"]
    return opts


def _from_file(path: str, opts: dict[str, Any]) -> None:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise JoinError(f'unable to read config from "{path}" : {exc}', "") from None
    docs = [kl.load_yaml(d) for d in re.split(r"(?m)^---\s*$", text) if d.strip()]
    doc = next((d for d in docs if isinstance(d, dict) and d.get("kind") == "JoinConfiguration"), None)
    if doc is None:
        raise JoinError(f'no JoinConfiguration kind was found in the YAML file "{path}"', "")
    api = doc.get("apiVersion", "")
    if api not in ("kubeadm.k8s.io/v1beta4", "kubeadm.k8s.io/v1beta3"):
        raise JoinError(
            f'no kind "JoinConfiguration" is registered for version "{api}" in scheme '
            '"k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/scheme/scheme.go:31"',
            "",
        )
    bt = ((doc.get("discovery") or {}).get("bootstrapToken")) or {}
    reg = doc.get("nodeRegistration") or {}
    opts["endpoint"] = bt.get("apiServerEndpoint") or ""
    opts["token"] = bt.get("token") or ""
    opts["tls_token"] = (doc.get("discovery") or {}).get("tlsBootstrapToken") or ""
    opts["hashes"] = list(bt.get("caCertHashes") or [])
    opts["unsafe"] = bool(bt.get("unsafeSkipCAVerification"))
    opts["name"] = reg.get("name") or ""
    opts["cri"] = reg.get("criSocket") or ""
    opts["taints"] = reg.get("taints")
    opts["extra"] = _extra_args(reg.get("kubeletExtraArgs"))
    opts["ignore"].update(str(v).lower() for v in reg.get("ignorePreflightErrors") or [])
    timeouts = doc.get("timeouts") or {}
    for key, field in (
        ("discovery", "discovery_timeout"),
        ("kubeletHealthCheck", "health_timeout"),
        ("tlsBootstrap", "tls_timeout"),
    ):
        opts[field] = kl.parse_duration(timeouts.get(key), opts[field])


def validate(opts: dict[str, Any]) -> None:
    if not opts["endpoint"]:
        raise JoinError('discovery: Invalid value: "": bootstrapToken or file must be set', "")
    for which in ("token", "tls_token"):
        if not TOKEN_RE.match(opts[which] or ""):
            field = "discovery.bootstrapToken.token" if which == "token" else "discovery.tlsBootstrapToken"
            # real kubeadm quotes the token here; this one never prints it
            raise JoinError(f'{field}: Invalid value: "<redacted>": the bootstrap token is invalid', "")
    for h in opts["hashes"]:
        if not HASH_RE.match(h):
            raise JoinError(
                f'discovery.bootstrapToken.caCertHashes: Invalid value: "{h}": invalid hash '
                f'"{h}", expected a "type:value" format with type sha256',
                "",
            )
    if not opts["hashes"] and not opts["unsafe"]:
        raise JoinError(
            'discovery.bootstrapToken: Invalid value: "": using token-based discovery without '
            "caCertHashes can be unsafe. Set unsafeSkipCAVerification as true in your kubeadm config "
            "file or pass --discovery-token-unsafe-skip-ca-verification flag to continue",
            "",
        )


# --- crypto helpers (stdlib + openssl) ----------------------------------------------------------------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def jws_valid(detached: str, content: str, token_id: str, secret: str) -> bool:
    """The bootstrap signer's detached JWS (HS256 keyed by the token secret, kid = token id) over `content`."""
    parts = detached.split(".")
    if len(parts) != 3 or parts[1]:
        return False
    try:
        header = json.loads(_b64url_decode(parts[0]))
        signature = _b64url_decode(parts[2])
    except ValueError:
        return False
    if header.get("alg") != "HS256" or header.get("kid") != token_id:
        return False
    signing_input = f"{parts[0]}.{_b64url(content.encode())}".encode()
    return hmac.compare_digest(hmac.new(secret.encode(), signing_input, hashlib.sha256).digest(), signature)


def _pem_blocks(pem: str) -> list[bytes]:
    return [
        base64.b64decode("".join(m.split()))
        for m in re.findall(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", pem, re.S)
    ]


def _der_item(der: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start of content, end of content) of the DER item at pos."""
    tag, length = der[pos], der[pos + 1]
    pos += 2
    if length & 0x80:
        n = length & 0x7F
        length = int.from_bytes(der[pos : pos + n], "big")
        pos += n
    return tag, pos, pos + length


def spki_hash(cert_der: bytes) -> str:
    """sha256 of the certificate's DER SubjectPublicKeyInfo: kubeadm's CA public-key pin."""
    _t, cert_start, _e = _der_item(cert_der, 0)
    _t, tbs_start, _end = _der_item(cert_der, cert_start)
    pos = tbs_start
    if cert_der[pos] == 0xA0:  # [0] version
        pos = _der_item(cert_der, pos)[2]
    for _ in range(5):  # serial, signature algorithm, issuer, validity, subject
        pos = _der_item(cert_der, pos)[2]
    _t, _s, end = _der_item(cert_der, pos)
    return "sha256:" + hashlib.sha256(cert_der[pos:end]).hexdigest()


def _openssl() -> str:
    exe = shutil.which("openssl")
    if exe is None:
        raise JoinError("unable to generate a private key: openssl not found in PATH", "kubelet-start")
    return exe


def new_key_and_csr(node: str, workdir: str) -> tuple[str, str]:
    """An ECDSA P-256 key (as the kubelet makes) and a CSR for system:node:<name> / system:nodes."""
    key_path = os.path.join(workdir, "kubelet-client.key")
    old = os.umask(0o077)
    try:
        subprocess.run(
            [_openssl(), "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key_path],
            check=True,
            capture_output=True,
        )
        csr = subprocess.run(
            [_openssl(), "req", "-new", "-key", key_path, "-subj", f"/O=system:nodes/CN=system:node:{node}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except subprocess.CalledProcessError as exc:
        raise JoinError(f"unable to generate the kubelet client CSR: {exc.stderr}", "kubelet-start") from None
    finally:
        os.umask(old)
    with open(key_path, encoding="ascii") as f:
        return f.read(), csr


# --- files --------------------------------------------------------------------------------------------------------


def write_file(path: str, content: str, mode: int = 0o644) -> None:
    real = kl.host_path(path)
    os.makedirs(os.path.dirname(real), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(real), prefix=".tmp-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(content)
    os.chmod(tmp, mode)
    os.replace(tmp, real)


def kubelet_kubeconfig(server: str, ca_pem: str) -> str:
    """The kubeconfig the kubelet writes after its TLS bootstrap (credentials in the rotating pem file)."""
    current = f"{KUBELET_PKI}/kubelet-client-current.pem"
    return kl.dump_yaml(
        {
            "apiVersion": "v1",
            "clusters": [
                {
                    "cluster": {
                        "certificate-authority-data": base64.b64encode(ca_pem.encode()).decode(),
                        "server": server,
                    },
                    "name": "default-cluster",
                }
            ],
            "contexts": [
                {
                    "context": {"cluster": "default-cluster", "namespace": "default", "user": "default-auth"},
                    "name": "default-context",
                }
            ],
            "current-context": "default-context",
            "kind": "Config",
            "preferences": {},
            "users": [
                {"name": "default-auth", "user": {"client-certificate": current, "client-key": current}}
            ],
        }
    )


def default_kubelet_config() -> dict[str, Any]:
    """kubeadm's KubeletConfiguration defaults (what the kubelet-config ConfigMap holds on a kubeadm cluster)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"cacheTTL": "0s", "enabled": True},
            "x509": {"clientCAFile": CA_CRT},
        },
        "authorization": {
            "mode": "Webhook",
            "webhook": {"cacheAuthorizedTTL": "0s", "cacheUnauthorizedTTL": "0s"},
        },
        "cgroupDriver": "systemd",
        "clusterDNS": ["10.96.0.10"],
        "clusterDomain": "cluster.local",
        "containerRuntimeEndpoint": "",
        "cpuManagerReconcilePeriod": "0s",
        "crashLoopBackOff": {},
        "evictionPressureTransitionPeriod": "0s",
        "fileCheckFrequency": "0s",
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "httpCheckFrequency": "0s",
        "imageMaximumGCAge": "0s",
        "imageMinimumGCAge": "0s",
        "kind": "KubeletConfiguration",
        "logging": {
            "flushFrequency": 0,
            "options": {"json": {"infoBufferSize": "0"}, "text": {"infoBufferSize": "0"}},
            "verbosity": 0,
        },
        "memorySwap": {},
        "nodeStatusReportFrequency": "0s",
        "nodeStatusUpdateFrequency": "0s",
        "rotateCertificates": True,
        "runtimeRequestTimeout": "0s",
        "shutdownGracePeriod": "0s",
        "shutdownGracePeriodCriticalPods": "0s",
        "staticPodPath": "/etc/kubernetes/manifests",
        "streamingConnectionIdleTimeout": "0s",
        "syncFrequency": "0s",
        "volumeStatsAggPeriod": "0s",
    }


def taint_string(taint: dict[str, Any]) -> str:
    key, value, effect = taint.get("key", ""), taint.get("value"), taint.get("effect", "")
    return f"{key}={value}:{effect}" if value not in (None, "") else f"{key}:{effect}"


def kubeadm_flags(opts: dict[str, Any], node_name: str) -> str:
    """KUBELET_KUBEADM_ARGS as kubeadm builds it: its own flags, kubeletExtraArgs over them, sorted by name."""
    args: dict[str, str] = {}
    if opts["taints"]:
        args["register-with-taints"] = ",".join(taint_string(t) for t in opts["taints"])
    if node_name != socket.gethostname().lower():
        args["hostname-override"] = node_name
    args.update(opts["extra"])
    line = " ".join(f"--{k}={v}" for k, v in sorted(args.items()))
    return f'KUBELET_KUBEADM_ARGS="{line}"\n'


# --- join ---------------------------------------------------------------------------------------------------------


def preflight(opts: dict[str, Any]) -> None:
    say("[preflight] Running pre-flight checks")
    errors = []
    for path in (KUBELET_CONF, BOOTSTRAP_CONF, CA_CRT):
        check = "FileAvailable-" + path.replace("/", "-")
        if (
            os.path.exists(kl.host_path(path))
            and check.lower() not in opts["ignore"]
            and "all" not in opts["ignore"]
        ):
            errors.append(f"\t[ERROR {check}]: {path} already exists")
    if errors:
        raise JoinError(
            "[preflight] Some fatal errors occurred:\n" + "\n".join(errors) + "\n[preflight] If you "
            "know what you are doing, you can make a check non-fatal with `--ignore-preflight-errors=...`"
        )


def _server(endpoint: str) -> str:
    return endpoint if endpoint.startswith("https://") else f"https://{endpoint}"


def _retrying(what: str, timeout: float, call: Any) -> Any:
    """Retry connection failures until timeout, as kubeadm's discovery does; API errors are final."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except (OSError, http.client.HTTPException) as exc:
            if time.monotonic() > deadline:
                raise JoinError(f"couldn't validate the identity of the API Server: {what}: {exc}") from None
            time.sleep(1.0)


def discover(opts: dict[str, Any]) -> tuple[str, str]:
    """Token discovery: returns (server URL, CA PEM) from a cluster-info that the token and the pins vouch for."""
    token_id, secret = TOKEN_RE.match(opts["token"]).groups()  # type: ignore[union-attr]
    path = "/api/v1/namespaces/kube-public/configmaps/cluster-info"
    insecure = kl.ApiClient(_server(opts["endpoint"]), None, timeout=10)
    try:
        info = _retrying(
            "failed to request the cluster-info ConfigMap",
            opts["discovery_timeout"],
            lambda: insecure.request("GET", path),
        )
    except kl.ApiError as exc:
        raise JoinError(f"couldn't validate the identity of the API Server: {exc}") from None
    data = info.get("data") or {}
    kubeconfig = data.get("kubeconfig")
    if not kubeconfig:
        raise JoinError(
            "couldn't validate the identity of the API Server: there is no kubeconfig key in the "
            "cluster-info ConfigMap"
        )
    detached = data.get(f"jws-kubeconfig-{token_id}")
    has_jws = any(k.startswith("jws-kubeconfig-") for k in data)
    invalid_token = (
        f'token id "{token_id}" is invalid for this cluster or it has expired. Use "kubeadm token '
        'create" on the control-plane node to create a new valid token'
    )
    if has_jws:
        if not detached:
            raise JoinError(f"couldn't validate the identity of the API Server: {invalid_token}")
        if not jws_valid(detached, kubeconfig, token_id, secret):
            raise JoinError(
                "couldn't validate the identity of the API Server: failed to verify JWS signature of "
                "received cluster info object, can't trust this API Server"
            )
    cfg = kl.load_yaml(kubeconfig) or {}
    cluster = ((cfg.get("clusters") or [{}])[0]).get("cluster") or {}
    ca_pem = base64.b64decode(cluster.get("certificate-authority-data") or "").decode()
    server = cluster.get("server") or _server(opts["endpoint"])
    if opts["hashes"]:
        found = [spki_hash(der) for der in _pem_blocks(ca_pem)]
        if not set(found) & set(opts["hashes"]):
            raise JoinError(
                "couldn't validate the identity of the API Server: cluster CA found in cluster-info "
                f'ConfigMap is invalid: none of the public keys "{":".join(found)}" are pinned'
            )
    # Now the CA is trusted: fetch cluster-info again over verified TLS (with the token when it was not proven by
    # a signature, so a wrong token fails here, against the real server only).
    secure = kl.ApiClient(_server(opts["endpoint"]), ca_pem, token=None if has_jws else opts["token"])
    try:
        _retrying(
            "failed to request the cluster-info ConfigMap",
            opts["discovery_timeout"],
            lambda: secure.request("GET", path),
        )
    except kl.ApiError as exc:
        if exc.status == 401:
            raise JoinError(f"couldn't validate the identity of the API Server: {invalid_token}") from None
        raise JoinError(f"couldn't validate the identity of the API Server: {exc}") from None
    except ssl.SSLError as exc:
        raise JoinError(f"couldn't validate the identity of the API Server: {exc}") from None
    return server, ca_pem


def _optional_configmap(client: kl.ApiClient, name: str) -> dict[str, Any] | None:
    try:
        return client.request("GET", f"/api/v1/namespaces/kube-system/configmaps/{name}")
    except kl.ApiError as exc:
        if exc.status == 404:
            return None
        raise JoinError(f"unable to fetch the {name} ConfigMap: {exc}") from None


def tls_bootstrap(client: kl.ApiClient, node: str, timeout: float) -> tuple[str, str]:
    """Post a kubelet client CSR with the bootstrap token and wait for the signed certificate."""
    with tempfile.TemporaryDirectory(prefix="kubeadm-") as work:
        key, csr = new_key_and_csr(node, work)
    body = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-"},
        "spec": {
            "request": base64.b64encode(csr.encode()).decode(),
            "signerName": KUBELET_CLIENT_SIGNER,
            "usages": ["digital signature", "client auth"],
        },
    }
    try:
        created = client.request("POST", "/apis/certificates.k8s.io/v1/certificatesigningrequests", body)
    except kl.ApiError as exc:
        raise JoinError(f"failed to create the kubelet client CSR: {exc}", "kubelet-start") from None
    name = created["metadata"]["name"]
    deadline = time.monotonic() + timeout
    while True:
        got = client.request("GET", f"/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}")
        status = got.get("status") or {}
        for cond in status.get("conditions") or []:
            if cond.get("type") in ("Denied", "Failed"):
                raise JoinError(
                    f"certificate request was not signed: {cond.get('type').lower()}: "
                    f"{cond.get('message', '')}",
                    "kubelet-start",
                )
        if status.get("certificate"):
            return key, base64.b64decode(status["certificate"]).decode()
        if time.monotonic() > deadline:
            raise JoinError("timed out waiting for the condition", "kubelet-start")
        time.sleep(0.2)


def start_kubelet() -> bool:
    systemctl = shlex.split(os.environ.get("GPUREADY_LAB_SYSTEMCTL", "systemctl"))
    say("[kubelet-start] Starting the kubelet")
    try:
        for args in (["daemon-reload"], ["restart", "kubelet"]):
            subprocess.run([*systemctl, *args], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        say(f"[kubelet-start] WARNING: unable to start the kubelet service: [{detail.strip()}]")
        say("[kubelet-start] Please ensure kubelet is reloaded and running manually.")
        return False
    return True


def wait_for_node(server: str, ca_pem: str, node: str, timeout: float) -> None:
    pem = kl.host_path(f"{KUBELET_PKI}/kubelet-client-current.pem")
    client = kl.ApiClient(server, ca_pem, cert_file=pem, key_file=pem)
    say(f"[kubelet-check] Waiting for a healthy kubelet. This can take up to {_go_duration(timeout)}")
    start = time.monotonic()
    while True:
        try:
            client.request("GET", f"/api/v1/nodes/{node}")
            say(f"[kubelet-check] The kubelet is healthy after {time.monotonic() - start:.9f}s".rstrip("0"))
            return
        except (kl.ApiError, OSError, http.client.HTTPException):
            pass
        if time.monotonic() - start > timeout:
            raise JoinError(
                f"The kubelet is not healthy after {_go_duration(timeout)}", "kubelet-wait-bootstrap"
            )
        time.sleep(0.2)


def _go_duration(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s}s" if m else f"{s}s"


def join(argv: list[str]) -> int:
    opts = join_options(argv)
    validate(opts)
    preflight(opts)
    server, ca_pem = discover(opts)
    say('[preflight] Reading configuration from the "kubeadm-config" ConfigMap in namespace "kube-system"...')
    say(
        "[preflight] Use 'kubeadm init phase upload-config kubeadm --config your-config-file' to re-upload it."
    )
    bootstrap = kl.ApiClient(server, ca_pem, token=opts["tls_token"])
    _optional_configmap(bootstrap, "kubeadm-config")
    node = (opts["name"] or socket.gethostname()).lower()
    kubelet_cm = _optional_configmap(bootstrap, "kubelet-config")
    config = default_kubelet_config()
    if kubelet_cm is not None:
        config = kl.load_yaml((kubelet_cm.get("data") or {}).get("kubelet") or "") or config
    cri = opts["cri"] or DEFAULT_CRI
    if not cri.startswith("unix://"):
        cri = "unix://" + cri
    config = {**config, "containerRuntimeEndpoint": cri}
    write_file(CA_CRT, ca_pem)
    say(f'[kubelet-start] Writing kubelet configuration to file "{KUBELET_CONFIG}"')
    write_file(KUBELET_CONFIG, kl.dump_yaml(dict(sorted(config.items()))))
    write_file(
        INSTANCE_CONFIG,
        kl.dump_yaml(
            {
                "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "containerRuntimeEndpoint": cri,
                "kind": "KubeletConfiguration",
            }
        ),
    )
    say(f'[kubelet-start] Writing kubelet environment file with flags to file "{FLAGS_ENV}"')
    write_file(FLAGS_ENV, kubeadm_flags(opts, node))
    say("[kubelet-start] Waiting for the kubelet to perform the TLS Bootstrap")
    key, cert = tls_bootstrap(bootstrap, node, opts["tls_timeout"])
    stamp = datetime.now(UTC).strftime("%Y-%m-%d-%H-%M-%S")
    pem_name = f"kubelet-client-{stamp}.pem"
    write_file(f"{KUBELET_PKI}/{pem_name}", cert + key, 0o600)
    current = kl.host_path(f"{KUBELET_PKI}/kubelet-client-current.pem")
    if os.path.lexists(current):
        os.unlink(current)
    os.symlink(kl.host_path(f"{KUBELET_PKI}/{pem_name}"), current)
    write_file(KUBELET_CONF, kubelet_kubeconfig(server, ca_pem), 0o600)
    if start_kubelet():
        wait_for_node(server, ca_pem, node, opts["health_timeout"])
    say()
    say("This node has joined the cluster:")
    say("* Certificate signing request was sent to apiserver and a response was received.")
    say("* The Kubelet was informed of the new secure connection details.")
    say()
    say("Run 'kubectl get nodes' on the control-plane to see this node join the cluster.")
    say()
    return 0


# --- reset and version --------------------------------------------------------------------------------------------


def reset(argv: list[str]) -> int:
    force = any(a in ("-f", "--force") for a in argv)
    if not force:
        print(
            "[reset] WARNING: Changes made to this host by 'kubeadm init' or 'kubeadm join' will be reverted."
        )
        answer = input("[reset] Are you sure you want to proceed? [y/N]: ") if sys.stdin.isatty() else ""
        if answer.strip().lower() not in ("y", "yes"):
            print(
                "error execution phase preflight: won't proceed; the user didn't answer (Y|y) in order to "
                f"continue\n{STACK_HINT}",
                file=sys.stderr,
            )
            return 1
    say("[preflight] Running pre-flight checks")
    say("[reset] Stopping the kubelet service")
    systemctl = shlex.split(os.environ.get("GPUREADY_LAB_SYSTEMCTL", "systemctl"))
    with contextlib.suppress(OSError):
        subprocess.run([*systemctl, "stop", "kubelet"], capture_output=True, check=False)
    say(f'[reset] Unmounting mounted directories in "{KUBELET_DIR}"')
    dirs = ["/etc/kubernetes/manifests", KUBELET_DIR, "/etc/kubernetes/pki"]
    say(f"[reset] Deleting contents of directories: [{' '.join(dirs)}]")
    for d in dirs:
        real = kl.host_path(d)
        if not os.path.isdir(real):
            continue
        for entry in os.listdir(real):
            path = os.path.join(real, entry)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
    files = [
        f"/etc/kubernetes/{n}.conf"
        for n in ("admin", "super-admin", "kubelet", "bootstrap-kubelet", "controller-manager", "scheduler")
    ]
    say(f"[reset] Deleting files: [{' '.join(files)}]")
    for f in files:
        if os.path.lexists(kl.host_path(f)):
            os.unlink(kl.host_path(f))
    say()
    say("The reset process does not perform cleanup of CNI plugin configuration,")
    say("network filtering rules and kubeconfig files.")
    say()
    say("For information on how to perform this cleanup manually, please see:")
    say("    https://k8s.io/docs/reference/setup-tools/kubeadm/kubeadm-reset/")
    say()
    return 0


def version_info() -> dict[str, str]:
    v = kl.version()
    major, minor = v.split(".")[:2]
    return {
        "major": major,
        "minor": minor,
        "emulationMajor": "",
        "emulationMinor": "",
        "minCompatibilityMajor": "",
        "minCompatibilityMinor": "",
        "gitVersion": f"v{v}",
        "gitCommit": BUILD["gitCommit"],
        "gitTreeState": "clean",
        "buildDate": BUILD["buildDate"],
        "goVersion": BUILD["goVersion"],
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def version_cmd(argv: list[str]) -> int:
    output = ""
    for i, a in enumerate(argv):
        if a.startswith(("-o=", "--output=")):
            output = a.split("=", 1)[1]
        elif a in ("-o", "--output") and i + 1 < len(argv):
            output = argv[i + 1]
    info = version_info()
    if output == "short":
        print(info["gitVersion"])
    elif output == "json":
        print(json.dumps({"clientVersion": info}, indent=2))
    elif output == "yaml":
        print(kl.dump_yaml({"clientVersion": info}), end="")
    elif output:
        print(f"error: invalid output format: {output}", file=sys.stderr)
        return 1
    else:
        go_names = {
            "major": "Major",
            "minor": "Minor",
            "emulationMajor": "EmulationMajor",
            "emulationMinor": "EmulationMinor",
            "minCompatibilityMajor": "MinCompatibilityMajor",
            "minCompatibilityMinor": "MinCompatibilityMinor",
            "gitVersion": "GitVersion",
            "gitCommit": "GitCommit",
            "gitTreeState": "GitTreeState",
            "buildDate": "BuildDate",
            "goVersion": "GoVersion",
            "compiler": "Compiler",
            "platform": "Platform",
        }
        fields = ", ".join(f'{go_names[k]}:"{v}"' for k, v in info.items())
        print(f"kubeadm version: &version.Info{{{fields}}}")
    return 0


USAGE = """\
Usage:
  kubeadm [command]

Available Commands:
  join        Run this on any machine you wish to join an existing cluster
  reset       Performs a best effort revert of changes made to this host by 'kubeadm init' or 'kubeadm join'
  version     Print the version of kubeadm
"""


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0
    command, rest = argv[0], argv[1:]
    try:
        if command == "join":
            return join(rest)
        if command == "reset":
            return reset(rest)
        if command == "version":
            return version_cmd(rest)
    except JoinError as exc:
        if exc.phase:
            print(f"error execution phase {exc.phase}: {exc}\n{STACK_HINT}", file=sys.stderr)
        else:
            print(f"{exc}\n{STACK_HINT}", file=sys.stderr)
        return 1
    except kl.ApiError as exc:
        print(f"error execution phase kubelet-start: {exc}\n{STACK_HINT}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    print(
        f'Error: unknown command "{command}" for "kubeadm"\nRun \'kubeadm --help\' for usage.',
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
