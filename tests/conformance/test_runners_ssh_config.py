"""The SSH runner honours the SSH config as pyinfra does (HostName, Port, User, IdentityFile, ProxyJump through a
bastion), the inventory's ssh_* data winning over it, and keeps host keys strict for the node and every hop
whatever the config says (against in-process paramiko servers, the bastion forwarding direct-tcpip channels)."""

from __future__ import annotations

import builtins
import sys
from pathlib import Path

import paramiko
import pytest
from sshd import SshServer

from gpuready.conformance.checks import Output
from gpuready.conformance.runners import ConnectionFailed, NodeRunner, StrictSshBackend, resolve_ssh_target


def canned(command: str) -> tuple[int, bytes, bytes]:
    return 0, b"node\n", b""


def bastion_answer(command: str) -> tuple[int, bytes, bytes]:
    return 0, b"bastion\n", b""


@pytest.fixture
def node():
    with SshServer(canned) as server:
        yield server


@pytest.fixture
def bastion(node):
    with SshServer(bastion_answer) as server:
        server.client_key = node.client_key  # one identity for both, as a user's key usually is
        yield server


@pytest.fixture(autouse=True)
def no_prompt(monkeypatch):
    """A host-key question on the terminal (pyinfra's AskPolicy) would hang a CI run: none may be asked."""

    def refuse(*args: object) -> str:
        raise AssertionError("prompted for a host key")

    monkeypatch.setattr(builtins, "input", refuse)


def _key(tmp_path: Path, key: paramiko.PKey) -> Path:
    key_file = tmp_path / "id_ecdsa"
    key.write_private_key_file(str(key_file))
    return key_file


def _known(tmp_path: Path, *servers: SshServer) -> Path:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("".join(server.known_hosts_line() for server in servers))
    return known_hosts


def _runner(tmp_path: Path, config: str, known: Path, **data: object) -> NodeRunner:
    config_file = tmp_path / "ssh_config"
    config_file.write_text(config)
    data = {"ssh_config_file": str(config_file), "ssh_known_hosts_file": str(known), **data}
    return NodeRunner("gpu-node-1", StrictSshBackend("gpu-node-1", data, timeout=10))


def _run(runner: NodeRunner) -> Output:
    try:
        return runner.run("hostname")
    finally:
        runner.close()


def test_a_host_alias_gives_hostname_port_user_and_identity(tmp_path, node):
    key_file = _key(tmp_path, node.client_key)
    config = f"Host gpu-node-1\n  HostName 127.0.0.1\n  Port {node.port}\n  User tester\n  IdentityFile {key_file}\n"
    runner = _runner(tmp_path, config, _known(tmp_path, node))
    assert runner.backend.where == f"tester@127.0.0.1:{node.port}"
    assert _run(runner) == Output(0, "node\n", "")
    assert len(node.commands) == 1


def _via_bastion(
    key_file, node, bastion, bastion_extra: str = "", node_extra: str = "  ProxyJump bastion\n"
) -> str:
    """An SSH config: Host bastion and Host gpu-node-1 (the fake servers' ports, one key), the node behind it."""
    return (
        f"Host bastion\n  HostName 127.0.0.1\n  Port {bastion.port}\n  User tester\n  IdentityFile {key_file}\n"
        + bastion_extra
        + f"Host gpu-node-1\n  HostName 127.0.0.1\n  Port {node.port}\n  User tester\n  IdentityFile {key_file}\n"
        + node_extra
    )


def test_proxyjump_through_a_bastion_reaches_the_node(tmp_path, node, bastion):
    key_file = _key(tmp_path, node.client_key)
    config = _via_bastion(key_file, node, bastion)
    runner = _runner(tmp_path, config, _known(tmp_path, node, bastion))
    assert runner.backend.where == f"tester@127.0.0.1:{node.port} via tester@127.0.0.1:{bastion.port}"
    assert _run(runner) == Output(0, "node\n", "")
    assert len(node.commands) == 1 and bastion.commands == []  # the command ran on the node, not the bastion
    assert bastion.forwards == [("127.0.0.1", node.port)]


def test_a_bastion_whose_key_is_unknown_is_refused(tmp_path, node, bastion):
    """StrictHostKeyChecking no on the bastion's entry changes nothing: no prompt, no accepted key."""
    key_file = _key(tmp_path, node.client_key)
    config = _via_bastion(key_file, node, bastion, bastion_extra="  StrictHostKeyChecking no\n")
    known = _known(tmp_path, node)
    runner = _runner(tmp_path, config, known)
    message = (
        rf"cannot connect over SSH to tester@127\.0\.0\.1:{node.port}: jump host tester@127\.0\.0\.1:{bastion.port}: "
        r".*not found in known_hosts \(host keys are always checked"
    )
    with pytest.raises(ConnectionFailed, match=message):
        runner.run("hostname")
    with pytest.raises(ConnectionFailed):  # remembered: one attempt per run
        runner.run("hostname")
    runner.close()
    assert node.commands == [] and bastion.commands == [] and bastion.forwards == []
    assert known.read_text() == node.known_hosts_line()  # nothing added


def test_a_node_whose_key_is_unknown_is_refused_behind_a_known_bastion(tmp_path, node, bastion):
    key_file = _key(tmp_path, node.client_key)
    config = _via_bastion(
        key_file, node, bastion, node_extra="  ProxyJump tester@bastion\n  StrictHostKeyChecking accept-new\n"
    )
    runner = _runner(tmp_path, config, _known(tmp_path, bastion))
    message = rf"tester@127\.0\.0\.1:{node.port}: through jump host tester@127\.0\.0\.1:{bastion.port}: .*known_hosts"
    with pytest.raises(ConnectionFailed, match=message):
        _run(runner)
    assert node.commands == []


def test_stricthostkeychecking_no_does_not_let_an_unknown_node_key_through(tmp_path, node):
    key_file = _key(tmp_path, node.client_key)
    config = (
        f"Host gpu-node-1\n  HostName 127.0.0.1\n  Port {node.port}\n  User tester\n  IdentityFile {key_file}\n"
        "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
    )
    runner = _runner(tmp_path, config, _known(tmp_path), ssh_strict_host_key_checking="no")
    with pytest.raises(ConnectionFailed, match=r"not found in known_hosts \(host keys are always checked"):
        _run(runner)
    assert node.commands == []


def test_the_inventory_ssh_data_wins_over_the_config(tmp_path, node):
    key_file = _key(tmp_path, node.client_key)
    (tmp_path / "other").mkdir()
    wrong_key = _key(tmp_path / "other", paramiko.ECDSAKey.generate())
    config = f"Host gpu-node-1\n  HostName 127.0.0.1\n  Port 1\n  User nobody\n  IdentityFile {wrong_key}\n"
    runner = _runner(
        tmp_path, config, _known(tmp_path, node), ssh_port=node.port, ssh_user="tester", ssh_key=str(key_file)
    )
    assert runner.backend.where == f"tester@127.0.0.1:{node.port}"
    assert _run(runner) == Output(0, "node\n", "")


def test_without_a_config_file_the_inventory_data_is_used_as_is(tmp_path):
    target = resolve_ssh_target("gpu-node-1", {"ssh_config_file": str(tmp_path / "absent"), "ssh_user": "u"})
    assert (target.hostname, target.port, target.user, target.jumps) == ("gpu-node-1", 22, "u", ())


def test_proxyjump_shorthand_and_hop_entries_resolve_as_pyinfra_splits_them(tmp_path):
    config_file = tmp_path / "ssh_config"
    config_file.write_text(
        "Host jump1\n  HostName 10.0.0.1\n  User ops\n  Port 2201\n"
        "Host node-*\n  HostName %h.example\n  ProxyJump admin@jump1:2222,jump2\n  StrictHostKeyChecking no\n"
    )
    target = resolve_ssh_target("node-a", {"ssh_config_file": str(config_file), "ssh_user": "u"})
    assert target.where == "u@node-a.example:22"
    assert [hop.where for hop in target.jumps] == ["admin@10.0.0.1:2222", f"{target.jumps[1].user}@jump2:22"]


RELAY = """\
import os, socket, sys, threading
conn = socket.create_connection((sys.argv[1], int(sys.argv[2])))
def up():
    while data := os.read(0, 65536):
        conn.sendall(data)
    conn.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while data := conn.recv(65536):
    os.write(1, data)
"""


def test_a_proxycommand_carries_the_connection_with_the_node_key_checked(tmp_path, node):
    key_file = _key(tmp_path, node.client_key)
    relay = tmp_path / "relay.py"
    relay.write_text(RELAY)
    config = (
        f"Host gpu-node-1\n  HostName 127.0.0.1\n  Port {node.port}\n  User tester\n  IdentityFile {key_file}\n"
        f"  ProxyCommand {sys.executable} {relay} %h %p\n"
    )
    assert _run(_runner(tmp_path, config, _known(tmp_path, node))) == Output(0, "node\n", "")
    runner = _runner(tmp_path, config, _known(tmp_path))
    with pytest.raises(ConnectionFailed, match="not found in known_hosts"):
        _run(runner)
    assert len(node.commands) == 1
