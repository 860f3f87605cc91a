"""The lab's control plane: the API-server simulator as a process, a bootstrap token, and what joins need.

``lab up`` starts it after the hosts boot, inside the lab's network namespace on the control-plane address (the
hosts' kubelets reach it there, this machine through the lab's route), and records in the lab state what the
inventory passes to the deploy: the endpoint, the CA public-key hash, the file holding the bootstrap token
(root-only), and the admin kubeconfig for the add-ons and the suite.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpuready.lab import network
from gpuready.lab.state import LabPaths, write_atomic

START_TIMEOUT_S = 30.0
DEFAULT_PORT = 6443


class ControlPlaneError(RuntimeError):
    pass


def _free_port(address: str, preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket() as sock:
            try:
                sock.bind((address, port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise ControlPlaneError(f"no free port on {address}")


def start(
    paths: LabPaths,
    virtual_nodes: int = 0,
    node_grace_period: float = 40.0,
    address: str = "127.0.0.1",
    netns: str | None = None,
) -> dict[str, Any]:
    """Start the simulator, create a bootstrap token; returns the state's ``apiserver`` entry.

    With netns it runs inside that network namespace (the lab's), on the lab's control-plane address, where
    DEFAULT_PORT is free: the address exists only there and nothing else of the lab listens on it.
    """
    state_dir = paths.root / "apiserver"
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "apiserver.json").unlink(missing_ok=True)
    port = DEFAULT_PORT if netns else _free_port(address, DEFAULT_PORT)
    argv = [
        sys.executable, "-m", "gpuready.lab.apiserver", "--state-dir", str(state_dir),
        "--address", address, "--port", str(port), "--node-grace-period", str(node_grace_period),
        "--lab-state", str(paths.root),
    ]  # fmt: skip
    if virtual_nodes:
        argv += ["--virtual-nodes", str(virtual_nodes)]
    if netns:
        argv = network.exec_argv(netns, argv)
    with open(state_dir / "apiserver.log", "ab") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    info_path = state_dir / "apiserver.json"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not info_path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = (state_dir / "apiserver.log").read_text(errors="replace")[-2000:]
            raise ControlPlaneError(f"the API simulator did not start (exit {proc.poll()}):\n{tail}")
        time.sleep(0.05)
    info = json.loads(info_path.read_text())
    from gpuready.lab.apiserver.tls import ca_cert_hash

    token_file = state_dir / "join-token"
    token = _create_bootstrap_token(Path(info["kubeconfig"]))
    write_atomic(token_file, token + "\n", mode=0o600)
    return {
        "pid": proc.pid,
        "url": info["url"],
        "endpoint": f"{address}:{port}",
        "kubeconfig": info["kubeconfig"],
        "ca_cert_hash": ca_cert_hash(Path(info["ca"]).read_bytes()),
        "join_token_file": str(token_file),
        "log": str(state_dir / "apiserver.log"),
    }


def _create_bootstrap_token(kubeconfig: Path) -> str:
    """A kubeadm bootstrap token as the Secret kubeadm itself creates (``kube-system/bootstrap-token-<id>``)."""
    from kubernetes import client, config

    token_id = secrets.token_hex(3)
    token_secret = secrets.token_hex(8)
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    expiration = (datetime.now(UTC) + timedelta(hours=24)).strftime("%Y-%m-%dT%H:%M:%SZ")
    api.create_namespaced_secret(
        "kube-system",
        {
            "metadata": {"name": f"bootstrap-token-{token_id}", "namespace": "kube-system"},
            "type": "bootstrap.kubernetes.io/token",
            "stringData": {
                "token-id": token_id,
                "token-secret": token_secret,
                "expiration": expiration,
                "usage-bootstrap-authentication": "true",
                "usage-bootstrap-signing": "true",
                "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
            },
        },
    )
    return f"{token_id}.{token_secret}"


def stop(entry: dict[str, Any], timeout: float = 5.0) -> None:
    """Stop the simulator by the PID recorded in the state (SIGTERM, then SIGKILL)."""
    pid = entry.get("pid")
    if not pid:
        return
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid if not Path(f"/proc/{pid}").exists() else 0
        if done:
            return
        time.sleep(0.05)
    try:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
