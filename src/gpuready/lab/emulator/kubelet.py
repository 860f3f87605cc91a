"""Emulated kubelet for lab hosts: registers the Node, then heartbeats its Lease and node status.

Stdlib only (installed into Debian lab hosts by the lab's `kubelet` package; the emulated `kubeadm` imports the
helpers here too). It does what a real kubelet does towards the API server and nothing on the host: no pods run
here, the lab's node agent runs them. What it reports is the host's own: CPUs and memory from /proc, disk from the
filesystem under /var/lib/kubelet, containerd's version, the kernel and OS release.

Without /etc/kubernetes/kubelet.conf it fails the way an unjoined real kubelet does, so its unit crash-loops
(Restart=always, RestartSec=10) until `kubeadm join` writes one. SIGTERM stops it without touching the Node:
the control plane then notices the missing heartbeats, as for a real stopped kubelet.

`GPUREADY_LAB_K8S_ROOT` (tests only) prefixes every absolute host path, so tests run it outside a lab host.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from datetime import UTC, datetime
from typing import Any

DEFAULT_VERSION = "1.36.3"
KUBECONFIG = "/etc/kubernetes/kubelet.conf"
BOOTSTRAP_KUBECONFIG = "/etc/kubernetes/bootstrap-kubelet.conf"
CONFIG = "/var/lib/kubelet/config.yaml"
NODE_LEASE_NS = "kube-node-lease"
NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}


# --- host paths and version ------------------------------------------------------------------------------------


def host_path(path: str) -> str:
    """The path on this host; under `GPUREADY_LAB_K8S_ROOT` when tests set it."""
    root = os.environ.get("GPUREADY_LAB_K8S_ROOT", "")
    return root.rstrip("/") + path if root and path.startswith("/") else path


def version() -> str:
    """The Kubernetes version this package was built for (written next to the module by the package)."""
    env = os.environ.get("GPUREADY_LAB_KUBE_VERSION")
    if env:
        return env.lstrip("v")
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "version"), encoding="ascii") as f:
            return f.read().strip().lstrip("v") or DEFAULT_VERSION
    except OSError:
        return DEFAULT_VERSION


def klog(severity: str, where: str, msg: str, **kv: Any) -> None:
    """One structured klog line on stderr, the kubelet's log format (`I1122 03:04:05.123456 PID file:line] ...`)."""
    now = datetime.now()
    head = f"{severity}{now:%m%d %H:%M:%S.%f} {os.getpid():>7} {where}]"
    fields = "".join(f" {k}={json.dumps(v) if isinstance(v, str) else v}" for k, v in kv.items())
    print(f"{head} {json.dumps(msg)}{fields}", file=sys.stderr, flush=True)


def rfc3339(micro: bool = False) -> str:
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if micro else now.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_duration(value: Any, default: float) -> float:
    """A Go duration ("10s", "1m0s", "500ms") or a number of seconds."""
    if value is None or value == "":
        return default
    if isinstance(value, int | float):
        return float(value)
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    parts = re.findall(r"([0-9.]+)(ms|us|µs|ns|h|m|s)", str(value))
    if not parts or "".join(n + u for n, u in parts) != str(value):
        return default
    return sum(float(n) * units[u] for n, u in parts)


# --- a small YAML subset: what kubeconfigs, kubeadm and kubelet configuration files use -----------------------

_PLAIN_SAFE = re.compile(r"^[A-Za-z0-9_./][A-Za-z0-9_.:/=,+@-]*$")
_NUMBER = re.compile(r"^[-+]?(\d+|\d*\.\d+([eE][-+]?\d+)?)$")


class YamlError(ValueError):
    pass


def _scalar(text: str) -> Any:
    text = text.strip()
    if not text:
        return None
    if text[0] == '"':
        return json.loads(text)
    if text[0] == "'":
        if not text.endswith("'") or len(text) < 2:
            raise YamlError(f"unterminated quoted scalar: {text}")
        return text[1:-1].replace("''", "'")
    if text[0] in "[{":
        return _flow(text)
    low = text.lower()
    if low in ("null", "~"):
        return None
    if low in ("true", "false"):
        return low == "true"
    if _NUMBER.match(text):
        return float(text) if any(c in text for c in ".eE") else int(text)
    return text


def _split_top(text: str) -> list[str]:
    parts, depth, quote, cur = [], 0, "", ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts]


def _flow(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    inner = text[1:-1].strip()
    if text[0] == "[":
        return [_scalar(p) for p in _split_top(inner)] if inner else []
    result = {}
    for part in _split_top(inner):
        key, _, value = part.partition(":")
        result[_scalar(key)] = _scalar(value)
    return result


def _strip_comment(line: str) -> str:
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def _key_split(content: str) -> tuple[str, str] | None:
    """`key: value` -> (key, value); None when the line is not a mapping entry."""
    quote = ""
    for i, ch in enumerate(content):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"" and i == 0:
            quote = ch
        elif ch == ":" and (i + 1 == len(content) or content[i + 1] == " "):
            return content[:i].strip(), content[i + 1 :].strip()
        elif ch in "[{" and i == 0:
            return None
    return None


class _Lines:
    def __init__(self, text: str) -> None:
        self.raw = text.splitlines()
        self.items: list[tuple[int, str, int]] = []  # (indent, content, raw line number)
        for n, line in enumerate(self.raw):
            content = _strip_comment(line)
            if not content.strip() or content.strip() in ("---", "..."):
                continue
            self.items.append((len(content) - len(content.lstrip(" ")), content.strip(), n))


def load_yaml(text: str) -> Any:
    """Parse the block-style YAML subset (mappings, sequences, flow [] {}, scalars, | blocks); JSON too."""
    stripped = text.strip()
    if stripped[:1] in "[{":
        try:
            return json.loads(stripped)
        except ValueError:
            pass
    lines = _Lines(text)
    if not lines.items:
        return None
    value, _ = _block(lines, 0, lines.items[0][0])
    return value


def _block(lines: _Lines, i: int, indent: int) -> tuple[Any, int]:
    content = lines.items[i][1]
    if content == "-" or content.startswith("- "):
        return _sequence(lines, i, indent)
    if _key_split(content) is None:
        return _scalar(content), i + 1
    return _mapping(lines, i, indent)


def _sequence(lines: _Lines, i: int, indent: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    while i < len(lines.items):
        ind, content, raw = lines.items[i]
        if ind != indent or not (content == "-" or content.startswith("- ")):
            break
        rest = content[1:].lstrip()
        if not rest:
            if i + 1 < len(lines.items) and lines.items[i + 1][0] > indent:
                value, i = _block(lines, i + 1, lines.items[i + 1][0])
            else:
                value, i = None, i + 1
            out.append(value)
            continue
        inner = indent + len(content) - len(rest)
        lines.items[i] = (inner, rest, raw)
        value, i = _block(lines, i, inner)
        out.append(value)
    return out, i


def _mapping(lines: _Lines, i: int, indent: int) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    while i < len(lines.items):
        ind, content, raw = lines.items[i]
        if ind != indent:
            if ind > indent:
                raise YamlError(f"line {raw + 1}: unexpected indentation")
            break
        split = _key_split(content)
        if split is None:
            break
        key, value = split
        key = _scalar(key) if key[:1] in "'\"" else key
        i += 1
        if value in ("|", "|-", ">", ">-"):
            out[key], i = _block_scalar(lines, i, indent, value)
        elif value:
            out[key] = _scalar(value)
        elif i < len(lines.items) and lines.items[i][0] > indent:
            out[key], i = _block(lines, i, lines.items[i][0])
        elif i < len(lines.items) and lines.items[i][0] == indent and lines.items[i][1][:2] in ("- ", "-"):
            out[key], i = _sequence(lines, i, indent)
        else:
            out[key] = None
    return out, i


def _block_scalar(lines: _Lines, i: int, indent: int, style: str) -> tuple[str, int]:
    start = lines.items[i - 1][2] + 1
    body: list[str] = []
    n = start
    while n < len(lines.raw):
        line = lines.raw[n]
        if line.strip() and len(line) - len(line.lstrip(" ")) <= indent:
            break
        body.append(line)
        n += 1
    while body and not body[-1].strip():
        body.pop()
    while i < len(lines.items) and lines.items[i][2] < n:
        i += 1
    margin = min((len(b) - len(b.lstrip(" ")) for b in body if b.strip()), default=0)
    text = "\n".join(b[margin:] for b in body)
    if style.startswith(">"):
        text = " ".join(text.split("\n"))
    return (text if style.endswith("-") else text + "\n"), i


def _dump_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    text = str(value)
    plain = _PLAIN_SAFE.match(text) and not text.endswith(":") and ": " not in text
    if plain and isinstance(_scalar(text), str):
        return text
    return json.dumps(text)


def dump_yaml(value: Any, indent: int = 0) -> str:
    """Block-style YAML in the shape Go's sigs.k8s.io/yaml writes (sorted keys are the caller's choice)."""
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            return pad + "{}\n"
        out = ""
        for k, v in value.items():
            key = _dump_scalar(k)
            if isinstance(v, dict) and v:
                out += f"{pad}{key}:\n{dump_yaml(v, indent + 2)}"
            elif isinstance(v, list) and v:
                out += f"{pad}{key}:\n{dump_yaml(v, indent)}"
            else:
                out += f"{pad}{key}: {_inline(v)}\n"
        return out
    if isinstance(value, list):
        if not value:
            return pad + "[]\n"
        out = ""
        for item in value:
            if isinstance(item, dict | list) and item:
                nested = dump_yaml(item, indent + 2)
                out += f"{pad}- {nested[indent + 2 :]}"
            else:
                out += f"{pad}- {_inline(item)}\n"
        return out
    return pad + _dump_scalar(value) + "\n"


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _dump_scalar(value)


# --- the API client ----------------------------------------------------------------------------------------------


class ApiError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body if isinstance(body, dict) else {}
        message = self.body.get("message") or (body if isinstance(body, str) else "") or f"HTTP {status}"
        super().__init__(message)

    @property
    def reason(self) -> str:
        return str(self.body.get("reason") or "")


class ApiClient:
    """HTTPS to the API server with a CA (or none: kubeadm's first, unverified cluster-info fetch), a bearer token
    or a client certificate. The token only ever lives in this object's memory."""

    def __init__(
        self,
        server: str,
        ca_pem: str | None = None,
        token: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        url = urllib.parse.urlsplit(server)
        self.host = url.hostname or ""
        self.port = url.port or 443
        self.server = server.rstrip("/")
        self.timeout = timeout
        self._token = token
        if ca_pem is None:
            self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            self.context.check_hostname = False
            self.context.verify_mode = ssl.CERT_NONE
        else:
            self.context = ssl.create_default_context(cadata=ca_pem)
        if cert_file:
            self.context.load_cert_chain(cert_file, key_file or cert_file)

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self.context)
        headers = {
            "Accept": "application/json",
            "User-Agent": f"kubelet/v{version()} (linux/amd64) kubernetes",
        }
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        try:
            decoded = json.loads(raw) if raw else None
        except ValueError:
            decoded = raw.decode(errors="replace")
        if resp.status >= 400:
            raise ApiError(resp.status, decoded)
        return decoded


def client_from_kubeconfig(path: str) -> ApiClient:
    """An ApiClient from a kubeconfig's current context (files or inline data; inline key data goes to a 0600
    temporary file because Python's ssl only loads certificates from files)."""
    with open(host_path(path), encoding="utf-8") as f:
        cfg = load_yaml(f.read()) or {}
    ctx_name = cfg.get("current-context")
    contexts = {c["name"]: c.get("context") or {} for c in cfg.get("contexts") or []}
    ctx = contexts.get(ctx_name) or next(iter(contexts.values()), {})
    clusters = {c["name"]: c.get("cluster") or {} for c in cfg.get("clusters") or []}
    users = {u["name"]: u.get("user") or {} for u in cfg.get("users") or []}
    cluster = clusters.get(ctx.get("cluster")) or next(iter(clusters.values()), {})
    user = users.get(ctx.get("user")) or next(iter(users.values()), {})
    if cluster.get("certificate-authority-data"):
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
    elif cluster.get("certificate-authority"):
        with open(host_path(cluster["certificate-authority"]), encoding="ascii") as f:
            ca = f.read()
    else:
        ca = None
    cert, key = user.get("client-certificate"), user.get("client-key")
    cert = host_path(cert) if cert else None
    key = host_path(key) if key else None
    if user.get("client-certificate-data"):
        fd, tmp = tempfile.mkstemp(prefix="kubelet-client-")
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64decode(user["client-certificate-data"]))
            f.write(base64.b64decode(user.get("client-key-data") or ""))
        try:
            client = ApiClient(cluster.get("server", ""), ca, token=user.get("token"), cert_file=tmp)
        finally:
            os.unlink(tmp)
        return client
    return ApiClient(cluster.get("server", ""), ca, token=user.get("token"), cert_file=cert, key_file=key)


# --- what the host is ---------------------------------------------------------------------------------------------


def _read(path: str, default: str = "") -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return default


def _meminfo_kib() -> int:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    return 0


def _cpus() -> int:
    count = sum(1 for line in _read("/proc/cpuinfo").splitlines() if line.startswith("processor"))
    return count or os.cpu_count() or 1


def _os_image() -> str:
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return "Linux"


def container_runtime_version() -> str:
    """`containerd://<version>` from `containerd --version`, as the CRI Version call reports it."""
    exe = shutil.which("containerd")
    if not exe:
        return ""
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return ""
    return f"containerd://{out[2].lstrip('v')}" if len(out) >= 3 else ""


def _node_ip(hostname: str, server: str) -> str:
    """The node's InternalIP: the hostname's address (lab hosts map their name to their own address in the lab's
    network namespace, 10.213.1.N, in /etc/hosts), else the address this host reaches the API server
    from (the real kubelet's fallback, the default-route interface, comes to the same on a one-NIC host)."""
    try:
        for info in socket.getaddrinfo(hostname, None, socket.AF_INET, socket.SOCK_STREAM):
            addr = str(info[4][0])
            if addr not in ("127.0.0.1", "127.0.1.1"):
                return addr
    except OSError:
        pass
    host = urllib.parse.urlsplit(server).hostname or "127.0.0.1"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def _quantity_bytes(text: str) -> int:
    m = re.match(r"^(\d+)(Ki|Mi|Gi|Ti|k|M|G|T)?$", str(text))
    if not m:
        return 0
    mult = {
        None: 1,
        "Ki": 1024,
        "Mi": 1024**2,
        "Gi": 1024**3,
        "Ti": 1024**4,
        "k": 1000,
        "M": 10**6,
        "G": 10**9,
        "T": 10**12,
    }[m[2]]
    return int(m[1]) * mult


def _percent_or_bytes(text: str, total: int) -> int:
    text = str(text)
    if text.endswith("%"):
        return int(total * float(text[:-1]) / 100)
    return _quantity_bytes(text)


def host_resources(config: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """capacity and allocatable (capacity less the hard eviction thresholds, as with no reservations)."""
    mem_kib = _meminfo_kib()
    try:
        st = os.statvfs(
            host_path("/var/lib/kubelet") if os.path.isdir(host_path("/var/lib/kubelet")) else "/"
        )
        disk = st.f_blocks * st.f_frsize
    except OSError:
        disk = 0
    pods = str(config.get("maxPods") or 110)
    capacity = {
        "cpu": str(_cpus()),
        "ephemeral-storage": f"{disk // 1024}Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": f"{mem_kib}Ki",
        "pods": pods,
    }
    hard = config.get("evictionHard") or {"memory.available": "100Mi", "nodefs.available": "10%"}
    mem_alloc = max(0, mem_kib * 1024 - _percent_or_bytes(hard.get("memory.available", "0"), mem_kib * 1024))
    disk_alloc = max(0, disk - _percent_or_bytes(hard.get("nodefs.available", "0"), disk))
    allocatable = dict(capacity, memory=f"{mem_alloc // 1024}Ki", **{"ephemeral-storage": str(disk_alloc)})
    return capacity, allocatable


# --- the kubelet --------------------------------------------------------------------------------------------------

FLAGS_WITH_VALUE = {
    "kubeconfig",
    "bootstrap-kubeconfig",
    "config",
    "node-labels",
    "register-with-taints",
    "hostname-override",
    "container-runtime-endpoint",
    "node-ip",
    "pod-infra-container-image",
    "v",
    "cgroup-driver",
    "runtime-request-timeout",
    "root-dir",
    "cert-dir",
    "fail-swap-on",
    "provider-id",
    "feature-gates",
}
FLAGS_BOOL = {"version", "help", "h"}


class UsageError(Exception):
    pass


def parse_flags(argv: list[str]) -> dict[str, str]:
    flags: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-"):
            raise UsageError(f'unknown command "{arg}" for "kubelet"')
        name, eq, value = arg.lstrip("-").partition("=")
        if name in FLAGS_BOOL:
            flags[name] = value or "true"
        elif name in FLAGS_WITH_VALUE:
            if not eq:
                i += 1
                if i >= len(argv):
                    raise UsageError(f"flag needs an argument: --{name}")
                value = argv[i]
            flags[name] = value
        else:
            raise UsageError(f"unknown flag: --{name}")
        i += 1
    return flags


def parse_labels(text: str) -> dict[str, str]:
    labels = {}
    for item in filter(None, (p.strip() for p in (text or "").split(","))):
        key, _, value = item.partition("=")
        labels[key] = value
    return labels


def parse_taints(text: str) -> list[dict[str, str]]:
    """`key=value:Effect,key:Effect` (the --register-with-taints syntax) -> Node taints."""
    taints = []
    for item in filter(None, (p.strip() for p in (text or "").split(","))):
        spec, _, effect = item.rpartition(":")
        key, eq, value = spec.partition("=")
        taint = {"key": key, "effect": effect}
        if eq:
            taint["value"] = value
        taints.append(taint)
    return taints


def load_config(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    with open(host_path(path), encoding="utf-8") as f:
        cfg = load_yaml(f.read()) or {}
    if not isinstance(cfg, dict):
        raise ValueError(f"failed to decode kubelet config file {path}")
    return cfg


class Kubelet:
    def __init__(self, client: ApiClient, name: str, flags: dict[str, str], config: dict[str, Any]) -> None:
        self.client = client
        self.name = name
        self.flags = flags
        self.config = config
        self.stop = threading.Event()
        lease_seconds = int(config.get("nodeLeaseDurationSeconds") or 40)
        self.lease_seconds = lease_seconds
        self.renew_interval = lease_seconds * 0.25
        # a real kubelet defaults a zero (kubeadm writes "0s") or unset frequency to 10s
        self.status_interval = parse_duration(config.get("nodeStatusUpdateFrequency"), 10.0) or 10.0
        self.node_uid = ""
        self.lease: dict[str, Any] | None = None
        self.conditions: dict[str, dict[str, Any]] = {}
        self.node_ip = flags.get("node-ip") or _node_ip(
            self.labels()["kubernetes.io/hostname"], client.server
        )

    # node object and status --------------------------------------------------------------------------------

    def labels(self) -> dict[str, str]:
        hostname = socket.gethostname().lower()
        base = {
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": self.flags.get("hostname-override") or hostname,
            "kubernetes.io/os": "linux",
        }
        return {**base, **parse_labels(self.flags.get("node-labels", ""))}

    def status(self) -> dict[str, Any]:
        capacity, allocatable = host_resources(self.config)
        now = rfc3339()
        wanted = [
            (
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ]
        conditions = []
        for type_, status, reason, message in wanted:
            old = self.conditions.get(type_) or {}
            since = old.get("lastTransitionTime") if old.get("status") == status else now
            conditions.append(
                {
                    "type": type_,
                    "status": status,
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": since or now,
                    "reason": reason,
                    "message": message,
                }
            )
        machine_id = _read("/etc/machine-id")
        hostname = self.labels()["kubernetes.io/hostname"]
        return {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": self.node_ip},
                {"type": "Hostname", "address": hostname},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": int(self.config.get("port") or 10250)}},
            "nodeInfo": {
                "machineID": machine_id,
                "systemUUID": _read("/sys/class/dmi/id/product_uuid") or machine_id,
                "bootID": _read("/proc/sys/kernel/random/boot_id"),
                "kernelVersion": os.uname().release,
                "osImage": _os_image(),
                "containerRuntimeVersion": container_runtime_version(),
                "kubeletVersion": f"v{version()}",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def node(self) -> dict[str, Any]:
        taints = parse_taints(self.flags.get("register-with-taints", ""))
        if not any(t["key"] == NOT_READY_TAINT["key"] for t in taints):
            taints.append(
                dict(NOT_READY_TAINT)
            )  # the kubelet registers not-ready; the control plane lifts it
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": self.labels(),
                "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
            },
            "spec": {"taints": taints},
            "status": self.status(),
        }

    def register(self) -> None:
        delay = 0.1
        while not self.stop.is_set():
            klog("I", "kubelet_node_status.go:75", "Attempting to register node", node=self.name)
            try:
                created = self.client.request("POST", "/api/v1/nodes", self.node())
                self._remember(created)
                klog("I", "kubelet_node_status.go:78", "Successfully registered node", node=self.name)
                return
            except ApiError as exc:
                if exc.status == 409:
                    self._remember(self.client.request("GET", f"/api/v1/nodes/{self.name}"))
                    return
                klog(
                    "E",
                    "kubelet_node_status.go:107",
                    "Unable to register node with API server",
                    err=str(exc),
                    node=self.name,
                )
            except (OSError, http.client.HTTPException) as exc:
                klog(
                    "E",
                    "kubelet_node_status.go:107",
                    "Unable to register node with API server",
                    err=str(exc),
                    node=self.name,
                )
            self.stop.wait(delay)
            delay = min(delay * 2, 7.0)

    def _remember(self, node: dict[str, Any]) -> None:
        self.node_uid = node["metadata"].get("uid", "")
        self.conditions = {c["type"]: c for c in (node.get("status") or {}).get("conditions") or []}

    def post_status(self) -> None:
        patch = {"status": self.status()}
        node = self.client.request(
            "PATCH", f"/api/v1/nodes/{self.name}/status", patch, "application/strategic-merge-patch+json"
        )
        self._remember(node)

    # lease -------------------------------------------------------------------------------------------------

    def renew_lease(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NS}/leases"
        if self.lease is None:
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": self.name,
                    "namespace": NODE_LEASE_NS,
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self.node_uid}
                    ],
                },
                "spec": {
                    "holderIdentity": self.name,
                    "leaseDurationSeconds": self.lease_seconds,
                    "renewTime": rfc3339(micro=True),
                },
            }
            try:
                self.lease = self.client.request("POST", path, lease)
                return
            except ApiError as exc:
                if exc.status != 409:
                    raise
                self.lease = self.client.request("GET", f"{path}/{self.name}")
        assert self.lease is not None
        self.lease.setdefault("spec", {}).update(
            {
                "holderIdentity": self.name,
                "leaseDurationSeconds": self.lease_seconds,
                "renewTime": rfc3339(True),
            }
        )
        try:
            self.lease = self.client.request("PUT", f"{path}/{self.name}", self.lease)
        except ApiError as exc:
            self.lease = None  # conflict or gone: start again from the server's copy next time
            if exc.status not in (404, 409):
                raise

    # main loop ---------------------------------------------------------------------------------------------

    def run(self) -> int:
        self.register()
        next_lease = next_status = 0.0
        while not self.stop.is_set():
            now = time.monotonic()
            for due, action, interval, what in (
                (next_lease, self.renew_lease, self.renew_interval, "Failed to update lease"),
                (
                    next_status,
                    self.post_status,
                    self.status_interval,
                    "Error updating node status, will retry",
                ),
            ):
                if now < due:
                    continue
                try:
                    action()
                except (ApiError, OSError, http.client.HTTPException) as exc:
                    klog("E", "kubelet_node_status.go:549", what, err=str(exc))
                if action == self.renew_lease:
                    next_lease = now + interval
                else:
                    next_status = now + interval
            self.stop.wait(max(0.05, min(next_lease, next_status) - time.monotonic()))
        klog("I", "kubelet.go:1750", "Shutting down kubelet")
        return 0


def main(argv: list[str]) -> int:
    try:
        flags = parse_flags(argv)
    except UsageError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    if flags.get("version") in ("true", "raw"):
        print(f"Kubernetes v{version()}")
        return 0
    if "help" in flags or "h" in flags:
        print('The kubelet is the primary "node agent" that runs on each node.\n\nUsage:\n  kubelet [flags]')
        return 0
    klog("I", "server.go:530", "Kubelet version", kubeletVersion=f"v{version()}")
    try:
        config = load_config(flags.get("config"))
    except FileNotFoundError:
        path = flags.get("config")
        klog(
            "E",
            "run.go:72",
            "command failed",
            err=f"failed to load kubelet config file, path: {path}, error: "
            f'failed to load Kubelet config file {path}, error failed to read kubelet config file "{path}", '
            f"error: open {path}: no such file or directory",
        )
        return 1
    except (OSError, ValueError) as exc:
        klog(
            "E",
            "run.go:72",
            "command failed",
            err=f"failed to load kubelet config file, path: {flags.get('config')}, error: {exc}",
        )
        return 1
    kubeconfig = flags.get("kubeconfig") or ""
    if not kubeconfig or not os.path.exists(host_path(kubeconfig)):
        bootstrap = flags.get("bootstrap-kubeconfig") or BOOTSTRAP_KUBECONFIG
        klog(
            "E",
            "run.go:72",
            "command failed",
            err=f"failed to run Kubelet: unable to load bootstrap kubeconfig: "
            f"stat {bootstrap}: no such file or directory",
        )
        return 1
    try:
        client = client_from_kubeconfig(kubeconfig)
    except (OSError, ValueError, KeyError, ssl.SSLError) as exc:
        klog("E", "run.go:72", "command failed", err=f"failed to run Kubelet: invalid kubeconfig: {exc}")
        return 1
    name = (flags.get("hostname-override") or socket.gethostname()).lower()
    kubelet = Kubelet(client, name, flags, config)

    def _stop(_signum: int, _frame: object) -> None:
        kubelet.stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    return kubelet.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
