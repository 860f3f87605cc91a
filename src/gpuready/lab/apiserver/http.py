"""HTTPS transport: a threading HTTP/1.1 server, TLS with optional client certificates, chunked streaming.

The TLS handshake runs in the connection's own thread (not in the accept loop), so a slow or broken client
cannot stall other connections.
"""

from __future__ import annotations

import contextlib
import json
import logging
import select
import socket
import ssl
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from . import errors
from .api import Call, Reply

if TYPE_CHECKING:
    from .server import ApiServer

log = logging.getLogger(__name__)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    allow_reuse_address = True
    sim: ApiServer
    tls: ssl.SSLContext

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = self.socket.accept()
        # Headers and body go out in separate writes; without NODELAY, Nagle + delayed ACK add 40 ms per request.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        self.request.settimeout(30)
        try:
            self.request.do_handshake()
        except (ssl.SSLError, OSError):
            self.close_connection = True
            self.rfile = self.wfile = None  # type: ignore[assignment]
            return
        self.request.settimeout(None)
        super().setup()

    def handle(self) -> None:
        if self.rfile is None:
            return
        with contextlib.suppress(ConnectionError, ssl.SSLError, TimeoutError):
            super().handle()

    def finish(self) -> None:
        if self.rfile is None:
            return
        with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.client_address[0], *args)

    def do_GET(self) -> None:
        self._serve()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET

    def _serve(self) -> None:
        sim = self.server.sim
        split = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            user = sim.authn.authenticate(headers.get("authorization"), self._peer_cert())
            call = Call(self.command, split.path, dict(parse_qsl(split.query, keep_blank_values=True)), headers, body,
                        user, split.query)  # fmt: skip
            reply = sim.api.handle(call)
        except errors.ApiError as exc:
            reply = Reply(exc.code, body=exc.status())
        except Exception as exc:  # a simulator bug must still answer like an API server, and be logged
            log.exception("internal error serving %s %s", self.command, self.path)
            reply = Reply(
                500, body=errors.ApiError(500, "InternalError", f"Internal error occurred: {exc}").status()
            )
        self._send(reply)

    def _peer_cert(self) -> dict[str, Any] | None:
        try:
            return self.request.getpeercert() or None
        except (ValueError, ssl.SSLError):
            return None

    def _send(self, reply: Reply) -> None:
        if reply.stream is not None:
            self._send_stream(reply)
            return
        data = reply.raw if reply.raw is not None else json.dumps(reply.body, separators=(",", ":")).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Audit-Id", "0")
        for k, v in reply.headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _send_stream(self, reply: Reply) -> None:
        assert reply.stream is not None
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        try:
            for chunk in reply.stream:
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                elif self._client_gone():
                    break
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (ConnectionError, ssl.SSLError, OSError):
            self.close_connection = True
        finally:
            close = getattr(reply.stream, "close", None)
            if close is not None:
                close()

    def _client_gone(self) -> bool:
        """During a stream a client sends nothing; a readable socket means it closed (or gave up) the request."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)


def make_http_server(sim: ApiServer, address: str, port: int, cert: str, key: str, ca: str) -> _Server:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    _Server.address_family = family
    httpd = _Server((address, port), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    ctx.load_verify_locations(ca)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.set_alpn_protocols(["http/1.1"])
    httpd.tls = ctx
    httpd.sim = sim
    return httpd
