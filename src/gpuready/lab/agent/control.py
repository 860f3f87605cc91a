"""The agent's control socket: a Unix socket in its state directory, one JSON request and answer per connection.

A Unix socket, not a TCP port, because the agent lives in the lab's network namespace and its callers (tests,
benches, `gpuready lab`) in the machine's: a path works from both, and only root can open it (mode 0600).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

Obj = dict[str, Any]
log = logging.getLogger(__name__)


def _read_json_line(sock: socket.socket) -> Obj:
    """One newline-terminated JSON document from `sock` (both ends of the socket speak this way)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return json.loads(data)


def serve(path: Path, handle: Callable[[Obj], Obj]) -> socket.socket:
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    os.chmod(path, 0o600)
    sock.listen(8)

    def one(conn: socket.socket) -> None:
        with conn:
            try:
                answer = {"ok": True, **handle(_read_json_line(conn))}
            except Exception as exc:  # the caller gets the reason; the agent keeps serving
                log.exception("control request failed")
                answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            conn.sendall(json.dumps(answer).encode() + b"\n")

    def loop() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    threading.Thread(target=loop, name="agent-control", daemon=True).start()
    return sock


def call(path: Path, request: Obj, timeout: float = 120.0) -> Obj:
    """Send one request to the agent at `path`; raises RuntimeError with the agent's reason on failure."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        sock.sendall(json.dumps(request).encode() + b"\n")
        answer = _read_json_line(sock)
    if not answer.pop("ok", False):
        raise RuntimeError(f"lab agent: {answer.get('error')}")
    return answer
