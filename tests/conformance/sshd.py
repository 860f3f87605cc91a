"""A small SSH server in a thread (paramiko), so the SSH path is tested without sshd: public-key auth for user
``tester``, ``exec`` requests answered by a Python callable, one thread per connection."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

import paramiko

Execute = Callable[[str], tuple[int, bytes, bytes]]


class _Server(paramiko.ServerInterface):
    def __init__(self, client_key: paramiko.PKey, execute: Execute, commands: list[str]):
        self.client_key = client_key
        self.execute = execute
        self.commands = commands

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        ok = username == "tester" and key.get_base64() == self.client_key.get_base64()
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

    def check_channel_request(self, kind, chanid):
        return (
            paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED
        )

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
            try:
                transport.start_server(server=_Server(self.client_key, self.execute, self.commands))
            except (paramiko.SSHException, EOFError, OSError):
                continue  # a client that refused our host key hangs up mid-handshake

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
