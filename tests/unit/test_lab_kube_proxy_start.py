"""The lab's kube-proxy start no longer waits for its nftables table (kube-proxy waits 30 s for its Node first), but
a kube-proxy that exits at once still fails `lab up` with its log. Checked with stand-in binaries, no namespace."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from gpuready.lab import network
from gpuready.lab.cluster import kube_proxy


@pytest.fixture
def no_netns(monkeypatch):
    monkeypatch.setattr(network, "exec_argv", lambda netns, argv: list(argv))


def stand_in(tmp_path, body: str):
    binary = tmp_path / "kube-proxy"
    binary.write_text(f"#!/bin/sh\n{body}\n")
    binary.chmod(0o755)
    return binary


def test_a_kube_proxy_that_exits_at_start_fails_with_its_log(tmp_path, no_netns):
    binary = stand_in(tmp_path, 'echo "unknown flag: --proxy-mode" >&2; exit 1')
    with pytest.raises(RuntimeError, match=r"(?s)kube-proxy exited 1 at start.*unknown flag: --proxy-mode"):
        kube_proxy.start(tmp_path / "state", "ns", binary, tmp_path / "admin.conf", "gpu-node-1")


def test_a_running_kube_proxy_is_returned_without_waiting_for_its_table(tmp_path, no_netns):
    binary = stand_in(tmp_path, "exec sleep 30")
    entry = kube_proxy.start(tmp_path / "state", "ns", binary, tmp_path / "admin.conf", "gpu-node-1")
    try:
        assert entry["log"] == str(tmp_path / "state" / "kube-proxy.log")
        assert Path(f"/proc/{entry['pid']}/cmdline").read_text().startswith("sleep")
    finally:
        os.kill(entry["pid"], signal.SIGKILL)
        os.waitpid(entry["pid"], 0)
