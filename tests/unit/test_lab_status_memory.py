"""`gpuready lab status` names each host's kubelet and containerd resident memory (issue #28), read from /proc for the
processes in the host's cgroup: checked here against this test's own process in a stand-in cgroup directory."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from gpuready.lab import cli as lab_cli
from gpuready.lab import hosts


def own_rss_kib() -> int:
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))


def test_daemon_memory_sums_the_named_processes_in_the_cgroup_subtree(tmp_path):
    comm = Path("/proc/self/comm").read_text().strip()
    (tmp_path / "system.slice" / "kubelet.service").mkdir(parents=True)
    (tmp_path / "cgroup.procs").write_text("")
    (tmp_path / "system.slice" / "kubelet.service" / "cgroup.procs").write_text(f"{os.getpid()}\n999999999\n")
    rss = hosts.daemon_memory(tmp_path, names=(comm, "containerd"))
    assert list(rss) == [comm]  # no containerd process in it, and a vanished pid is skipped
    assert 0.5 * own_rss_kib() < rss[comm] < 2 * own_rss_kib()


def test_status_prints_memory_per_host_and_a_dash_before_the_deploy(capsys):
    state = {
        "hosts": {
            "gpu-node-1": {"index": 1, "address": "10.213.0.11", "port": 22, "os": "trixie", "profile": "l4-1",
                           "gpu_count": 1, "gpu_model": "NVIDIA L4", "running": True, "ssh_answers": True,
                           "memory_kib": {"containerd": 40 * 1024, "kubelet": 62 * 1024}},
            "gpu-node-2": {"index": 2, "address": "10.213.0.12", "port": 22, "os": "sid", "profile": "l4-1",
                           "gpu_count": 1, "gpu_model": "NVIDIA L4", "running": True, "ssh_answers": True,
                           "memory_kib": {}},
        }
    }  # fmt: skip
    lab_cli._print_hosts(state)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("MEMORY (RSS)")
    assert lines[1].endswith("up       kubelet 62 MiB, containerd 40 MiB")
    assert lines[2].endswith("up       -")


def test_hosts_straight_from_up_have_no_memory_column(capsys):
    state = {"hosts": {"gpu-node-1": {"index": 1, "address": "10.213.0.11", "port": 22, "profile": "l4-1",
                                      "gpu_count": 1, "gpu_model": "NVIDIA L4"}}}  # fmt: skip
    lab_cli._print_hosts(state)
    out = capsys.readouterr().out
    assert "MEMORY" not in out and out.splitlines()[1].endswith(" up")


def test_lab_down_names_what_still_runs_in_the_hosts_busiest_first(tmp_path, monkeypatch):
    """`lab down` names a host that did not power off and the programs still in the lab's cgroups (each pid once,
    vanished pids skipped): here two `sleep` children and this test's process in two stand-in cgroups."""
    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    try:
        deadline = time.monotonic() + 10
        while any(Path(f"/proc/{p.pid}/comm").read_text().strip() != "sleep" for p in sleepers):
            assert time.monotonic() < deadline, "the sleep children never exec'd"  # forked, not yet sleep
            time.sleep(0.01)
        own = os.getpid()
        groups = {tmp_path / "a": [own, sleepers[0].pid, 999999999], tmp_path / "b": [own, sleepers[1].pid]}
        monkeypatch.setattr(hosts, "lab_cgroups", lambda paths: list(groups))
        monkeypatch.setattr(hosts, "cgroup_pids", lambda cgroup: groups[cgroup])
        comm = Path("/proc/self/comm").read_text().strip()
        assert hosts._holders(object()) == f"sleep x2, {comm}"  # type: ignore[arg-type]
        monkeypatch.setattr(hosts, "cgroup_pids", lambda cgroup: [])
        assert hosts._holders(object()) == "nothing"  # type: ignore[arg-type]
    finally:
        for proc in sleepers:
            proc.kill()
            proc.wait()
