"""A small SSH server in a thread (paramiko), so the SSH path is tested without sshd: public-key auth for user
``tester``, ``exec`` requests answered by a Python callable, ``direct-tcpip`` channels (what a ProxyJump hop is
asked for) forwarded to the TCP port they name, one thread per connection."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

import paramiko

Execute = Callable[[str], tuple[int, bytes, bytes]]
Forward = tuple[str, int]


def _pump(source: paramiko.Channel | socket.socket, sink: paramiko.Channel | socket.socket) -> None:
    """Copy bytes from ``source`` to ``sink`` until ``source`` ends, then end ``sink``'s writing side."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            if isinstance(sink, socket.socket):
                sink.shutdown(socket.SHUT_WR)
            else:
                sink.shutdown_write()


def _forward(transport: paramiko.Transport, server: _Server) -> None:
    """Each ``direct-tcpip`` channel the transport accepts, connected to its destination (session channels are
    answered by the server's callbacks)."""
    while transport.is_active():
        channel = transport.accept(timeout=0.2)
        if channel is None or (destination := server.pending.pop(channel.get_id(), None)) is None:
            continue
        try:
            conn = socket.create_connection(destination, timeout=5)
        except OSError:
            channel.close()
            continue
        conn.settimeout(None)
        threading.Thread(target=_pump, args=(channel, conn), daemon=True).start()
        threading.Thread(target=_pump, args=(conn, channel), daemon=True).start()


class _Server(paramiko.ServerInterface):
    def __init__(
        self, client_key: paramiko.PKey, execute: Execute, commands: list[str], forwards: list[Forward]
    ) -> None:
        self.client_key = client_key
        self.execute = execute
        self.commands = commands
        self.forwards = forwards
        # channel id -> where its bytes go, until the channel is accepted
        self.pending: dict[int, Forward] = {}

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        ok = username == "tester" and key.get_base64() == self.client_key.get_base64()
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

    def check_channel_request(self, kind, chanid):
        return (
            paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED
        )

    def check_channel_direct_tcpip_request(self, chanid, origin, destination):
        self.forwards.append((destination[0], destination[1]))
        self.pending[chanid] = (destination[0], destination[1])
        return paramiko.OPEN_SUCCEEDED

    def check_channel_exec_request(self, channel, command):
        text = command.decode()
        self.commands.append(text)

        def answer():
            rc, out, err = self.execute(text)
            # EOF, not close: a close could reach the client before the reply to its exec request does
            channel.sendall(out)
            channel.sendall_stderr(err)
            channel.send_exit_status(rc)
            channel.shutdown_write()

        threading.Thread(target=answer, daemon=True).start()
        return True


class SshServer:
    """``with SshServer(execute) as server:`` listens on 127.0.0.1:``server.port`` until the block ends."""

    def __init__(self, execute: Execute) -> None:
        self.execute = execute
        self.host_key = paramiko.ECDSAKey.generate()
        self.client_key = paramiko.ECDSAKey.generate()
        self.commands: list[str] = []
        self.forwards: list[Forward] = []  # the destinations of the direct-tcpip channels opened
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self._listener.settimeout(0.1)  # accept() wakes up to see _stop
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._transports: list[paramiko.Transport] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            transport = paramiko.Transport(conn)
            transport.add_server_key(self.host_key)
            self._transports.append(transport)
            server = _Server(self.client_key, self.execute, self.commands, self.forwards)
            try:
                transport.start_server(server=server)
            except (paramiko.SSHException, EOFError, OSError):
                continue  # a client that refused our host key hangs up mid-handshake
            threading.Thread(target=_forward, args=(transport, server), daemon=True).start()

    def known_hosts_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {self.host_key.get_name()} {self.host_key.get_base64()}\n"

    def __enter__(self) -> SshServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._listener.close()
        for transport in self._transports:
            transport.close()
