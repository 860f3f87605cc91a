"""Reaching a node through testinfra: local shell semantics and a timeout, each command once per run (the suite's
``run`` and testinfra's ``host`` share it), and testinfra's paramiko backend with strict host keys against an
in-process paramiko server (no sshd needed)."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import paramiko
import pytest
from sshd import SshServer

from gpuready.conformance.checks import Output
from gpuready.conformance.runners import (
    ConnectionFailed,
    NodeRunner,
    StrictSshBackend,
    TimedLocalBackend,
    bound_to_session,
)


def local(timeout: float = 10) -> NodeRunner:
    return NodeRunner("n1", TimedLocalBackend(timeout))


def test_local_runner_reports_exit_status_and_both_streams():
    runner = local()
    assert runner.run("echo out; echo err >&2; exit 3") == Output(3, "out\n", "err\n")
    missing = runner.run("no-such-tool-gpuready --version")
    assert missing.rc == 127 and "not found" in missing.stderr


def test_local_runner_stops_waiting_at_the_timeout():
    out = local(timeout=0.2).run("sleep 5")
    assert out.rc == 124
    assert "no answer within 0.2 s (--command-timeout)" in out.stderr


def test_each_command_runs_once_and_testinfra_reads_the_same_cache(tmp_path):
    marker = tmp_path / "runs"
    runner = local()
    command = f"echo x >> {marker}; cat {marker} | wc -l"
    assert runner.run(command) == runner.run(command) == Output(0, "1\n", "")
    assert runner.host.run(command).stdout == "1\n"  # testinfra's host.run: the same backend, the same answer
    assert runner.commands_run == 1 and marker.read_text() == "x\n"
    assert runner.host.file(str(marker)).exists and runner.host.file(str(marker)).contains("x")
    assert runner.host.exists("sh") and not runner.host.exists("no-such-tool-gpuready")


# --- SSH ----------------------------------------------------------------------------------------------------------


def canned(command: str) -> tuple[int, bytes, bytes]:
    return 3, b"active\n", b"a warning\n"


@pytest.fixture
def ssh_server():
    """Yields (port, host key, client key, commands received)."""
    with SshServer(canned) as server:
        yield server.port, server.host_key, server.client_key, server.commands


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
    return NodeRunner("gpu-node-1", StrictSshBackend("gpu-node-1", data, timeout=10))


def test_ssh_runs_commands_on_a_known_host(tmp_path, ssh_server):
    port, host_key, client_key, commands = ssh_server
    runner = _runner(tmp_path, port, client_key, host_key, sudo=True)
    try:
        assert runner.run("systemctl is-active kubelet") == Output(3, "active\n", "a warning\n")
    finally:
        runner.close()
    # -n: never a password prompt; bound to the session: it ends when the session does
    assert commands == [bound_to_session("sudo -n /bin/sh -c 'systemctl is-active kubelet'")]


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


def _session(command: str) -> subprocess.Popen[bytes]:
    """``command`` as an SSH server runs it: a shell whose standard input is the session's (open until it closes)."""
    return subprocess.Popen(
        ["sh", "-c", bound_to_session(command)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_a_command_bound_to_its_session_answers_as_before():
    proc = _session("echo out; echo err >&2; exit 3")
    out, err = proc.stdout.read(), proc.stderr.read()  # the session stays open until the answer is read
    assert (proc.wait(timeout=30), out, err) == (3, b"out\n", b"err\n")
    proc.stdin.close()


def test_a_command_bound_to_its_session_ends_when_the_session_closes(tmp_path):
    """What an interrupted suite or a timed-out command leaves on the node: nothing (sshd itself signals nothing)."""
    marker = tmp_path / "pid"
    proc = _session(f"echo $$ > {marker}; sleep 300 & echo $! >> {marker}; wait")
    deadline = time.monotonic() + 30
    while len(marker.read_text().split() if marker.exists() else []) < 2:
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)
    pids = [int(p) for p in marker.read_text().split()]
    proc.stdin.close()  # the session ends
    assert proc.wait(timeout=30) != 0
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() and "Z" not in _state(pid) for pid in pids):
        assert time.monotonic() < deadline, f"still running after the session closed: {pids}"
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"
