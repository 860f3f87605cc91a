"""What the real API server dials on the agent's nodes: the kubelet API.

Inside the lab's network namespace the node range is routed to ``lo`` as local (`ip route add local`), so one
listening socket answers for every address in it, and the address a connection was made to says which node it is
for. That is how the API server's log requests (``GET /containerLogs/...`` on a node's InternalIP, port 10250, over
HTTPS with its kubelet client certificate) reach the virtual nodes' containers.
"""

from __future__ import annotations

import datetime as dt
import http.server
import ssl
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

if TYPE_CHECKING:
    from .agent import Agent

KUBELET_PORT = 10250


def self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """A serving certificate like the kubelet's own self-signed one (the API server does not verify it unless
    --kubelet-certificate-authority is set, which kubeadm does not set)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "kubelet.crt", directory / "kubelet.key"
    if cert_path.exists() and key_path.exists():
        return cert_path, key_path
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name}@{int(time.time())}")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .sign(key, hashes.SHA256())
    )
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    key_path.chmod(0o600)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    agent: Agent
    port: int


class _KubeletHandler(http.server.BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the agent log is for decisions
        pass

    def _reply(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        parts = url.path.strip("/").split("/")
        if url.path in ("/healthz", "/healthz/"):
            self._reply(200, b"ok")
            return
        if len(parts) == 4 and parts[0] == "containerLogs":
            self._logs(parts[1], parts[2], parts[3], query)
            return
        self._reply(404, b"404 page not found\n")

    def _logs(self, namespace: str, name: str, container: str, query: dict[str, str]) -> None:
        kubelet = self.server.agent.kubelet
        pod = self.server.agent.store.get("pods", namespace, name)
        if pod is None:
            self._reply(404, f'pod "{name}" does not exist\n'.encode())
            return
        if container not in [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]:
            self._reply(404, f'container "{container}" not found in pod "{name}"\n'.encode())
            return
        previous = query.get("previous") == "true"
        refused = log_status_error(pod, container, previous)
        text = kubelet.logs(pod, container, previous) if refused is None else None
        if text is None:  # the kubelet answers 400; the API server turns it into a BadRequest Status
            self._reply(
                400, (refused or f'container "{container}" in pod "{name}" is not available').encode()
            )
            return
        if query.get("follow") != "true":
            self._reply(200, _limit(text, query).encode())
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = 0
        while True:
            # whether it still runs is read before its output, so the last lines of a container that has just
            # exited are sent before the stream ends
            live = self.server.agent.store.get("pods", namespace, name)
            running = live is not None and kubelet.running(live, container)
            text = (kubelet.logs(live, container, False) if live is not None else None) or text
            chunk = text[sent:] if sent else _limit(text, query)
            if chunk:
                data = chunk.encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
            sent = len(text)
            if not running:
                break
            time.sleep(0.2)
        self.wfile.write(b"0\r\n\r\n")


def log_status_error(pod: dict[str, Any], container: str, previous: bool) -> str | None:
    """Why the kubelet has no log for this container now (its validateContainerLogStatus), from the pod status."""
    name = pod["metadata"]["name"]
    status = next(
        (s for s in (pod.get("status") or {}).get("containerStatuses") or [] if s.get("name") == container),
        None,
    )
    if status is None:
        return f'container "{container}" in pod "{name}" is not available'
    state, last = status.get("state") or {}, (status.get("lastState") or {}).get("terminated")
    if previous:
        if not last or not last.get("containerID"):
            return f'previous terminated container "{container}" in pod "{name}" not found'
        return None
    if "running" in state:
        return None
    if "terminated" in state:
        if state["terminated"].get("containerID") or (last and last.get("containerID")):
            return None
        return f'container "{container}" in pod "{name}" is terminated'
    if last is not None:
        return None if last.get("containerID") else f'container "{container}" in pod "{name}" is terminated'
    if "waiting" in state:
        reason = state["waiting"].get("reason", "")
        why = {
            "ErrImagePull": "image can't be pulled",
            "ImagePullBackOff": "trying and failing to pull image",
        }
        return f'container "{container}" in pod "{name}" is waiting to start: {why.get(reason, reason)}'
    return f'container "{container}" in pod "{name}" is waiting to start - no logs yet'


def _limit(text: str, query: dict[str, str]) -> str:
    if query.get("tailLines"):
        lines = text.splitlines(keepends=True)
        text = "".join(lines[-int(query["tailLines"]) :]) if int(query["tailLines"]) else ""
    if query.get("limitBytes"):
        text = text.encode()[: int(query["limitBytes"])].decode(errors="ignore")
    return text


class Endpoints:
    """The listening sockets; started with the agent, closed with it."""

    def __init__(self, agent: Agent, cert_dir: Path) -> None:
        self._agent = agent
        self._cert_dir = cert_dir
        self._servers: dict[int, _Server] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        cert, key = self_signed(self._cert_dir, "gpuready-lab-agent")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        server = self._listen(KUBELET_PORT, _KubeletHandler)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        self._run(KUBELET_PORT, server)

    def _listen(self, port: int, handler: type[http.server.BaseHTTPRequestHandler]) -> _Server:
        server = _Server(("0.0.0.0", port), handler)
        server.agent = self._agent
        server.port = port
        return server

    def _run(self, port: int, server: _Server) -> None:
        self._servers[port] = server
        threading.Thread(target=server.serve_forever, name=f"agent-port-{port}", daemon=True).start()

    def stop(self) -> None:
        for server in self._servers.values():
            server.shutdown()
            server.server_close()
