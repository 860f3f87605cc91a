"""The lab's Kubernetes repository packages: pkgs.k8s.io's names, versions, dependencies and files."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from gpuready.lab import aptrepo, k8s_packages

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not installed")


def stand_ins(root: Path) -> k8s_packages.RealBinaries:
    """Files in place of the real kubelet, kubeadm and crictl (the builds take minutes): the packages carry them
    byte for byte."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("kubelet", "kubeadm", "crictl"):
        (root / name).write_bytes(b"\x7fELF" + name.encode())
    return k8s_packages.RealBinaries(
        kubelet=root / "kubelet", kubeadm=root / "kubeadm", crictl=root / "crictl"
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    tmp = tmp_path_factory.mktemp("k8sdebs")
    paths = k8s_packages.build_kubernetes_packages(tmp / "debs", ("1.36.3",), stand_ins(tmp / "bin"))
    return {(field(p, "Package"), field(p, "Version")): p for p in paths}


def field(deb: Path, name: str) -> str:
    return subprocess.run(
        ["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True, check=True
    ).stdout.strip()


def files(deb: Path) -> dict[str, tuple[int, bytes]]:
    """path -> (mode, content) of the regular files in the package's data archive."""
    tar_bytes = subprocess.run(
        ["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True
    ).stdout
    out = {}
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                data = tar.extractfile(member)
                out["/" + member.name.removeprefix("./")] = (member.mode, data.read() if data else b"")
    return out


def test_names_and_versions_are_pkgs_k8s_ios(built: dict[tuple[str, str], Path]) -> None:
    assert sorted(built) == [
        ("cri-tools", "1.36.0-1.1"),
        ("kubeadm", "1.36.3-1.1"),
        ("kubectl", "1.36.3-1.1"),
        ("kubelet", "1.36.3-1.1"),
        ("kubernetes-cni", "1.7.1-1.1"),
    ]
    for (name, version), deb in built.items():
        assert deb.name == f"{name}_{version}_amd64.deb"
        assert field(deb, "Architecture") == "amd64"
        assert field(deb, "Maintainer") == "Kubernetes Authors <dev@kubernetes.io>"
        assert field(deb, "Homepage") == "https://kubernetes.io"


def test_control_fields(built: dict[tuple[str, str], Path]) -> None:
    kubelet, kubeadm = built[("kubelet", "1.36.3-1.1")], built[("kubeadm", "1.36.3-1.1")]
    assert field(kubelet, "Depends") == "kubernetes-cni (>= 1.2.0), mount, util-linux"
    assert field(kubelet, "Recommends") == "iptables (>= 1.8.4)"
    assert field(kubelet, "Section") == "net"
    assert (
        field(kubelet, "Description")
        == "Node agent for Kubernetes clusters\n Node agent for Kubernetes clusters."
    )
    assert field(kubeadm, "Depends") == ""  # no dependencies since 1.32 (crictl no longer needed)
    assert field(kubeadm, "Section") == "admin"
    assert field(built[("kubectl", "1.36.3-1.1")], "Depends") == ""
    assert field(built[("kubernetes-cni", "1.7.1-1.1")], "Section") == "net"
    # the CNI binaries are Debian's, which the hosts' containerd config names (/usr/lib/cni)
    assert field(built[("kubernetes-cni", "1.7.1-1.1")], "Depends") == "containernetworking-plugins"


def test_kubelet_unit_and_kubeadm_dropin(built: dict[tuple[str, str], Path]) -> None:
    kubelet = files(built[("kubelet", "1.36.3-1.1")])
    unit = kubelet["/usr/lib/systemd/system/kubelet.service"][1].decode()
    assert "ExecStart=/usr/bin/kubelet\nRestart=always\nStartLimitInterval=0\nRestartSec=10\n" in unit
    assert kubelet["/etc/default/kubelet"][1] == b"KUBELET_EXTRA_ARGS=\n"
    assert kubelet["/usr/bin/kubelet"][0] == 0o755
    assert {"/var/lib/kubelet/.kubelet-keep", "/etc/kubernetes/manifests/.kubelet-keep"} <= set(kubelet)
    dropin = files(built[("kubeadm", "1.36.3-1.1")])[
        "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf"
    ]
    lines = dropin[1].decode().splitlines()
    assert "EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env" in lines
    assert lines[-2:] == [
        "ExecStart=",
        "ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS "
        "$KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS",
    ]
    assert (
        'Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf '
        '--kubeconfig=/etc/kubernetes/kubelet.conf"'
    ) in lines
    postinst = subprocess.run(
        ["dpkg-deb", "--info", str(built[("kubelet", "1.36.3-1.1")]), "postinst"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "systemctl enable kubelet.service" in postinst and "systemctl restart kubelet.service" in postinst


def test_every_binary_is_the_real_one(built: dict[tuple[str, str], Path]) -> None:
    mode, data = files(built[("kubectl", "1.36.3-1.1")])["/usr/bin/kubectl"]
    assert mode == 0o755 and data == k8s_packages.kubectl_binary().read_bytes()
    for package, path in (("kubelet", "/usr/bin/kubelet"), ("kubeadm", "/usr/bin/kubeadm")):
        assert files(built[(package, "1.36.3-1.1")])[path] == (0o755, b"\x7fELF" + package.encode())
    assert files(built[("cri-tools", "1.36.0-1.1")])["/usr/bin/crictl"] == (0o755, b"\x7fELFcrictl")


def test_packages_do_not_share_files(built: dict[tuple[str, str], Path]) -> None:
    """dpkg refuses two packages owning one path."""
    owned: dict[str, str] = {}
    for (name, _version), deb in built.items():
        for path in files(deb):
            assert path not in owned, f"{path} in both {owned.get(path)} and {name}"
            owned[path] = name


def test_flat_repository_lists_them(built: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    aptrepo.build_flat_repo(repo, sorted(built.values()), aptrepo.REPOS["kubernetes"], None)
    stanzas = [s for s in (repo / "Packages").read_text().split("\n\n") if s.strip()]
    index = {}
    for stanza in stanzas:
        fields = dict(
            line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line[0].isspace()
        )
        index[(fields["Package"], fields["Version"])] = fields
    assert set(index) == set(built)
    assert index[("kubelet", "1.36.3-1.1")]["Depends"] == "kubernetes-cni (>= 1.2.0), mount, util-linux"


def test_rebuild_is_skipped_when_nothing_changed(tmp_path: Path) -> None:
    real = stand_ins(tmp_path / "bin")
    first = k8s_packages.build_kubernetes_packages(tmp_path / "debs", ("1.36.3",), real)
    mtimes = {p: p.stat().st_mtime_ns for p in first}
    again = k8s_packages.build_kubernetes_packages(tmp_path / "debs", ("1.36.3",), real)
    assert again == first and {p: p.stat().st_mtime_ns for p in again} == mtimes
    assert [p.name for p in first] == [
        "kubeadm_1.36.3-1.1_amd64.deb",
        "kubelet_1.36.3-1.1_amd64.deb",
        "kubectl_1.36.3-1.1_amd64.deb",
        "cri-tools_1.36.0-1.1_amd64.deb",
        "kubernetes-cni_1.7.1-1.1_amd64.deb",
    ]
