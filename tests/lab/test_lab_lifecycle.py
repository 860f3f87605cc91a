"""`lab down` leaves nothing behind, and `lab up` recovers from a lab that died without `lab down`.

Both tests bring the session lab back up at the end, so they can run in any order with the other lab tests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpuready.lab import hosts, network

pytestmark = pytest.mark.lab


def command_lines(*words: str) -> list[str]:
    """Command lines of live processes that contain every one of the words (what `pgrep -af` would list)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if all(word in line for word in words):
            found.append(line)
    return found


def nspawn_processes(root: Path) -> list[str]:
    """This lab's systemd-nspawn processes (their --directory is inside its state dir)."""
    return command_lines("systemd-nspawn", f"--directory={root}/")


def mounts_under(root: Path) -> list[str]:
    return [line for line in Path("/proc/mounts").read_text().splitlines() if str(root) in line.split()[1]]


def lab_processes(lab) -> list[int]:
    return [pid for cgroup in hosts.lab_cgroups(lab.paths) for pid in hosts.cgroup_pids(cgroup)]


def outside_traces(lab) -> list[Path]:
    """What nspawn, gpg and the lab could leave outside the state dir, for this lab's host names."""
    names = lab.state["hosts"]
    candidates = [*hosts.lab_cgroups(lab.paths)]
    candidates += [Path("/run/systemd/nspawn/propagate") / n for n in names]
    candidates += [Path("/var/lib/machines") / n for n in names]
    machine_ids = [(lab.paths.host_dir(n) / "upper/etc/machine-id") for n in names]
    candidates += [Path("/var/log/journal") / p.read_text().strip() for p in machine_ids if p.exists()]
    return candidates


def network_traces(entry: dict) -> list[str]:
    """What of a lab's network is still there: its namespace, its veth, its route, its address here."""
    found = []
    if network.exists(entry["netns"]):
        found.append(f"netns {entry['netns']}")
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, check=True).stdout
    found += [f"link {line.split()[0]}" for line in links.splitlines() if line.startswith(entry["root_veth"])]
    routes = subprocess.run(
        ["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True
    ).stdout
    found += [f"route {line}" for line in routes.splitlines() if line.startswith(entry["subnet"])]
    addrs = subprocess.run(["ip", "-4", "-br", "addr"], capture_output=True, text=True, check=True).stdout
    found += [f"address {line}" for line in addrs.splitlines() if f" {entry['root_address']}/" in f" {line}"]
    return found


def test_down_leaves_nothing_behind(lab):
    traces = outside_traces(lab)
    repo_pid = lab.state["repo"]["pid"]
    api = lab.state["apiserver"]  # the control plane's components, each by its pid
    # and kube-proxy, no KWOK (the hosts' kubelets are real)
    helpers = [api["kube_proxy"]["pid"]]
    assert "kwok" not in api, sorted(api)
    servers = [lab.state[k]["pid"] for k in ("repo", "egress")] + [*api["pids"].values(), *helpers]
    net = lab.state["network"]
    assert nspawn_processes(lab.paths.root) and mounts_under(lab.paths.root)  # the lab was up
    assert len(network_traces(net)) == 4 and network.pids(net["netns"])

    subprocess.run(
        [sys.executable, "-m", "gpuready.lab", "down"], env=lab.env(), check=True, capture_output=True
    )
    try:
        assert nspawn_processes(lab.paths.root) == []
        assert lab_processes(lab) == []
        assert mounts_under(lab.paths.root) == []
        assert [p for p in traces if p.exists()] == []
        assert not Path(f"/proc/{repo_pid}").exists() or hosts._proc_start(repo_pid) is None
        assert command_lines("gpg-agent", str(lab.paths.gnupg_home)) == []
        assert command_lines("gpuready.lab.aptrepo", str(lab.paths.root)) == []
        assert command_lines("gpuready.lab.network", str(lab.paths.root)) == []
        assert [pid for pid in servers if hosts._proc_start(pid) is not None] == []
        assert network_traces(net) == []
        assert f" {network.NETNS_DIR} " not in Path("/proc/mounts").read_text() or any(
            network.NETNS_DIR.iterdir()
        )
        assert not lab.paths.hosts_dir.exists() and not lab.paths.state_file.exists()
    finally:
        lab.bring_up()


def test_up_after_a_crash_recovers(lab):
    """kill -9 every nspawn and the repo server: their containers, mounts and cgroups stay behind; `up` copes."""
    old = dict(lab.state["hosts"])
    for host in old.values():
        os.kill(host["pid"], signal.SIGKILL)
    os.kill(lab.state["repo"]["pid"], signal.SIGKILL)
    leftovers = lab_processes(lab)
    assert leftovers and mounts_under(lab.paths.root)  # a crashed lab really left things behind

    lab.bring_up()

    assert not any(hosts._proc_start(pid) for pid in leftovers if pid not in lab_processes(lab))
    assert set(lab_processes(lab)).isdisjoint(leftovers)
    for name in old:
        assert lab.ssh(name, "hostname").stdout == f"{name}\n"
    assert len(mounts_under(lab.paths.root)) == len(old)


def test_down_after_a_crash_before_the_state_names_the_network(lab, tmp_path):
    """A namespace and veth this state dir's lab made, with no state left to say so (a crash right after creating
    them): `down` still finds them by their names, and kills what runs in the namespace."""
    from gpuready.lab.state import LabPaths

    paths = LabPaths(tmp_path / "crashed-lab")
    net = network.plan(paths.root)
    network.ensure(net)
    sleeper = subprocess.Popen(network.exec_argv(net.netns, ["sleep", "300"]))
    try:
        assert network.pids(net.netns) == [sleeper.pid] and len(network_traces(net.to_state())) == 4
        hosts.down(paths, quiet=True)
        assert sleeper.wait(timeout=10) == -signal.SIGKILL
        assert network_traces(net.to_state()) == []
        hosts.down(paths, quiet=True)  # twice is fine
    finally:
        sleeper.kill()
        network.destroy(net.netns, net.root_veth, net.subnet)


def test_a_failed_boot_names_the_host_and_cleans_up(lab, tmp_path, monkeypatch):
    """A host whose nspawn dies during boot: `up` says which and why, and leaves nothing running or mounted."""
    from gpuready.lab.state import LabPaths

    paths = LabPaths(tmp_path / "failing-lab")

    def boot_that_dies(paths_, spec, merged, netns, extra_args=()):
        paths_.console_log(spec.name).write_text("Failed to frobnicate the container\n")
        return subprocess.Popen(["sh", "-c", "exit 7"])

    monkeypatch.setattr(hosts, "_boot", boot_that_dies)
    with pytest.raises(hosts.LabError) as failure:
        hosts.up(paths, nodes=1)
    assert str(failure.value).startswith("gpu-node-1: systemd-nspawn exited with 7 during boot; console:\n")
    assert str(failure.value).endswith("Failed to frobnicate the container")
    assert mounts_under(paths.root) == []
    assert command_lines("gpuready.lab.aptrepo", str(paths.root)) == []
    assert command_lines("gpuready.lab.network", str(paths.root)) == []
    assert not network.exists(network.netns_name(paths.root))
    assert not Path("/sys/class/net", network.root_veth_name(paths.root)).exists()
    assert not paths.state_file.exists() and not paths.hosts_dir.exists()
