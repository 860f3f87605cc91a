"""The lab's pure parts, without root: host and address plan, mirror discovery, repositories, inventory, egress."""

from __future__ import annotations

import gzip
import hashlib
import os
import runpy
import shutil
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gpuready.lab import aptrepo, hosts, network, ssh
from gpuready.lab.state import LabNotUp, LabPaths

REPO = Path(__file__).resolve().parents[2]


def test_profiles_cycle_over_nodes():
    plan = hosts.plan_hosts(5, ["l4-1", "t4-1"])
    assert [(h.name, h.address, h.profile) for h in plan] == [
        ("gpu-node-1", "10.213.1.1", "l4-1"),
        ("gpu-node-2", "10.213.1.2", "t4-1"),
        ("gpu-node-3", "10.213.1.3", "l4-1"),
        ("gpu-node-4", "10.213.1.4", "t4-1"),
        ("gpu-node-5", "10.213.1.5", "l4-1"),
    ]
    assert [h.profile for h in hosts.plan_hosts(3, None)] == ["h100-sxm-8", "a100-80gb-4", "l4-1"]
    assert [h.address for h in hosts.plan_hosts(2, None, 201, "10.214.0.0/16")] == [
        "10.214.1.201",
        "10.214.1.202",
    ]
    with pytest.raises(hosts.LabError, match="between 1 and 250"):
        hosts.plan_hosts(0, None)


def test_address_plan(tmp_path):
    net = network.plan(tmp_path / "lab", subnet="10.213.0.0/16")
    assert (net.control_plane, net.repo, net.root_address, net.pod_cidr) == (
        "10.213.0.1",
        "10.213.0.2",
        "10.213.0.254",
        "10.213.128.0/17",
    )
    assert net.host_address(7) == "10.213.1.7" and net.host_address(250) == "10.213.1.250"
    assert net.netns == f"gpuready-lab-{network.lab_id(tmp_path / 'lab')}"
    assert len(net.root_veth) <= 15  # the kernel's limit on interface names
    other = network.plan(tmp_path / "other-lab", subnet="10.213.0.0/16")
    assert (other.netns, other.root_veth) != (net.netns, net.root_veth)
    assert network.LabNetwork.from_state(net.to_state()) == net


def test_a_lab_takes_the_first_subnet_nothing_here_uses():
    assert network.choose_subnet(used=["127.0.0.0/8", "192.0.2.0/24", "10.255.255.53"]) == "10.213.0.0/16"
    assert network.choose_subnet(used=["10.213.0.0/16", "10.213.0.254"]) == "10.214.0.0/16"
    assert network.choose_subnet(used=["10.0.0.0/8"], candidates=["10.213.0.0/16", "172.31.0.0/16"]) == (
        "172.31.0.0/16"
    )
    with pytest.raises(network.NetworkError, match="every lab subnet"):
        network.choose_subnet(used=["10.0.0.0/8"])


def test_up_without_ip_names_iproute2_before_starting_anything(tmp_path, monkeypatch):
    """No `ip`: `lab up` says what is missing and how to get it, and has created nothing (not even the state dir)."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    with pytest.raises(hosts.LabError, match=r"`ip` not found: .*apt-get install iproute2"):
        hosts.up(LabPaths(tmp_path / "lab"), nodes=1)
    assert not (tmp_path / "lab").exists()


def test_up_when_the_namespace_cannot_be_created(tmp_path, monkeypatch):
    """`ip netns add` refused (no root, no CONFIG_NET_NS): one LabError naming it, raised before anything starts."""
    fake_ip = tmp_path / "bin" / "ip"
    fake_ip.parent.mkdir()
    fake_ip.write_text(
        '#!/bin/sh\necho "mount --make-shared /run/netns failed: Operation not permitted" >&2\nexit 1\n'
    )
    fake_ip.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_ip.parent}:{os.environ['PATH']}")
    monkeypatch.setattr(network, "check_prerequisites", lambda: None)
    net = network.LabNetwork("gpuready-lab-test", "grlab-test")
    monkeypatch.setattr(network, "exists", lambda name: False)
    with pytest.raises(
        network.NetworkError, match=r"cannot create the network namespace gpuready-lab-test: mount "
    ):
        network.ensure(net)


def test_debian_mirror_read_from_deb822_and_one_line_sources():
    deb822 = (
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"
    )
    assert list(hosts._source_entries(deb822, deb822=True)) == [
        ("http://mirror.example/debian", ["bookworm", "bookworm-updates"]),
        ("http://mirror.example/debian-security", ["bookworm-security"]),
    ]
    one_line = (
        "# comment\ndeb [signed-by=/k.gpg arch=amd64] http://m.example/debian bookworm main\ndeb-src x y z\n"
    )
    assert list(hosts._source_entries(one_line, deb822=False)) == [("http://m.example/debian", ["bookworm"])]


def test_mirror_override(monkeypatch):
    monkeypatch.setenv("GPUREADY_LAB_MIRROR", "http://local.mirror/debian")
    assert hosts.debian_mirror() == "http://local.mirror/debian"


def test_base_path_changes_with_the_recipe(monkeypatch, tmp_path):
    before = hosts.base_path(cache=tmp_path)
    assert before.parent == tmp_path and before.name.startswith("base-")
    monkeypatch.setattr(hosts, "BASE_PACKAGES", (*hosts.BASE_PACKAGES, "vim-tiny"))
    assert hosts.base_path(cache=tmp_path) != before


def test_known_hosts_patterns(tmp_path):
    path = tmp_path / "known_hosts"
    ssh.write_known_hosts(
        path, [("10.213.1.1", 22, "ssh-ed25519 AAAA1 root@a"), ("10.213.1.2", 2222, "ssh-ed25519 AAAA2 c")]
    )
    assert path.read_text() == "10.213.1.1 ssh-ed25519 AAAA1\n[10.213.1.2]:2222 ssh-ed25519 AAAA2\n"
    assert path.stat().st_mode & 0o777 == 0o600


def test_inventory_says_the_lab_is_not_up(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUREADY_LAB_DIR", str(tmp_path))
    with pytest.raises(LabNotUp, match=r"lab is not up: run `gpuready lab up`"):
        runpy.run_path(str(REPO / "inventory/lab.py"))


def test_repository_inventory_data_keeps_the_real_layout():
    data = aptrepo.inventory_data("http://127.0.0.1:8080", "http://127.0.0.1:8080/keys/k.asc")
    assert data["cuda_repo_url"] == "http://127.0.0.1:8080/cuda/repos/{distro}/{arch}/"
    assert (
        data["nvidia_container_repo_url"]
        == "http://127.0.0.1:8080/libnvidia-container/stable/deb/{deb_arch}/"
    )
    assert data["kubernetes_repo_url"] == "http://127.0.0.1:8080/kubernetes/core:/stable:/v{minor}/deb/"
    assert set(data) == {
        f"{k}_{s}"
        for k in ("cuda_repo", "nvidia_container_repo", "kubernetes_repo")
        for s in ("url", "keyring_url")
    }
    for layout in aptrepo.REPOS.values():  # the concrete path is the template filled for Debian 12 on x86_64
        filled = layout.template.format(distro="debian12", arch="x86_64", deb_arch="amd64", minor="1.36")
        assert filled == layout.path


@pytest.fixture(scope="module")
def signed_repo(tmp_path_factory):
    if not all(shutil.which(t) for t in ("gpg", "gpgv", "dpkg-deb", "dpkg-scanpackages")):
        pytest.skip("needs gpg, gpgv, dpkg-deb and dpkg-scanpackages")
    from test_lab_apt import build_dummy_deb

    work = tmp_path_factory.mktemp("repo")
    deb = build_dummy_deb(work)
    signer = aptrepo.ensure_signing_key(work / "gnupg")
    repo = work / "root" / aptrepo.REPOS["cuda"].path
    aptrepo.build_flat_repo(repo, [deb], aptrepo.REPOS["cuda"], signer)
    keyring, armored = aptrepo.export_keyring(signer, work / "root/keys/lab.gpg")
    return repo, keyring, armored, signer


def test_release_hashes_match_the_indexes(signed_repo):
    repo, *_ = signed_repo
    release = (repo / "Release").read_text()
    assert release.startswith("Origin: NVIDIA\nLabel: NVIDIA CUDA\nArchitecture: x86_64\nDate: ")
    sha256 = release.split("SHA256:\n", 1)[1].split("SHA512:", 1)[0].splitlines()
    for name in ("Packages", "Packages.gz"):
        data = (repo / name).read_bytes()
        assert f" {hashlib.sha256(data).hexdigest()} {len(data):>16} {name}" in sha256
    packages = gzip.decompress((repo / "Packages.gz").read_bytes()).decode()
    assert "Package: gpuready-lab-dummy\n" in packages
    assert "Filename: ./gpuready-lab-dummy_1.0-1_all.deb\n" in packages


def test_signatures_verify_with_the_exported_keyring_only(signed_repo, tmp_path):
    repo, keyring, armored, _ = signed_repo
    ok = subprocess.run(["gpgv", "--keyring", str(keyring), str(repo / "InRelease")], capture_output=True)
    assert ok.returncode == 0, ok.stderr
    detached = ["gpgv", "--keyring", str(keyring), str(repo / "Release.gpg"), str(repo / "Release")]
    assert subprocess.run(detached, capture_output=True).returncode == 0
    assert armored.read_text().startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    other = aptrepo.ensure_signing_key(tmp_path / "gnupg", uid="other <o@example.invalid>")
    other_keyring, _ = aptrepo.export_keyring(other, tmp_path / "other.gpg")
    bad = subprocess.run(
        ["gpgv", "--keyring", str(other_keyring), str(repo / "InRelease")], capture_output=True
    )
    assert bad.returncode != 0


def test_server_serves_the_repository(signed_repo, tmp_path):
    repo, *_ = signed_repo
    root = repo.parents[len(Path(aptrepo.REPOS["cuda"].path).parts) - 1]
    pid, port = aptrepo.start_server(root, tmp_path / "server.log")
    try:
        url = f"http://127.0.0.1:{port}/{aptrepo.REPOS['cuda'].path}/InRelease"
        with urllib.request.urlopen(url, timeout=5) as response:
            assert response.read() == (repo / "InRelease").read_bytes()
    finally:
        subprocess.run(["kill", str(pid)], check=True)
        hosts._wait_gone(pid, 5.0)
    assert hosts._proc_start(pid) is None


def test_old_bases_are_pruned_unless_mounted(tmp_path):
    names = ("base-trixie-new", "base-trixie-old", "base-trixie-in-use")
    current, old, in_use = (tmp_path / name for name in names)
    for d in (current, old, in_use):
        (d / "etc").mkdir(parents=True)
    mounts = f"overlay /x overlay rw,lowerdir={in_use},upperdir=/u,workdir=/w 0 0\n"
    hosts._prune_old_bases(current, "trixie", mounts)
    assert sorted(p.name for p in tmp_path.glob("base-*")) == ["base-trixie-in-use", "base-trixie-new"]


# --- the egress proxy: the hosts' only way to the Debian mirror ------------------------------------------------------


@pytest.fixture
def origin():
    """A plain HTTP server on loopback standing in for the Debian mirror."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Mirror(BaseHTTPRequestHandler):
        def do_GET(self):
            body = f"{self.path} via {self.headers['Host']}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Mirror)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def egress(origin, tmp_path):
    sock = network.listening_socket("127.0.0.1", 0)
    pid = network.start_egress(sock, [origin], tmp_path / "egress.log")
    port = sock.getsockname()[1]
    sock.close()
    yield f"127.0.0.1:{port}"
    os.kill(pid, 15)
    hosts._wait_gone(pid, 5.0)


def test_egress_proxy_forwards_to_allowed_targets_only(origin, egress):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://{egress}"}))
    with opener.open(f"http://{origin}/debian/dists/bookworm/InRelease", timeout=10) as response:
        assert response.read().decode() == f"/debian/dists/bookworm/InRelease via {origin}"
    with pytest.raises(urllib.error.HTTPError) as refused:
        opener.open("http://127.0.0.1:9/elsewhere", timeout=10)
    assert refused.value.code == 403
    assert f"forwards only to {origin}, not 127.0.0.1:9" in refused.value.read().decode()


def test_egress_proxy_tunnels_connect_to_allowed_targets_only(origin, egress):
    host, port = egress.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as tunnel:
        tunnel.sendall(f"CONNECT {origin} HTTP/1.1\r\nHost: {origin}\r\n\r\n".encode())
        assert tunnel.recv(4096).startswith(b"HTTP/1.0 200 Connection established\r\n")
        tunnel.sendall(f"GET /through HTTP/1.0\r\nHost: {origin}\r\n\r\n".encode())
        reply = b""
        while chunk := tunnel.recv(4096):
            reply += chunk
        assert reply.endswith(f"/through via {origin}".encode())
    with socket.create_connection((host, int(port)), timeout=10) as tunnel:
        tunnel.sendall(b"CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n")
        assert tunnel.recv(4096).startswith(b"HTTP/1.0 403 ")


def test_egress_targets_come_from_the_base_apt_sources(tmp_path):
    (tmp_path / "etc/apt/sources.list.d").mkdir(parents=True)
    (tmp_path / "etc/apt/sources.list").write_text("deb http://deb.debian.org/debian bookworm main\n")
    (tmp_path / "etc/apt/sources.list.d/extra.sources").write_text(
        "Types: deb\nURIs: https://mirror.example:8443/debian-security\nSuites: bookworm-security\n"
    )
    (tmp_path / "etc/apt/sources.list.d/local.list").write_text("deb file:///srv/debian bookworm main\n")
    assert hosts.base_apt_targets(tmp_path) == ["deb.debian.org:80", "mirror.example:8443"]
