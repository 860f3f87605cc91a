"""A real Kubernetes control plane started the way ``kubeadm init`` would, minus the kubelet.

The lab has no kubelet on its control-plane machine, so the static pods ``kubeadm init`` would hand to one are run
here as plain processes instead. Everything else is the real ``kubeadm`` binary of the pinned version:

1. ``kubeadm init phase certs all`` and ``kubeconfig admin|super-admin|controller-manager|scheduler`` write the PKI
   and the kubeconfigs; ``kubeadm init phase control-plane all`` and ``etcd local`` write the static-pod manifests.
   The processes run exactly the ``command`` of those manifests (paths re-rooted, see below), so every flag is the
   one kubeadm of that version gives: Node,RBAC authorization, NodeRestriction on top of the default admission
   plugins (PodSecurity, ResourceQuota, ...), bootstrap-token authentication, the kubelet client certificate, the
   front-proxy, the service-account issuer and keys, the controller-manager's ``*,bootstrapsigner,tokencleaner``
   controllers and CSR signing, node CIDR allocation, and so on. What the lab needs differently is said to kubeadm
   through the config file's ``extraArgs`` so that the manifests on disk show precisely what runs.
2. Once ``/readyz`` answers, ``kubeadm init phase upload-config all`` and ``bootstrap-token`` run against the live
   apiserver: the kubeadm-config and kubelet-config ConfigMaps, the bootstrap token, the RBAC that lets joining
   nodes post CSRs, get them auto-approved and rotate their client certificates, and the ``cluster-info``
   ConfigMap, which the controller-manager's real bootstrap signer then signs. The components start one after the
   other, each once what it talks to serves (etcd, apiserver, then controller-manager and scheduler), so none
   starts degraded: a scheduler started before RBAC's bootstrap roles exist runs without its delegated
   authentication config.

Every kubeadm call runs with ``--rootfs <state_dir>``: kubeadm chroots there, so its fixed ``/etc/kubernetes`` (the
manifest folder, the kubeconfig folder, even ``--dry-run``'s scratch folder) is ``<state_dir>/etc/kubernetes`` and
nothing lands in the machine's own ``/etc``. Its default ``--kubeconfig`` is then this cluster's admin.conf, which
makes kubeadm bootstrap admin.conf exactly like ``kubeadm init`` does (the first phase that needs a client, here
upload-config, does it): admin.conf's group ``kubeadm:cluster-admins`` gets its ClusterRoleBinding, created with
super-admin.conf (``system:masters``). With an explicit ``--kubeconfig`` kubeadm would skip that.

Lab-specific choices (each documented where it is made):

* etcd is 3.6, built from its Go module; kubeadm is told its version (``etcd.local.imageTag``) and renders that
  version's spelling of its flags.
  It runs with ``--unsafe-no-fsync`` (a throwaway lab: speed over durability) and keeps its data in the state dir.
* Every port is chosen free so that two control planes can run on one machine: the apiserver prefers 6443 on
  `address` (where alone it listens: ``--bind-address``); etcd (client, peer, metrics), the controller-manager and
  the scheduler keep kubeadm's defaults (2379, 2380, 2381, 10257, 10259) when free and listen on 127.0.0.1 only.
* kubeadm refuses a loopback advertise address, and since 1.36 connects to the advertise address itself (not to
  the kubeconfigs' server) to bootstrap the admin user: a control plane needs an address it listens on that is
  not loopback, so it runs in a lab network namespace (``start`` refuses a loopback address).
* With `netns`, every process, kubeadm included, runs in that network namespace (``ip netns exec``) and the ports
  are probed inside it.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import re
import secrets
import shutil
import signal
import socket
import string
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuready.lab import network
from gpuready.lab.cluster.binaries import KUBE_COMMANDS, KubeBinaries, PrerequisiteError
from gpuready.lab.state import write_atomic

Progress = Callable[[str], None]

# Start order; stop() goes the other way.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
READY_TIMEOUT_S = 60.0
NODE_NAME = "lab-control-plane"
SERVICE_SUBNET = "10.96.0.0/12"
# a /24 per node (the controller-manager's default mask): a /14 holds 1024 nodes (a /16 only 256, and the node IPAM
# controller would retry the others for ever, ten CIDRNotAvailable events a second at 1000 nodes)
POD_SUBNET = "10.244.0.0/14"
TOKEN_GROUP = "system:bootstrappers:kubeadm:default-node-token"
# kubeadm's own default ports; each is kept when free, else the kernel picks one.
DEFAULT_PORTS = {
    "kube-apiserver": 6443,
    "etcd-client": 2379,
    "etcd-peer": 2380,
    "etcd-metrics": 2381,
    "kube-controller-manager": 10257,
    "kube-scheduler": 10259,
}
_PROXY_VARS = ("http_proxy", "https_proxy", "no_proxy", "all_proxy")
_LOG_TAIL_LINES = 30

# The processes this Python process started, so that stop() can reap them (no zombies, no ResourceWarning).
_children: dict[int, subprocess.Popen[bytes]] = {}


class ControlPlaneError(RuntimeError):
    """The control plane could not be started or stopped; the message names the component and its log's tail."""


@dataclass(frozen=True)
class Layout:
    """kubeadm's file layout inside the state dir, which is kubeadm's ``--rootfs``."""

    root: Path

    @property
    def kubernetes_dir(self) -> Path:
        return self.root / "etc/kubernetes"

    @property
    def config(self) -> Path:
        return self.kubernetes_dir / "kubeadm.yaml"

    @property
    def pki(self) -> Path:
        return self.kubernetes_dir / "pki"

    @property
    def manifests(self) -> Path:
        return self.kubernetes_dir / "manifests"

    def kubeconfig(self, name: str) -> Path:
        return self.kubernetes_dir / f"{name}.conf"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def log(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    @property
    def join_token(self) -> Path:
        return self.root / "join-token"

    def chrooted(self, path: Path) -> str:
        """`path` as kubeadm sees it from inside its chroot."""
        return "/" + str(path.relative_to(self.root))


# --- start ------------------------------------------------------------------------------------------------------


def start(
    state_dir: Path,
    binaries: KubeBinaries,
    etcd: Path,
    *,
    address: str,
    netns: str | None = None,
    progress: Progress = print,
    node_monitor_grace_period: str = "40s",
    advertise_address: str | None = None,
) -> dict[str, Any]:
    """Start etcd, kube-apiserver, kube-controller-manager and kube-scheduler as kubeadm would; return the entry.

    Blocks until the apiserver is ready, kubeadm has uploaded its config and created the bootstrap token, the
    bootstrap signer has signed ``cluster-info`` and the controller-manager and scheduler hold their leader leases,
    so that a caller can join nodes at once. On any failure everything started is stopped again and
    `ControlPlaneError` names the component at fault with the tail of its log.

    A state dir from an earlier start is reused: kubeadm keeps its PKI ("Using existing ...") and etcd its data; the
    kubeconfigs, manifests and bootstrap token are made anew (the ports may differ). Such a restart takes up to 15 s
    longer: the stopped controller-manager does not release its leader lease, and the new one waits it out.

    The entry keeps the keys the inventory reads (``pid`` is the apiserver's, ``url``, ``endpoint``, ``kubeconfig``,
    ``ca_cert_hash``, ``join_token_file``, ``log``) and adds ``pids`` (every component's, for `stop`), ``ports``,
    ``version`` and ``netns``.
    """
    _require_binaries(binaries, etcd, netns)
    state_dir = Path(state_dir).resolve()
    layout = Layout(state_dir)
    layout.logs.mkdir(parents=True, exist_ok=True)
    if _is_loopback(advertise_address or address):
        raise ControlPlaneError(
            f"the control plane cannot advertise the loopback address {address}: kubeadm refuses it, and since 1.36 "
            "its upload-config phase connects to the advertise address; give it a lab network namespace "
            "(gpuready.lab.network) and an address there"
        )
    advertise = advertise_address or address
    started = time.monotonic()

    ports = _free_ports(address, netns)
    token = _new_token()
    etcd_version = _etcd_version(etcd)
    write_atomic(
        layout.config,
        _kubeadm_config(
            binaries.version, etcd_version, address, advertise, ports, token, node_monitor_grace_period
        ),
        mode=0o600,
    )
    progress(
        f"control plane v{binaries.version}: kubeadm certs, kubeconfigs and manifests in {layout.kubernetes_dir}"
    )
    for name in ("admin", "super-admin", "controller-manager", "scheduler"):
        layout.kubeconfig(name).unlink(missing_ok=True)  # kubeadm refuses one that names another endpoint
    _kubeadm(binaries, layout, netns, "certs", "all")
    for name in ("admin", "super-admin", "controller-manager", "scheduler"):
        _kubeadm(binaries, layout, netns, "kubeconfig", name)
    _kubeadm(binaries, layout, netns, "control-plane", "all")
    _kubeadm(binaries, layout, netns, "etcd", "local")
    endpoint = _host_port(address, ports["kube-apiserver"])
    url = f"https://{endpoint}"
    if advertise != address:
        for name in ("controller-manager", "scheduler"):
            _point_kubeconfig_at(layout.kubeconfig(name), url)
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(component: str) -> None:
        binary = etcd if component == "etcd" else binaries.path(component)
        procs[component] = _spawn(_manifest_command(layout, component, binary), layout, component, netns)
        progress(f"control plane: {component} started (pid {procs[component].pid})")

    try:
        # One after the other, each once what it needs serves: no component starts against a missing dependency
        # (the scheduler would then run without its delegated authentication config, for one).
        deadline = time.monotonic() + READY_TIMEOUT_S
        spawn("etcd")
        _wait_listening(layout, procs, "etcd", ports["etcd-client"], deadline)
        spawn("kube-apiserver")
        _wait_ready(layout, procs, url, deadline, progress)
        progress(
            f"control plane: {url}/readyz ok after {time.monotonic() - started:.1f}s; kubeadm init phase "
            "upload-config all, then bootstrap-token"
        )
        _kubeadm(binaries, layout, netns, "upload-config", "all", procs=procs)
        _require_admin_authorised(layout)
        earlier = _leaders(layout)  # a state dir's earlier run may have left its holders in the leases
        spawn("kube-controller-manager")
        spawn("kube-scheduler")
        _kubeadm(binaries, layout, netns, "bootstrap-token", procs=procs, secret=token.split(".")[1])
        deadline = time.monotonic() + READY_TIMEOUT_S
        _wait_signed_and_leaders(layout, procs, token.split(".")[0], earlier, deadline, progress)
    except BaseException as failure:
        try:
            stop_pids({c: p.pid for c, p in procs.items()}, timeout=5.0)
        except ControlPlaneError as leftover:
            failure.add_note(f"and stopping what was started failed: {leftover}")
        raise
    write_atomic(layout.join_token, token + "\n", mode=0o600)
    progress(f"control plane v{binaries.version}: up at {url} in {time.monotonic() - started:.1f}s")
    return {
        "pids": {c: p.pid for c, p in procs.items()},
        "pid": procs["kube-apiserver"].pid,
        "url": url,
        "endpoint": endpoint,
        "kubeconfig": str(layout.kubeconfig("admin")),
        "ca_cert_hash": ca_cert_hash((layout.pki / "ca.crt").read_bytes()),
        "join_token_file": str(layout.join_token),
        "log": str(layout.logs),
        "version": binaries.version,
        "ports": ports,
        "netns": netns,
    }


def ca_cert_hash(ca_pem: bytes) -> str:
    """``sha256:<hex>`` of the CA's SubjectPublicKeyInfo: ``kubeadm join --discovery-token-ca-cert-hash`` pins it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    spki = (
        x509.load_pem_x509_certificate(ca_pem)
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def _require_binaries(binaries: KubeBinaries, etcd: Path, netns: str | None) -> None:
    missing = [str(binaries.path(c)) for c in KUBE_COMMANDS if not os.access(binaries.path(c), os.X_OK)]
    problems = []
    if missing:
        problems.append(
            f"the Kubernetes v{binaries.version} control plane is not built ({', '.join(missing)} missing): "
            f"gpuready.lab.cluster.binaries.build_kube({binaries.version!r}, progress) builds it"
        )
    if not os.access(etcd, os.X_OK):
        problems.append(
            f"etcd is missing ({etcd}): gpuready.lab.cluster.binaries.ensure_etcd(progress) builds it"
        )
    if netns and not shutil.which("ip"):
        problems.append(
            "`ip` (iproute2) is not on PATH: it runs the control plane in network namespace " + netns
        )
    if problems:
        raise PrerequisiteError("; ".join(problems))


def _is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


def _host_port(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _new_token() -> str:
    """A kubeadm bootstrap token, ``[a-z0-9]{6}.[a-z0-9]{16}``."""
    alphabet = string.ascii_lowercase + string.digits
    return (
        "".join(secrets.choice(alphabet) for _ in range(6))
        + "."
        + "".join(secrets.choice(alphabet) for _ in range(16))
    )


def _etcd_version(etcd: Path) -> str:
    """etcd's version: kubeadm renders 3.5's ``--experimental-*`` flags or 3.6's ``--feature-gates`` from it."""
    out = subprocess.run([str(etcd), "--version"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    found = re.search(r"etcd Version: (\d+\.\d+\.\d+)", out.stdout)
    if out.returncode != 0 or not found:
        raise ControlPlaneError(
            f"{etcd} --version did not name a version: {(out.stdout + out.stderr).strip()}"
        )
    return found[1]


def _args(**values: str) -> list[dict[str, str]]:
    return [{"name": name.replace("_", "-"), "value": value} for name, value in values.items()]


def _kubeadm_config(
    version: str,
    etcd_version: str,
    address: str,
    advertise: str,
    ports: dict[str, int],
    token: str,
    node_monitor_grace_period: str,
) -> str:
    """kubeadm's InitConfiguration + ClusterConfiguration (v1beta4). Holds the bootstrap token: written 0600."""
    peer = f"https://127.0.0.1:{ports['etcd-peer']}"
    client = f"https://127.0.0.1:{ports['etcd-client']}"
    init = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "InitConfiguration",
        "bootstrapTokens": [
            {
                "token": token,
                "ttl": "24h0m0s",
                "description": "gpuready lab: nodes join with it",
                "groups": [TOKEN_GROUP],
                "usages": ["signing", "authentication"],
            }
        ],
        "localAPIEndpoint": {"advertiseAddress": advertise, "bindPort": ports["kube-apiserver"]},
        # An explicit CRI socket spares kubeadm probing this machine for a container runtime; no kubelet uses it.
        "nodeRegistration": {"name": NODE_NAME, "criSocket": "unix:///run/containerd/containerd.sock"},
    }
    cluster = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "ClusterConfiguration",
        "kubernetesVersion": f"v{version}",
        "certificatesDir": "/etc/kubernetes/pki",
        "controlPlaneEndpoint": _host_port(address, ports["kube-apiserver"]),
        "networking": {
            "serviceSubnet": SERVICE_SUBNET,
            "podSubnet": POD_SUBNET,
            "dnsDomain": "cluster.local",
        },
        "apiServer": {
            "certSANs": [address],
            "extraArgs": _args(bind_address=address, etcd_servers=client),
        },
        "controllerManager": {
            "extraArgs": _args(
                secure_port=str(ports["kube-controller-manager"]),
                node_monitor_grace_period=node_monitor_grace_period,
            )
        },
        "scheduler": {"extraArgs": _args(secure_port=str(ports["kube-scheduler"]))},
        "etcd": {
            "local": {
                "dataDir": "/var/lib/etcd",
                "imageTag": f"{etcd_version}-0",  # kubeadm picks etcd's flag spelling from its version
                "extraArgs": _args(
                    listen_client_urls=client,
                    advertise_client_urls=client,
                    listen_peer_urls=peer,
                    initial_advertise_peer_urls=peer,
                    initial_cluster=f"{NODE_NAME}={peer}",
                    listen_metrics_urls=f"http://127.0.0.1:{ports['etcd-metrics']}",
                    unsafe_no_fsync="true",
                ),
            }
        },
    }
    return yaml.safe_dump_all([init, cluster], sort_keys=False)


def _env() -> dict[str, str]:
    """The machine's environment without a proxy (the control plane is local) or a KUBECONFIG (flags say which)."""
    return {
        k: v
        for k, v in os.environ.items()
        if k.lower() not in _PROXY_VARS and k not in ("KUBECONFIG", "NOTIFY_SOCKET")
    }


def _in_netns(argv: list[str], netns: str | None) -> list[str]:
    return network.exec_argv(netns, argv) if netns else argv


def _kubeadm(
    binaries: KubeBinaries,
    layout: Layout,
    netns: str | None,
    *phase: str,
    procs: dict[str, subprocess.Popen[bytes]] | None = None,
    secret: str | None = None,
) -> None:
    """``kubeadm init phase <phase>`` chrooted into the state dir; its output is appended to logs/kubeadm.log.

    The bootstrap-token phase prints the token: `secret` is blotted out of what is logged or raised.
    """
    argv = [
        str(binaries.path("kubeadm")), "init", "phase", *phase,
        "--config", layout.chrooted(layout.config), "--rootfs", str(layout.root),
    ]  # fmt: skip
    try:
        result = subprocess.run(
            _in_netns(argv, netns),
            cwd=layout.root,
            env=_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=READY_TIMEOUT_S * 2,
        )
    except subprocess.TimeoutExpired as exc:
        raise ControlPlaneError(f"kubeadm init phase {' '.join(phase)} hung for {exc.timeout:.0f}s") from exc
    output = result.stdout + result.stderr
    if secret:
        output = output.replace(secret, "<redacted>")
    with open(layout.log("kubeadm"), "a") as log:
        log.write(f"$ kubeadm init phase {' '.join(phase)}\n{output}")
    if result.returncode != 0:
        if procs:
            _raise_if_exited(layout, procs)
        tail = "\n".join(output.strip().splitlines()[-_LOG_TAIL_LINES:])
        raise ControlPlaneError(
            f"kubeadm init phase {' '.join(phase)} failed (exit {result.returncode}):\n{tail}"
        )


def _point_kubeconfig_at(path: Path, server: str) -> None:
    config = yaml.safe_load(path.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = server
    write_atomic(path, yaml.safe_dump(config, sort_keys=False), mode=0o600)


def _manifest_command(layout: Layout, component: str, binary: Path) -> list[str]:
    """The container command of kubeadm's static-pod manifest, run from `binary` with its paths under the root.

    kubeadm wrote the manifest from inside its chroot, so every absolute path in a ``--flag=/path`` is one under
    the state dir (the manifests hold no other absolute paths: URLs and addresses are not paths).
    """
    manifest = yaml.safe_load((layout.manifests / f"{component}.yaml").read_text())
    (container,) = [c for c in manifest["spec"]["containers"] if c["name"] == component]
    command = list(container["command"]) + list(container.get("args") or [])
    argv = [str(binary)]
    for arg in command[1:]:
        name, eq, value = arg.partition("=")
        argv.append(f"{name}={layout.root}{value}" if eq and value.startswith("/") else arg)
    return argv


def _spawn(argv: list[str], layout: Layout, component: str, netns: str | None) -> subprocess.Popen[bytes]:
    """A component as a plain process in its own session; stdout and stderr go to its own log."""
    with open(layout.log(component), "ab") as log:
        log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            _in_netns(argv, netns),
            cwd=layout.root,
            env=_env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _children[proc.pid] = proc
    return proc


def _log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def _raise_if_exited(layout: Layout, procs: dict[str, subprocess.Popen[bytes]]) -> None:
    for component, proc in procs.items():  # start order: the first to die is usually the cause
        if proc.poll() is not None:
            raise ControlPlaneError(
                f"{component} exited (status {proc.returncode}); the tail of {layout.log(component)}:\n"
                + _log_tail(layout.log(component))
            )


def _not_ready(layout: Layout, component: str, what: str) -> ControlPlaneError:
    return ControlPlaneError(
        f"{component} did not become ready in {READY_TIMEOUT_S:.0f}s ({what}); the tail of "
        f"{layout.log(component)}:\n{_log_tail(layout.log(component))}"
    )


def _wait_listening(
    layout: Layout, procs: dict[str, subprocess.Popen[bytes]], component: str, port: int, deadline: float
) -> None:
    """Until `component` listens on TCP `port`, read from its own /proc/<pid>/net: right in any network namespace."""
    pid = procs[component].pid
    while not _listening(pid, port):
        _raise_if_exited(layout, procs)
        if time.monotonic() > deadline:
            raise _not_ready(layout, component, f"nothing listens on port {port}")
        time.sleep(0.05)


def _listening(pid: int, port: int) -> bool:
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                return True
    return False


@contextlib.contextmanager
def _api_client(kubeconfig: Path) -> Iterator[Any]:
    from kubernetes import config

    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        yield api
    finally:
        api.close()


def _wait_ready(
    layout: Layout, procs: dict[str, subprocess.Popen[bytes]], url: str, deadline: float, progress: Progress
) -> None:
    """Poll ``/readyz`` with admin.conf's client certificate, verifying the server against the cluster CA.

    Until RBAC's bootstrap roles exist the answer is 403 (``/readyz`` is open to every authenticated user only
    through ``system:public-info-viewer``), then 500 with the checks still failing, then 200.
    """
    import urllib3

    last, shown = "no answer yet", 0.0
    with _api_client(layout.kubeconfig("admin")) as api:
        pool = api.rest_client.pool_manager
        while True:
            _raise_if_exited(layout, procs)
            try:
                response = pool.request(
                    "GET", f"{url}/readyz?verbose", timeout=urllib3.Timeout(total=3), retries=False
                )
                body = response.data.decode(errors="replace")
                if response.status == 200:
                    return
                failing = [line for line in body.splitlines() if line.startswith("[-]")]
                last = f"HTTP {response.status}: " + ("; ".join(failing) or body.strip()[:300])
            except urllib3.exceptions.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            now = time.monotonic()
            if now > deadline:
                raise _not_ready(layout, "kube-apiserver", f"last /readyz answer: {last}")
            if now - shown >= 5:
                shown = now
                progress(f"  waiting for /readyz: {last}")
            time.sleep(0.2)


def _require_admin_authorised(layout: Layout) -> None:
    """admin.conf must be a cluster admin now: kubeadm's first client bootstraps the ``kubeadm:cluster-admins``
    binding (with super-admin.conf) whenever it uses the default admin.conf, as it does under ``--rootfs``. Should a
    kubeadm stop doing so, the binding is created here exactly as kubeadm creates it."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    def allowed() -> bool:
        with _api_client(layout.kubeconfig("admin")) as api:
            review = client.AuthorizationV1Api(api).create_self_subject_access_review(
                # the client serialises a plain dict body as it does a model; its annotations name only the model
                {"spec": {"resourceAttributes": {"verb": "*", "group": "*", "resource": "*"}}}  # type: ignore[arg-type]
            )
            return review.status is not None and bool(review.status.allowed)

    if allowed():
        return
    with _api_client(layout.kubeconfig("super-admin")) as api:
        binding = {
            "metadata": {"name": "kubeadm:cluster-admins"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "kubeadm:cluster-admins"}
            ],
        }
        try:
            # a plain dict body is serialised as a model is; the client's annotations name only the model
            client.RbacAuthorizationV1Api(api).create_cluster_role_binding(binding)  # type: ignore[arg-type]
        except ApiException as exc:
            if exc.status != 409:
                raise
    deadline = time.monotonic() + 10
    while not allowed():
        if time.monotonic() > deadline:
            raise ControlPlaneError("admin.conf (group kubeadm:cluster-admins) is still not a cluster admin")
        time.sleep(0.2)


def _wait_signed_and_leaders(
    layout: Layout,
    procs: dict[str, subprocess.Popen[bytes]],
    token_id: str,
    earlier: dict[str, str | None],
    deadline: float,
    progress: Progress,
) -> None:
    """Ready means joinable: cluster-info signed by the controller-manager's bootstrap signer for this token, and
    the controller-manager and scheduler each holding its leader lease (both connected and authorised). A holder
    named in `earlier` is a process of an earlier start (each process has its own identity), not one of these."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    waiting = {
        "kube-controller-manager": f"its lease and cluster-info signed (jws-kubeconfig-{token_id})",
        "kube-scheduler": "the kube-scheduler leader lease",
    }
    shown = False
    with _api_client(layout.kubeconfig("admin")) as api:
        core, coordination = client.CoreV1Api(api), client.CoordinationV1Api(api)
        while True:
            _raise_if_exited(layout, procs)
            try:
                info = core.read_namespaced_config_map("cluster-info", "kube-public")
                leaders = {name: _lease_holder(coordination, name) for name in waiting}
            except ApiException as exc:
                raise ControlPlaneError(f"reading cluster-info and the leader leases failed: {exc}") from exc
            signed = f"jws-kubeconfig-{token_id}" in (info.data or {})
            for name, holder in leaders.items():
                if holder and holder != earlier.get(name) and (signed or name != "kube-controller-manager"):
                    waiting.pop(name)
            if not waiting:
                return
            if time.monotonic() > deadline:
                component, what = next(iter(waiting.items()))
                raise _not_ready(layout, component, f"waited for {what}")
            if not shown:
                shown = True
                progress("  waiting for " + "; ".join(f"{c}: {what}" for c, what in waiting.items()))
            time.sleep(0.2)


def _leaders(layout: Layout) -> dict[str, str | None]:
    from kubernetes import client

    with _api_client(layout.kubeconfig("admin")) as api:
        coordination = client.CoordinationV1Api(api)
        return {
            name: _lease_holder(coordination, name) for name in ("kube-controller-manager", "kube-scheduler")
        }


def _lease_holder(coordination: Any, name: str) -> str | None:
    from kubernetes.client.exceptions import ApiException

    try:
        return coordination.read_namespaced_lease(name, "kube-system").spec.holder_identity
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


# --- ports ------------------------------------------------------------------------------------------------------


def _free_ports(address: str, netns: str | None) -> dict[str, int]:
    """A port per listener: the apiserver's on `address`, the others on 127.0.0.1, each kubeadm's default when free.

    Probed where the processes will listen: with `netns`, the sockets are created inside that namespace (a socket
    belongs to the namespace it was made in), so a namespace shared by two control planes gives each its own ports.
    All sockets stay open until every port is chosen, so the answers are distinct.
    """
    chosen: dict[str, int] = {}
    with contextlib.ExitStack() as stack:
        for name, preferred in DEFAULT_PORTS.items():
            host = address if name == "kube-apiserver" else "127.0.0.1"
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            for port in (preferred, 0):
                with network.entered(netns) if netns else contextlib.nullcontext():
                    sock = stack.enter_context(socket.socket(family, socket.SOCK_STREAM))
                # Like the Go servers (SO_REUSEADDR), a port that only lingers in TIME_WAIT after an earlier
                # control plane counts as free; listening makes each answer exclusive until all are chosen.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((host, port))
                    sock.listen(1)
                except OSError as exc:
                    if port:
                        continue
                    where = f"network namespace {netns}" if netns else "this machine"
                    raise ControlPlaneError(
                        f"cannot bind {host} in {where} for the {name} port ({exc}): is the address there and "
                        "the loopback interface up?"
                    ) from exc
                chosen[name] = sock.getsockname()[1]
                break
    return chosen


# --- stop -------------------------------------------------------------------------------------------------------


def stop(entry: dict[str, Any], timeout: float = 10.0) -> None:
    """Stop every component (scheduler, controller-manager, apiserver, etcd): SIGTERM, wait, SIGKILL; verify each is
    gone. Safe to call twice and on a half-started entry; a pid that now belongs to another program is left alone.
    """
    pids = dict(entry.get("pids") or {})
    if not pids and entry.get("pid"):
        pids = {"kube-apiserver": entry["pid"]}
    stop_pids(pids, timeout)


def stop_pids(pids: dict[str, int], timeout: float) -> None:
    """Stop each `name -> pid` (control plane components in reverse start order, then the rest): SIGTERM, wait,
    SIGKILL; a pid whose program is no longer `name` (its binary or ``python -m name``) is left alone."""
    order = [c for c in reversed(COMPONENTS) if c in pids] + [c for c in pids if c not in COMPONENTS]
    survivors = []
    for component in order:
        pid = pids[component]
        if not _is_running(pid, component):
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if not _wait_gone(pid, component, timeout):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if not _wait_gone(pid, component, 5.0):
                survivors.append(f"{component} (pid {pid})")
    if survivors:
        raise ControlPlaneError(f"still running after SIGKILL: {', '.join(survivors)}")


def _wait_gone(pid: int, component: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _is_running(pid, component):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _is_running(pid: int, component: str) -> bool:
    """Whether `pid` is still `component`: reaps our own children; a zombie or a reused pid counts as gone."""
    child = _children.get(pid)
    if child is not None:
        if child.poll() is None:
            return True
        _children.pop(pid, None)
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    if state == b"Z":  # reap it if it is ours (a child started elsewhere in this process)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        return False
    # the binary itself, or a Python module run with -m (the node agent)
    return state != b"X" and (Path(argv[0]).name == component or argv[1:3] == ["-m", component])
