"""Running commands on a node: local shell semantics, once-per-run caching, and SSH with strict host keys against
an in-process paramiko server (no sshd needed)."""

from __future__ import annotations

import socket
import threading

import paramiko
import pytest

from gpuready.checks import Output
from gpuready.observe import CachedRunner, ConnectionFailed, LocalRunner, SshRunner


def test_local_runner_reports_exit_status_and_both_streams():
    runner = LocalRunner("n1", timeout=10)
    assert runner.run("echo out; echo err >&2; exit 3") == Output(3, "out\n", "err\n")
    missing = runner.run("no-such-tool-gpuready --version")
    assert missing.rc == 127 and "not found" in missing.stderr


def test_local_runner_stops_waiting_at_the_timeout():
    out = LocalRunner("n1", timeout=0.2).run("sleep 5")
    assert out.rc == 124
    assert "no answer within 0.2 s (--timeout)" in out.stderr


def test_cached_runner_runs_each_command_once():
    class Counting:
        name = "n1"
        calls: list[str] = []

        def run(self, command):
            self.calls.append(command)
            return Output(0, command, "")

        def close(self):
            pass

    inner = Counting()
    runner = CachedRunner(inner)
    assert runner.run("a") == runner.run("a") == Output(0, "a", "")
    runner.run("b")
    assert inner.calls == ["a", "b"] and runner.commands_run == 2


# --- SSH ----------------------------------------------------------------------------------------------------------


class _Server(paramiko.ServerInterface):
    def __init__(self, client_key: paramiko.PKey, commands: list[str]):
        self.client_key = client_key
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
        self.commands.append(command.decode())

        def answer():
            # EOF, not close: a close could reach the client before the reply to its exec request does
            channel.sendall(b"active\n")
            channel.sendall_stderr(b"a warning\n")
            channel.send_exit_status(3)
            channel.shutdown_write()

        threading.Thread(target=answer, daemon=True).start()
        return True


@pytest.fixture
def ssh_server():
    """A one-connection-at-a-time SSH server on 127.0.0.1; yields (port, host key, client key, commands)."""
    host_key = paramiko.ECDSAKey.generate()
    client_key = paramiko.ECDSAKey.generate()
    commands: list[str] = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.settimeout(0.1)  # accept() wakes up to see `stop`
    transports: list[paramiko.Transport] = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            transport = paramiko.Transport(conn)
            transport.add_server_key(host_key)
            transports.append(transport)
            try:
                transport.start_server(server=_Server(client_key, commands))
            except (paramiko.SSHException, EOFError, OSError):
                continue  # a client that refused our host key hangs up mid-handshake

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], host_key, client_key, commands
    stop.set()
    thread.join(timeout=5)
    listener.close()
    for transport in transports:
        transport.close()


def _runner(tmp_path, port, client_key, known: paramiko.PKey | None, sudo=False):
    key_file = tmp_path / "id_ecdsa"
    client_key.write_private_key_file(str(key_file))
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {known.get_name()} {known.get_base64()}\n" if known else "")
    data = {
        "ssh_hostname": "127.0.0.1",
        "ssh_port": port,
        "ssh_user": "tester",
        "ssh_key": str(key_file),
        "ssh_known_hosts_file": str(known_hosts),
        "_sudo": sudo,
    }
    return SshRunner("gpu-node-1", data, timeout=10)


def test_ssh_runs_commands_on_a_known_host(tmp_path, ssh_server):
    port, host_key, client_key, commands = ssh_server
    runner = _runner(tmp_path, port, client_key, host_key, sudo=True)
    try:
        assert runner.run("systemctl is-active kubelet") == Output(3, "active\n", "a warning\n")
    finally:
        runner.close()
    assert commands == ["sudo -n sh -c 'systemctl is-active kubelet'"]


def test_ssh_refuses_a_host_whose_key_is_not_known(tmp_path, ssh_server):
    port, _host_key, client_key, commands = ssh_server
    runner = _runner(tmp_path, port, client_key, None)
    with pytest.raises(ConnectionFailed, match=r"not found in known_hosts \(host keys are always checked"):
        runner.run("true")
    with pytest.raises(ConnectionFailed):  # remembered: one attempt per run
        runner.run("true")
    assert commands == []


def test_ssh_refuses_a_host_with_another_key(tmp_path, ssh_server):
    port, _host_key, client_key, commands = ssh_server
    runner = _runner(tmp_path, port, client_key, paramiko.ECDSAKey.generate())
    with pytest.raises(ConnectionFailed, match=f"cannot connect over SSH to tester@127.0.0.1:{port}"):
        runner.run("true")
    assert commands == []


def test_ssh_to_a_closed_port_fails_with_the_address(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    runner = _runner(tmp_path, port, paramiko.ECDSAKey.generate(), None)
    with pytest.raises(ConnectionFailed, match=f"cannot connect over SSH to tester@127.0.0.1:{port}"):
        runner.run("true")
