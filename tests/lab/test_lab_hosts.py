"""Booted lab hosts: systemd as PID 1, sshd on each host's own address in the lab's network namespace, strict host-key
checking, the inventory."""

from __future__ import annotations

import json
import re
import runpy
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import paramiko
import pytest
from suite_runs import gpu_allocatable, restore_allocatable

from gpuready.lab import hosts, network

pytestmark = pytest.mark.lab
NAMES = ["gpu-node-1", "gpu-node-2", "gpu-node-3"]
REPO = Path(__file__).resolve().parents[2]


def _paramiko_client(known_hosts: Path) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    return client


def _connect(lab, client: paramiko.SSHClient, node: str) -> None:
    host = lab.state["hosts"][node]
    client.connect(
        host["address"],
        port=host["port"],
        username="root",
        key_filename=str(lab.paths.ssh_key),
        look_for_keys=False,
        allow_agent=False,
        timeout=10,
    )


def lab_network(lab) -> network.LabNetwork:
    return network.LabNetwork.from_state(lab.state["network"])


def test_three_hosts_with_their_own_address_and_profile(lab):
    hosts_ = lab.state["hosts"]
    assert sorted(hosts_) == NAMES
    subnet = lab.state["network"]["subnet"]  # 10.213.0.0/16 unless another lab was up on this machine
    second = subnet.split(".")[1]
    assert [hosts_[n]["address"] for n in NAMES] == [
        f"10.{second}.1.1",
        f"10.{second}.1.2",
        f"10.{second}.1.3",
    ]
    assert [hosts_[n]["profile"] for n in NAMES] == ["h100-sxm-8", "a100-80gb-4", "l4-1"]
    assert [hosts_[n]["gpu_count"] for n in NAMES] == [8, 4, 1]
    assert [hosts_[n]["nvswitch"] for n in NAMES] == [True, False, False]
    assert hosts_["gpu-node-3"]["gpu_model"] == "NVIDIA L4"


def test_ssh_port_is_22_despite_a_wildcard_listener_here(lab):
    """The session lab came up while 0.0.0.0:22 was held in this machine's namespace (conftest): that used to take
    the hosts' port when they listened here; in the lab's own namespace it cannot, so every host has port 22."""
    assert lab.state["ssh"]["port"] == 22
    assert {h["port"] for h in lab.state["hosts"].values()} == {22}


def test_the_lab_network_is_a_namespace_of_its_own(lab):
    """The lab's addresses exist only in its namespace; here there is just the veth end and the route to them."""
    net = lab_network(lab)
    assert net.netns == network.netns_name(lab.paths.root) and network.exists(net.netns)
    assert set(network.addresses(net.netns)) >= {
        net.control_plane,
        net.repo,
        *(h["address"] for h in lab.state["hosts"].values()),
    }
    here = json.loads(
        subprocess.run(["ip", "-4", "-j", "addr", "show"], capture_output=True, text=True, check=True).stdout
    )
    local = {a["local"]: link["ifname"] for link in here for a in link.get("addr_info", [])}
    assert local.get(net.root_address) == net.root_veth
    assert not set(local) & {
        net.control_plane,
        net.repo,
        *(h["address"] for h in lab.state["hosts"].values()),
    }
    route = subprocess.run(
        ["ip", "-4", "route", "get", lab.state["hosts"]["gpu-node-1"]["address"]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"dev {net.root_veth} src {net.root_address}" in route
    listening = subprocess.run(["ss", "-Hltn"], capture_output=True, text=True, check=True).stdout
    assert f"{net.root_address}:" not in listening  # nothing of the lab listens in this machine's namespace
    inside = network.run(net.netns, ["cat", "/proc/sys/net/ipv4/ip_forward"], capture_output=True, text=True)
    assert inside.stdout.strip() == "1"


@pytest.mark.parametrize("node", NAMES)
def test_paramiko_connects_with_reject_policy(lab, node):
    client = _paramiko_client(lab.paths.known_hosts)
    try:
        _connect(lab, client, node)
        _, stdout, _ = client.exec_command(
            "hostname; cat /proc/1/comm; systemctl is-system-running --wait; systemctl --failed --no-legend --plain"
        )
        seen = stdout.read().decode().split("\n", 3)
        assert seen[:3] == [node, "systemd", "running"], f"{node}: {seen[2]}; failed units: {seen[3:]}"
    finally:
        client.close()


def test_each_host_has_its_own_identity(lab):
    ids = {n: lab.ssh(n, "cat /etc/machine-id; cat /etc/ssh/ssh_host_ed25519_key.pub").stdout for n in NAMES}
    machine_ids = {out.split()[0] for out in ids.values()}
    host_keys = {out.split()[2] for out in ids.values()}
    assert len(machine_ids) == 3 and len(host_keys) == 3


def test_sshd_listens_only_on_its_own_address(lab):
    port = lab.state["ssh"]["port"]
    out = lab.ssh("gpu-node-2", "ss -Hltnp | grep sshd").stdout
    listening = sorted(line.split()[3] for line in out.splitlines())
    assert listening == [f"{lab.state['hosts']['gpu-node-2']['address']}:{port}"]


def test_a_wrong_known_hosts_entry_is_rejected(lab, tmp_path):
    """gpu-node-1's address paired with gpu-node-2's key: both clients must refuse to connect."""
    lines = lab.paths.known_hosts.read_text().splitlines()
    node1, node2 = lines[0].split(), lines[1].split()
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"{node1[0]} {node2[1]} {node2[2]}\n")

    client = _paramiko_client(wrong)
    with pytest.raises(paramiko.BadHostKeyException):
        _connect(lab, client, "gpu-node-1")
    client.close()

    host = lab.state["hosts"]["gpu-node-1"]
    argv = ["ssh", "-i", str(lab.paths.ssh_key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
            "-o", f"UserKnownHostsFile={wrong}", "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "StrictHostKeyChecking=yes", "-p", str(host["port"]), f"root@{host['address']}", "true"]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert result.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in result.stderr
    assert "Host key verification failed." in result.stderr


def test_an_unknown_host_is_rejected(lab, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    client = _paramiko_client(empty)
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        _connect(lab, client, "gpu-node-3")
    client.close()


def test_lab_ssh_cli_runs_a_command(lab):
    result = subprocess.run(
        [sys.executable, "-m", "gpuready.lab", "ssh", "gpu-node-2", "--", "hostname"],
        capture_output=True,
        text=True,
        env=lab.env(),
        timeout=30,
    )
    assert (result.returncode, result.stdout) == (0, "gpu-node-2\n"), result.stderr


def test_lab_status_json(lab):
    result = subprocess.run(
        [sys.executable, "-m", "gpuready.lab", "status", "--json"],
        capture_output=True,
        text=True,
        env=lab.env(),
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert {n: (h["running"], h["ssh_answers"]) for n, h in status["hosts"].items()} == {
        n: (True, True) for n in NAMES
    }
    assert status["repo"]["running"] is True
    assert status["apiserver"]["running"] is True and status["egress"]["running"] is True
    assert status["network"]["present"] is True


def test_hardware_file_is_bound_read_only_and_rewrites_show(lab):
    from gpuready.lab import hardware

    path = lab.paths.machine_dir("gpu-node-1") / "hardware.json"
    inside = "/opt/gpuready-lab/machine/hardware.json"
    assert json.loads(lab.ssh("gpu-node-1", f"cat {inside}").stdout) == hardware.read_hardware(path)
    denied = lab.ssh("gpu-node-1", f"touch {inside}", check=False)
    assert denied.returncode != 0 and "Read-only file system" in denied.stderr
    hw = hardware.read_hardware(path)
    hardware.write_hardware(path, {**hw, "profile": "rewritten"})  # an atomic rename, as `lab fault` does
    try:
        assert json.loads(lab.ssh("gpu-node-1", f"cat {inside}").stdout)["profile"] == "rewritten"
    finally:
        hardware.write_hardware(path, hw)


def test_fault_writes_hardware_and_kernel_lines_to_the_journal(lab):
    from gpuready.lab import faults, hardware

    path = lab.paths.machine_dir("gpu-node-1") / "hardware.json"
    # after the earlier modules' deploys the node runs a device plugin: NVIDIA's real one (real kubelets) keeps
    # the XID's GPU out until it restarts, and the later modules expect the node whole again
    plugin = SimpleNamespace(lab=lab)
    before = gpu_allocatable(plugin, "gpu-node-1") if joined(lab, "gpu-node-1") else {}
    lines = hosts.inject_fault(lab.paths, "gpu-node-1", "xid-79", gpu=2)
    try:
        assert lines == faults.journal_messages(hardware.read_hardware(path), "xid-79", 2)
        assert lines[0].startswith("NVRM: Xid (PCI:0000:") and ": 79, " in lines[0]
        assert hardware.read_hardware(path)["faults"] != []
        journal = lab.ssh("gpu-node-1", "journalctl --no-pager -o cat -t kernel -p err").stdout
        for line in lines:
            assert line in journal.splitlines()
    finally:
        assert hosts.inject_fault(lab.paths, "gpu-node-1", None) == []
        if before:
            restore_allocatable(plugin, "gpu-node-1", "xid-79", before)
    assert hardware.read_hardware(path)["faults"] == []


def joined(lab, node: str) -> bool:
    """Whether the node has joined the lab's cluster (this module run alone leaves the hosts undeployed)."""
    return lab.ssh(node, "test -e /etc/kubernetes/kubelet.conf", check=False).returncode == 0


def _pyinfra_exec(lab, *extra: str) -> tuple[int, str]:
    pyinfra = Path(sys.executable).with_name("pyinfra")
    result = subprocess.run(
        [str(pyinfra), "-y", *extra, "inventory/lab.py", "exec", "--", "hostname"],
        capture_output=True,
        text=True,
        env=lab.env(),
        cwd=REPO,
        timeout=120,
    )
    return result.returncode, result.stdout + result.stderr


def test_pyinfra_inventory_connects_with_strict_host_keys(lab, tmp_path):
    rc, output = _pyinfra_exec(lab)
    assert rc == 0, output
    for node in NAMES:
        assert f"[{node}] {node}" in output

    wrong = tmp_path / "known_hosts"
    lines = lab.paths.known_hosts.read_text().splitlines()
    wrong.write_text(
        "".join(
            f"{line.split()[0]} {lines[(i + 1) % 3].split(maxsplit=1)[1]}\n" for i, line in enumerate(lines)
        )
    )
    rc, output = _pyinfra_exec(lab, "--data", f"ssh_known_hosts_file={wrong}")
    assert rc != 0
    assert not any(f"[{node}] {node}" in output for node in NAMES), output


def test_inventory_data(lab, monkeypatch):
    monkeypatch.setenv("GPUREADY_LAB_DIR", str(lab.paths.root))
    attrs = runpy.run_path(str(REPO / "inventory/lab.py"))
    nodes, group = attrs["gpu_nodes"]
    name, data = nodes[0]
    port = lab.state["ssh"]["port"]
    assert name == "gpu-node-1"
    assert data == {
        "ssh_hostname": lab.state["hosts"]["gpu-node-1"]["address"],
        "ssh_port": port,
        "ssh_user": "root",
        "ssh_key": str(lab.paths.ssh_key),
        "ssh_known_hosts_file": str(lab.paths.known_hosts),
        "ssh_strict_host_key_checking": "yes",
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "gpu_count": 8,
        "nvswitch": True,
        "lab_profile": "h100-sxm-8",
    }
    base = lab.state["repo"]["base_url"]
    assert group["cuda_repo_url"] == f"{base}/cuda/repos/{{distro}}/{{arch}}/"
    assert group["nvidia_container_repo_url"] == f"{base}/libnvidia-container/stable/deb/{{deb_arch}}/"
    assert group["kubernetes_repo_url"] == f"{base}/kubernetes/core:/stable:/v{{minor}}/deb/"
    assert group["cuda_repo_keyring_url"] == f"{base}/keys/gpuready-lab-archive-keyring.asc"
    api = lab.state["apiserver"]  # the lab's control plane: the hosts join it
    assert group["kube_api_endpoint"] == api["endpoint"]
    assert group["kube_ca_cert_hash"] == api["ca_cert_hash"]
    assert group["kube_join_token_file"] == api["join_token_file"]
    assert group["kubeconfig"] == api["kubeconfig"]
    assert "kube_join" not in group


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["fault", "gpu-node-1", "no-such-fault"], "gpuready lab: unknown fault 'no-such-fault'"),
        (["fault", "gpu-node-9", "xid-79"], "gpuready lab: no lab host 'gpu-node-9'"),
        (["up", "--profile", "no-such-gpu"], "gpuready lab: unknown profile(s) ['no-such-gpu']"),
    ],
)
def test_cli_errors_are_one_clear_line(lab, argv, message):
    result = subprocess.run(
        [sys.executable, "-m", "gpuready.lab", *argv],
        capture_output=True,
        text=True,
        env=lab.env(),
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.startswith(message), result.stderr
    assert status_all_up(lab)  # a refused command leaves the lab as it was


def status_all_up(lab) -> bool:
    status = hosts.status(lab.paths)
    return all(h["running"] and h["ssh_answers"] for h in status["hosts"].values())


def test_lab_status_table(lab):
    result = subprocess.run(
        [sys.executable, "-m", "gpuready.lab", "status"],
        capture_output=True,
        text=True,
        env=lab.env(),
        timeout=30,
    )
    lines = result.stdout.splitlines()
    port = lab.state["ssh"]["port"]
    assert lines[0].split() == ["HOST", "ADDRESS", "OS", "PROFILE", "GPUS", "STATE", "MEMORY", "(RSS)"]
    address = lab.state["hosts"]["gpu-node-1"]["address"]
    release = lab.state["hosts"]["gpu-node-1"]["os"]
    assert lines[1].split()[:10] == ["gpu-node-1", f"{address}:{port}", release, "h100-sxm-8", "8x", "NVIDIA",
                                     "H100", "80GB", "HBM3", "up"]  # fmt: skip
    state, memory = lines[0].index("STATE"), lines[0].index("MEMORY")  # the columns' offsets
    assert [line[state:memory].strip() for line in lines[1:4]] == ["up", "up", "up"]
    # then each host's kubelet and containerd memory, or "-" where neither runs (before the node deploy)
    for line in lines[1:4]:
        rss = line[memory:]
        assert rss == "-" or re.fullmatch(r"(kubelet \d+ MiB)?(, )?(containerd \d+ MiB)?", rss), line
    assert lines[4].startswith(f"repositories: {lab.state['repo']['base_url']}/ (serving), keyring ")
    net = lab.state["network"]
    assert lines[5].startswith(f"network: namespace {net['netns']} (present), subnet {net['subnet']}, ")
    assert lines[6] == f"control plane: https://{net['control_plane']}:6443 (serving)"
    rest = lines[7:]
    # the hosts' pods reach Services through the lab's kube-proxy
    assert rest[0] in ("kube-proxy: nftables table written", "kube-proxy: waiting for its node"), rest
    rest = rest[1:]
    assert rest[0].startswith(f"egress proxy: {net['repo']}:3128 to ") and rest[0].endswith("(running)"), rest
