"""The lab's pure parts, without root: host plan, SSH port choice, mirror discovery, repositories, inventory."""

from __future__ import annotations

import gzip
import hashlib
import runpy
import shutil
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest

from gpuready.lab import aptrepo, hosts, ssh
from gpuready.lab.state import LabNotUp

REPO = Path(__file__).resolve().parents[2]


def test_profiles_cycle_over_nodes():
    plan = hosts.plan_hosts(5, ["l4-1", "t4-1"])
    assert [(h.name, h.address, h.profile) for h in plan] == [
        ("gpu-node-1", "127.0.10.1", "l4-1"),
        ("gpu-node-2", "127.0.10.2", "t4-1"),
        ("gpu-node-3", "127.0.10.3", "l4-1"),
        ("gpu-node-4", "127.0.10.4", "t4-1"),
        ("gpu-node-5", "127.0.10.5", "l4-1"),
    ]
    assert [h.profile for h in hosts.plan_hosts(3, None)] == ["h100-sxm-8", "a100-80gb-4", "l4-1"]
    with pytest.raises(hosts.LabError, match="between 1 and 250"):
        hosts.plan_hosts(0, None)


def test_ssh_port_skips_a_port_held_by_a_wildcard_listener():
    with socket.socket() as wildcard, socket.socket() as probe:
        wildcard.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        wildcard.bind(("0.0.0.0", 0))
        wildcard.listen(1)
        taken = wildcard.getsockname()[1]
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
        probe.close()
        assert hosts.choose_ssh_port(["127.0.10.1", "127.0.10.2"], (taken, free)) == free
        with pytest.raises(hosts.LabError, match="no SSH port free"):
            hosts.choose_ssh_port(["127.0.10.1"], (taken,))


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
    before = hosts.base_path(tmp_path)
    assert before.parent == tmp_path and before.name.startswith("base-")
    monkeypatch.setattr(hosts, "BASE_PACKAGES", (*hosts.BASE_PACKAGES, "vim-tiny"))
    assert hosts.base_path(tmp_path) != before


def test_known_hosts_patterns(tmp_path):
    path = tmp_path / "known_hosts"
    ssh.write_known_hosts(
        path, [("127.0.10.1", 22, "ssh-ed25519 AAAA1 root@a"), ("127.0.10.2", 2222, "ssh-ed25519 AAAA2 c")]
    )
    assert path.read_text() == "127.0.10.1 ssh-ed25519 AAAA1\n[127.0.10.2]:2222 ssh-ed25519 AAAA2\n"
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
    assert set(data) == {f"{k}_{s}" for k in ("cuda_repo", "nvidia_container_repo", "kubernetes_repo")
                         for s in ("url", "keyring_url")}  # fmt: skip
    for layout in aptrepo.REPOS.values():  # the concrete path is the template filled for Debian 12 on x86_64
        filled = layout.template.format(distro="debian12", arch="x86_64", deb_arch="amd64", minor="1.34")
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
    current, old, in_use = (tmp_path / name for name in ("base-new", "base-old", "base-in-use"))
    for d in (current, old, in_use):
        (d / "etc").mkdir(parents=True)
    mounts = f"overlay /x overlay rw,lowerdir={in_use},upperdir=/u,workdir=/w 0 0\n"
    hosts._prune_old_bases(current, mounts)
    assert sorted(p.name for p in tmp_path.glob("base-*")) == ["base-in-use", "base-new"]
