"""SSH material for the lab: one client key, fresh host keys per host, and a known_hosts naming them all.

Lab connections keep strict host-key checking on (the same setting a real fleet should use), so every host key the
lab generates is recorded before the host boots.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from gpuready.lab.state import LabPaths, write_atomic


def ensure_client_key(paths: LabPaths) -> Path:
    """The lab's client key, created once per state dir and reused across `lab up` runs."""
    if not paths.ssh_key.exists():
        paths.ssh_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        _keygen(paths.ssh_key, comment="gpuready-lab")
    return paths.ssh_key


def generate_host_key(etc_ssh: Path) -> str:
    """Write a fresh ed25519 host key into a host's /etc/ssh; return the public key line."""
    etc_ssh.mkdir(parents=True, exist_ok=True)
    key = etc_ssh / "ssh_host_ed25519_key"
    _keygen(key, comment="root@gpuready-lab")
    return key.with_suffix(".pub").read_text().strip()


def _keygen(path: Path, comment: str) -> None:
    path.unlink(missing_ok=True)
    path.with_suffix(".pub").unlink(missing_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )


def known_hosts_name(address: str, port: int) -> str:
    """The host pattern OpenSSH and paramiko look up: bare for port 22, `[addr]:port` otherwise."""
    return address if port == 22 else f"[{address}]:{port}"


def write_known_hosts(path: Path, entries: list[tuple[str, int, str]]) -> None:
    """entries: (address, port, public key line). Plain (unhashed) so a reader can see which host is which."""
    lines = []
    for address, port, pubkey in entries:
        key_type, key_b64 = pubkey.split()[:2]
        lines.append(f"{known_hosts_name(address, port)} {key_type} {key_b64}\n")
    write_atomic(path, "".join(lines), mode=0o600)


def ssh_argv(paths: LabPaths, address: str, port: int, command: list[str] | None = None) -> list[str]:
    """An OpenSSH command line that trusts only the lab's known_hosts."""
    argv = [
        "ssh",
        "-i",
        str(paths.ssh_key),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        f"UserKnownHostsFile={paths.known_hosts}",
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "LogLevel=ERROR",
        "-p",
        str(port),
        f"root@{address}",
    ]
    if command:
        argv += ["--", *command]
    return argv


def read_banner(address: str, port: int, timeout: float = 1.0) -> str | None:
    """The server's identification line if an SSH server answers there, else None."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            data = sock.recv(256)
    except OSError:
        return None
    line = data.split(b"\r\n", 1)[0].decode(errors="replace")
    return line if line.startswith("SSH-") else None
