"""How the host and gpu layers reach a node: a testinfra host per node, over SSH or on this machine.

There is one way to run a command on a node: testinfra's backend for it. ``ssh`` is testinfra's paramiko backend
with host-key checking made strict whatever the inventory or ~/.ssh/config says (a conformance verdict about an
impostor host is worthless): the host key must be in ``ssh_known_hosts_file``, the user's known_hosts or the
Host entry's ``UserKnownHostsFile``, or the node fails its connection check. The SSH config is honoured as pyinfra
honours it (``ssh_config_file``, default ~/.ssh/config, read by pyinfra's own parser, Include and Match
included): the node's Host entry (looked up by ``ssh_hostname`` or the node's name) gives ``HostName``, ``Port``,
``User``, ``IdentityFile``, ``UserKnownHostsFile``, ``ProxyCommand`` and ``ProxyJump``; the inventory's
``ssh_port``, ``ssh_user`` and ``ssh_key`` win over it. ``StrictHostKeyChecking`` (the config's or pyinfra's
``ssh_strict_host_key_checking``) is never honoured. ProxyJump hops are connected here, not by pyinfra's client
(whose hop connections take their host-key policy from the config or prompt): each hop is a client of its own
with the same strict host-key check, its Host entry giving its HostName, Port, User and IdentityFile (the
``user@host:port`` of the ProxyJump value wins), and the next hop or the node is reached through a
``direct-tcpip`` channel of the previous one; a hop's own ProxyJump or ProxyCommand is not followed (nor is it by
pyinfra). ``local`` is testinfra's local backend (a nightly job on a GPU runner).
Both stop waiting for a command after ``--command-timeout`` seconds.

Each node gets one :class:`NodeRunner`: the suite's checks read ``run(command) -> Output``, and host checks
written in testinfra's idiom get its ``host`` (``host.service(...)``, ``host.package(...)``, ``host.file(...)``,
``host.run(...)``). Both go through the same backend, which runs each distinct command once per node per run, so
checks that read the same output share it, and what the suite fetched for the whole fleet at once is what
``host.service("kubelet").is_running`` reads. Nothing connects until the first command runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import getpass
import os
import shlex
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import testinfra.host
from testinfra.backend.base import BaseBackend, CommandResult
from testinfra.backend.local import LocalBackend
from testinfra.backend.paramiko import ParamikoBackend

from gpuready.conformance.checks import Output
from gpuready.spec import NodeSpec

TIMEOUT_RC = 124  # what coreutils' timeout(1) exits with; a command we stopped waiting for reports it too
# pod: gpuready.conformance.probe (the suite's cluster runs the commands)
CONNECTIONS = ("ssh", "local", "pod")


class ConnectionFailed(Exception):
    """The node could not be reached or authenticated; the message says which and why."""


class _OncePerRun:
    """Mixed into a testinfra backend: each distinct command (as it would run, sudo included) runs once."""

    timeout: float

    def _start_cache(self) -> None:
        self._cache: dict[str, CommandResult] = {}
        self.commands_run = 0

    def run(self, command: str, *args: str, **kwargs: Any) -> CommandResult:
        final = self.get_command(command, *args)  # type: ignore[attr-defined]
        if final not in self._cache:
            self.commands_run += 1
            self._cache[final] = self.execute(final)
        return self._cache[final]

    def execute(self, command: str) -> CommandResult:
        raise NotImplementedError

    def timed_out(self, command: str) -> CommandResult:
        message = f"{command}: no answer within {self.timeout:g} s (--command-timeout)"
        return self.result(TIMEOUT_RC, self.encode(command), b"", message.encode())  # type: ignore[attr-defined]


class TimedLocalBackend(_OncePerRun, LocalBackend):
    """testinfra's local backend, with a timeout that stops the command's whole process group."""

    def __init__(self, timeout: float, env: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.timeout = timeout
        self.env = dict(env) if env is not None else None
        self._start_cache()

    def execute(self, command: str) -> CommandResult:
        # Its own process group, so a timeout stops the command's children too (they would hold the pipes open).
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=self.env,
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return self.timed_out(command)
        return self.result(proc.returncode, self.encode(command), stdout, stderr)


@dataclasses.dataclass(frozen=True)
class SshTarget:
    """Where one SSH connection goes, the SSH config applied: the node itself or one of its ProxyJump hops."""

    hostname: str
    port: int
    user: str
    key_files: tuple[str, ...] = ()  # none: the agent and ~/.ssh/id_* (paramiko's look_for_keys)
    known_hosts_files: tuple[str, ...] = ()  # the Host entry's UserKnownHostsFile
    proxy_command: str | None = None
    jumps: tuple[SshTarget, ...] = ()

    @property
    def where(self) -> str:
        return f"{self.user}@{self.hostname}:{self.port}"


def _ssh_config(config_file: object) -> Any:
    """pyinfra's parsed SSH config (its parser: Include, Match exec), or None where the file does not exist."""
    from pyinfra.connectors.sshuserclient.client import get_ssh_config

    return get_ssh_config(str(Path(str(config_file)).expanduser()) if config_file else None)


def _from_config(
    ssh_config: Any, alias: str, user: object, port: int | str | None, keys: tuple[str, ...]
) -> SshTarget:
    """``alias``'s Host entry applied; ``user``, ``port`` and ``keys`` (the inventory's) win over it."""
    entry: Mapping[str, Any] = ssh_config.lookup(alias) if ssh_config is not None else {}

    def files(name: str) -> tuple[str, ...]:
        value = entry.get(name) or []
        found = [value] if isinstance(value, str) else list(value)
        return tuple(os.path.expanduser(f) for item in found for f in item.split())

    if not keys:  # as OpenSSH: an IdentityFile that does not exist is skipped
        keys = tuple(f for f in files("identityfile") if Path(f).is_file())
    proxy = entry.get("proxycommand")
    return SshTarget(
        hostname=str(entry.get("hostname") or alias),
        port=int(port or entry.get("port") or 22),
        user=str(user or entry.get("user") or getpass.getuser()),
        key_files=keys,
        known_hosts_files=files("userknownhostsfile"),
        proxy_command=proxy if proxy and proxy.lower() != "none" else None,
    )


def resolve_ssh_target(node: str, data: Mapping[str, Any]) -> SshTarget:
    """Where ``node`` is reached over SSH: its ssh_* inventory data over its Host entry in ``ssh_config_file``
    (default ~/.ssh/config), with the ProxyJump hops the entry names (each with its own Host entry applied)."""
    from pyinfra.connectors.sshuserclient.client import SSHClient as PyinfraClient

    ssh_config = _ssh_config(data.get("ssh_config_file"))
    key = data.get("ssh_key")
    alias = str(data.get("ssh_hostname") or node)
    keys = (str(Path(str(key)).expanduser()),) if key else ()
    target = _from_config(ssh_config, alias, data.get("ssh_user"), data.get("ssh_port"), keys)
    jump = None if ssh_config is None or target.proxy_command else ssh_config.lookup(alias).get("proxyjump")
    if not jump or jump.lower() == "none":
        return target
    hops = []
    for hop in jump.split(","):
        # user@host:port as pyinfra splits it (its user and port, else the Host entry's)
        hostname, shorthand = PyinfraClient.derive_shorthand(ssh_config, hop.strip())
        hop_target = _from_config(ssh_config, hostname, shorthand.get("username"), shorthand.get("port"), ())
        hops.append(dataclasses.replace(hop_target, proxy_command=None))
    return dataclasses.replace(target, jumps=tuple(hops))


class StrictSshBackend(_OncePerRun, ParamikoBackend):
    """testinfra's paramiko backend with the inventory's ssh_* data over the SSH config, strict host keys (the
    node's and every ProxyJump hop's), ``sudo -n`` (never a password prompt that would hang the run) and a timeout
    per command. A failure to connect is remembered, so an unreachable node is tried once per run."""

    def __init__(self, node: str, data: Mapping[str, Any], timeout: float) -> None:
        self._error: ConnectionFailed | None = None
        try:
            target = resolve_ssh_target(node, data)
        except Exception as exc:  # a broken SSH config: the node fails its connection check, naming it
            name, user = str(data.get("ssh_hostname") or node), str(data.get("ssh_user") or getpass.getuser())
            target = SshTarget(name, int(data.get("ssh_port") or 22), user)
            config = data.get("ssh_config_file") or "~/.ssh/config"
            self._error = ConnectionFailed(
                f"cannot connect over SSH to {target.where}: cannot read the SSH config {config}: {exc}"
            )
        address = f"[{target.hostname}]" if ":" in target.hostname else target.hostname
        super().__init__(
            f"{target.user}@{address}:{target.port}",
            ssh_identity_file=target.key_files[0] if target.key_files else None,
            timeout=max(1, round(timeout)),
            sudo=bool(data.get("_sudo")),
        )
        self.target = target
        self.timeout = timeout
        self.where = target.where
        if target.jumps:
            self.where += " via " + ", ".join(hop.where for hop in target.jumps)
        self.known_hosts = data.get("ssh_known_hosts_file")
        self._hops: list[Any] = []
        self._start_cache()

    def get_sudo_command(self, command: str, sudo_user: str | None) -> str:
        if sudo_user is None:
            return self.quote("sudo -n /bin/sh -c %s", command)
        return self.quote("sudo -n -u %s /bin/sh -c %s", sudo_user, command)

    def _connect(self, target: SshTarget, sock: Any) -> Any:
        """A paramiko client connected to ``target`` (through ``sock``: a hop's channel or a ProxyCommand), its
        host key checked against the known_hosts files whatever any config says."""
        import paramiko

        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        key_filename: Any = list(target.key_files) or None  # paramiko takes one file or a list
        try:
            client.load_system_host_keys()
            for known in (*target.known_hosts_files, self.known_hosts):
                if known and Path(str(known)).expanduser().is_file():
                    client.load_host_keys(str(Path(str(known)).expanduser()))
            if sock is None and target.proxy_command:
                sock = paramiko.ProxyCommand(target.proxy_command)
            client.connect(
                target.hostname,
                port=target.port,
                username=target.user,
                key_filename=key_filename,
                sock=sock,
                timeout=self.timeout,
                banner_timeout=self.timeout,
                auth_timeout=self.timeout,
                channel_timeout=self.timeout,
                allow_agent=not target.key_files,
                look_for_keys=not target.key_files,
            )
        except BaseException:
            client.close()
            raise
        return client

    @functools.cached_property
    def client(self) -> Any:
        import paramiko

        if self._error is not None:
            raise self._error
        sock: Any = None
        hops = [*self.target.jumps, self.target]
        try:
            for i, hop in enumerate(hops):
                if i > 0:
                    transport = self._hops[-1].get_transport()
                    destination = (hop.hostname, hop.port)
                    sock = transport.open_channel(
                        "direct-tcpip", destination, ("127.0.0.1", 0), timeout=self.timeout
                    )
                client = self._connect(hop, sock)
                if hop is not self.target:
                    self._hops.append(client)
        except (OSError, paramiko.SSHException) as exc:
            self.close()
            reason = str(exc) or type(exc).__name__
            if isinstance(exc, paramiko.SSHException) and "not found in known_hosts" in reason:
                reason += " (host keys are always checked: add the key to ssh_known_hosts_file)"
            if hop is not self.target:
                reason = f"jump host {hop.where}: {reason}"
            elif i > 0:
                reason = f"through jump host {hops[i - 1].where}: {reason}"
            self._error = ConnectionFailed(f"cannot connect over SSH to {self.target.where}: {reason}")
            raise self._error from None
        return client

    def execute(self, command: str) -> CommandResult:
        cmd = self.encode(command)
        channel: Any = None
        try:
            transport = self.client.get_transport()
            channel = transport.open_session()
            channel.settimeout(self.timeout)
            channel.exec_command(self.encode(bound_to_session(command)))
            stdout = b"".join(channel.makefile("rb"))
            stderr = b"".join(channel.makefile_stderr("rb"))
            return self.result(channel.recv_exit_status(), cmd, stdout, stderr)
        except ConnectionFailed:
            raise
        except TimeoutError:
            if channel is not None:
                channel.close()  # the remote side sees its session end: bound_to_session stops the command
            return self.timed_out(command)
        except Exception as exc:  # a dropped session: the node is gone for the rest of the run
            self._error = ConnectionFailed(f"SSH session to {self.where} failed: {type(exc).__name__}: {exc}")
            self.close()
            raise self._error from None

    def close(self) -> None:
        client = self.__dict__.pop("client", None)
        if client is not None:
            client.close()
        while self._hops:  # the node's connection first, then the hops it went through, nearest first
            self._hops.pop().close()


def bound_to_session(command: str) -> str:
    """``command`` as the SSH server's shell runs it so that it ends with its session.

    sshd signals nothing when a session without a terminal closes: a command the suite stopped waiting for
    (``--command-timeout``), or whose suite was interrupted (Ctrl-C, a cancelled CI job's SIGTERM), ran on in the
    node, a ``dcgmi diag`` or ``nvbandwidth`` holding its GPUs for minutes. So the command runs in a session of its
    own (``setsid -w``), and a watcher reads the SSH session's standard input, which nothing writes and which
    ends only when the session closes, then stops the command's whole process group. So the client must keep
    the session's input open until it has the answer, as this backend does (paramiko sends no EOF unless asked):
    input closed early (``ssh node cmd </dev/null``) would stop the command at once. Where ``setsid`` is missing
    the command runs as before."""
    quoted = shlex.quote(command)
    script = (
        f"command -v setsid >/dev/null 2>&1 || exec /bin/sh -c {quoted}; "
        f"exec 3<&0; setsid -w /bin/sh -c {quoted} </dev/null 3<&- & c=$!; "
        "{ cat >/dev/null; kill -TERM -$c; } <&3 >/dev/null 2>&1 & w=$!; "
        "exec 3<&-; wait $c; rc=$?; kill $w 2>/dev/null; exit $rc"
    )
    return f"/bin/sh -c {shlex.quote(script)}"  # whatever the user's login shell is


class SystemdHost(testinfra.host.Host):
    """A testinfra host whose ``service`` is systemd's without probing for the init system: a GPU node gpuready
    deploys runs systemd (the deploy manages units with it), and probing costs round trips and depends, in local
    mode, on the runner machine's /sbin/init."""

    def __getattr__(self, name: str) -> Any:
        if name == "service":
            from testinfra.modules.service import SystemdService

            module = type("SystemdService", (SystemdService,), {"_host": self})
            setattr(self, name, module)
            return module
        return super().__getattr__(name)


class NodeRunner:
    """One node's testinfra host and the suite's view of it: ``run(command) -> Output``."""

    def __init__(self, name: str, backend: BaseBackend) -> None:
        self.name = name
        self.backend = backend
        self.host = SystemdHost(backend)

    @property
    def commands_run(self) -> int:
        return int(getattr(self.backend, "commands_run", 0))

    def run(self, command: str) -> Output:
        result = self.host.run(command)
        return Output(result.rc, result.stdout, result.stderr)

    def close(self) -> None:
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()


def make_runner(node: NodeSpec, connection: str, timeout: float) -> NodeRunner:
    """The runner for one node: ``local`` runs on this machine, ``ssh`` uses the node's ssh_* inventory data."""
    if connection == "local":
        return NodeRunner(node.name, TimedLocalBackend(timeout, env=os.environ))
    if connection == "ssh":
        return NodeRunner(node.name, StrictSshBackend(node.name, node.connection, timeout))
    raise ValueError(f"connection must be one of {', '.join(CONNECTIONS)}, not {connection!r}")
