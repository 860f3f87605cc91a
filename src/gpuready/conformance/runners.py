"""Run commands on a node, over SSH or on this machine, each command once per node per run.

One small interface, ``run(command) -> Output``, so the conformance checks never know where a node is. SSH
keeps host-key checking strict whatever the inventory says (a conformance verdict about an impostor host is
worthless): the host key must be in ``ssh_known_hosts_file`` or the user's/system known_hosts, or the node
fails its connection check. Nothing connects until the first command runs.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shlex
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from gpuready.conformance.checks import Output
from gpuready.spec import NodeSpec

TIMEOUT_RC = 124  # what coreutils' timeout(1) exits with; a command we stopped waiting for reports it too


class ConnectionFailed(Exception):
    """The node could not be reached or authenticated; the message says which and why."""


class Runner(Protocol):
    name: str

    def run(self, command: str) -> Output: ...

    def close(self) -> None: ...


class LocalRunner:
    """Commands on this machine through ``/bin/sh -c`` (what a nightly job on a GPU runner uses)."""

    def __init__(self, name: str, timeout: float, env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.timeout = timeout
        self.env = dict(env) if env is not None else None

    def run(self, command: str) -> Output:
        # Its own process group, so a timeout stops the command's children too (they would hold the pipes open).
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env=self.env,
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return Output(TIMEOUT_RC, "", f"{command}: no answer within {self.timeout:g} s (--timeout)")
        return Output(proc.returncode, stdout, stderr)

    def close(self) -> None:
        pass


class SshRunner:
    """Commands on a node over SSH (paramiko), with the inventory's ssh_* data and strict host keys."""

    def __init__(self, name: str, data: Mapping[str, Any], timeout: float) -> None:
        self.name = name
        self.timeout = timeout
        self.hostname = str(data.get("ssh_hostname") or name)
        self.port = int(data.get("ssh_port") or 22)
        self.user = str(data.get("ssh_user") or getpass.getuser())
        self.key = data.get("ssh_key")
        self.known_hosts = data.get("ssh_known_hosts_file")
        self.sudo = bool(data.get("_sudo"))
        self._client: Any = None
        self._error: ConnectionFailed | None = None

    @property
    def where(self) -> str:
        return f"{self.user}@{self.hostname}:{self.port}"

    def connect(self) -> Any:
        """The connected client; a failure is remembered so an unreachable node is tried once per run."""
        if self._client is not None:
            return self._client
        if self._error is not None:
            raise self._error
        import paramiko  # imported here: a plain `pytest --help` must not pay for it

        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.load_system_host_keys()
            if self.known_hosts:
                client.load_host_keys(str(Path(str(self.known_hosts)).expanduser()))
            client.connect(
                self.hostname,
                port=self.port,
                username=self.user,
                key_filename=str(Path(str(self.key)).expanduser()) if self.key else None,
                timeout=self.timeout,
                banner_timeout=self.timeout,
                auth_timeout=self.timeout,
                allow_agent=not self.key,
                look_for_keys=not self.key,
            )
        except (OSError, paramiko.SSHException) as exc:
            client.close()
            reason = str(exc) or type(exc).__name__
            if isinstance(exc, paramiko.SSHException) and "not found in known_hosts" in reason:
                reason += " (host keys are always checked: add the node's key to ssh_known_hosts_file)"
            self._error = ConnectionFailed(f"cannot connect over SSH to {self.where}: {reason}")
            raise self._error from None
        self._client = client
        return client

    def run(self, command: str) -> Output:
        client = self.connect()
        line = f"sudo -n sh -c {shlex.quote(command)}" if self.sudo else command
        try:
            _stdin, stdout, stderr = client.exec_command(line, timeout=self.timeout)
            out = stdout.read().decode(errors="replace")
            err = stderr.read().decode(errors="replace")
            return Output(stdout.channel.recv_exit_status(), out, err)
        except TimeoutError:
            return Output(TIMEOUT_RC, "", f"{command}: no answer within {self.timeout:g} s (--timeout)")
        except Exception as exc:  # a dropped session: the node is gone for the rest of the run
            self._error = ConnectionFailed(f"SSH session to {self.where} failed: {type(exc).__name__}: {exc}")
            self.close()
            raise self._error from None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class CachedRunner:
    """Each command runs once per node per run: checks that read the same output share it."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.name = runner.name
        self._cache: dict[str, Output] = {}
        self.commands_run = 0

    def run(self, command: str) -> Output:
        if command not in self._cache:
            self.commands_run += 1
            self._cache[command] = self.runner.run(command)
        return self._cache[command]

    def close(self) -> None:
        self.runner.close()


def make_runner(node: NodeSpec, connection: str, timeout: float) -> CachedRunner:
    """The runner for one node: ``local`` runs on this machine, ``ssh`` uses the node's ssh_* inventory data."""
    if connection == "local":
        return CachedRunner(LocalRunner(node.name, timeout, env=os.environ))
    if connection == "ssh":
        return CachedRunner(SshRunner(node.name, node.connection, timeout))
    raise ValueError(f"connection must be 'ssh' or 'local', not {connection!r}")
