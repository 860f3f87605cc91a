"""The repository's pyinfra config refuses a bad inventory before any connection is opened (real pyinfra CLI)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYINFRA = Path(sys.executable).with_name("pyinfra")


def _listener() -> tuple[socket.socket, list[int]]:
    """A TCP port that counts connection attempts and closes them (an 'SSH server' that is never good enough)."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(1)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return server, accepted


def _run(tmp_path: Path, gpu_count: int, port: int, **extra: object) -> subprocess.CompletedProcess:
    shutil.copy(REPO / "config.py", tmp_path / "config.py")
    (tmp_path / "group_data").mkdir(exist_ok=True)
    shutil.copy(REPO / "inventory" / "group_data" / "all.py", tmp_path / "group_data" / "all.py")
    data = {
        "ssh_hostname": "127.0.0.1",
        "ssh_port": port,
        "ssh_connect_retries": 0,
        "gpu_model": "NVIDIA L4",
        "gpu_count": gpu_count,
        "kube_join": False,
        **extra,
    }
    (tmp_path / "inv.py").write_text(f"pool = [('node-a', {data!r})]\n")
    (tmp_path / "deploy.py").write_text(
        "from pyinfra.operations import server\nserver.shell(commands=['true'])\n"
    )
    return subprocess.run(
        [str(PYINFRA), "-y", "inv.py", "deploy.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


def test_bad_inventory_stops_before_connecting(tmp_path):
    server, accepted = _listener()
    try:
        result = _run(tmp_path, gpu_count=0, port=server.getsockname()[1])
    finally:
        server.close()
    assert result.returncode == 2, result.stderr
    assert "gpuready: the inventory is invalid, nothing was changed." in result.stderr
    assert "inv.py: host node-a: gpu_count = 0: must be an integer >= 1" in result.stderr
    assert accepted == []


def test_good_inventory_does_connect(tmp_path):
    # the control: the same run with a valid inventory reaches the host, so the test above can fail
    server, accepted = _listener()
    try:
        result = _run(tmp_path, gpu_count=1, port=server.getsockname()[1])
    finally:
        server.close()
    assert "the inventory is invalid" not in result.stderr
    assert accepted, result.stderr


def test_a_vulnerable_pin_is_named_before_connecting(tmp_path):
    server, _accepted = _listener()
    try:
        result = _run(
            tmp_path, 1, server.getsockname()[1], nvidia_container_toolkit_version="1.17.3", nvidia_cdi=False
        )
    finally:
        server.close()
    warnings = [line for line in result.stderr.splitlines() if "known vulnerabilities" in line]
    toolkit = [line for line in warnings if "nvidia_container_toolkit_version = '1.17.3' (node-a)" in line]
    assert len(toolkit) == 1, result.stderr  # once per run, not once per host
    assert "CVE-2025-23266" in toolkit[0] and "(fixed in " in toolkit[0] and "a_id/5659" in toolkit[0]
