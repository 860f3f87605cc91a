"""Build the emulated NVIDIA driver and container toolkit .deb files the lab's apt repositories serve.

Package names, versions and dependencies are those of the real repositories, so a deploy that pins and
holds ``nvidia-driver-cuda=580.178.04-1`` or ``nvidia-container-toolkit=1.20.0-1`` works unchanged against
the lab: the CUDA debian12 repository (since R580: ``nvidia-driver``, ``nvidia-driver-cuda``, ``nvidia-smi``,
``libnvidia-ml1``, ``libcuda1``, ``nvidia-kernel-open-dkms``, ``nvidia-persistenced``, ``nvidia-fabricmanager``,
all versioned ``<driver>-1``) and libnvidia-container's stable repository (``nvidia-container-toolkit``,
``nvidia-container-toolkit-base``, ``libnvidia-container-tools``, ``libnvidia-container1``, ``<version>-1``).
The driver's libraries are the lab's mock NVML and CUDA driver (Go, :mod:`gpuready.lab.silicon`), answering from
the host's emulated machine; its tools are emulated by the static ``nvidia-emu-tools`` (Go, :mod:`gpuready.lab.silicon`:
nvidia-smi, MPS control, dcgmi, nvbandwidth and the daemons, each under its own name); the container toolkit's are
NVIDIA's real ``nvidia-ctk``, ``nvidia-container-runtime``, ``nvidia-cdi-hook`` and ``nvidia-container-runtime-hook``
of the package's version, built from their Go module (:mod:`gpuready.lab.nvidia_tools`), with the refresh units and
maintainer scripts NVIDIA's packages have. Only libnvidia-container (C; its ``nvidia-container-cli``, which the
legacy runtime mode alone runs) stays emulated: the static tools under that name.

Built with ``dpkg-deb --build --root-owner-group`` (no fakeroot); rebuilt only when the package files
(:mod:`gpuready.lab.emulator.package_files`), the static tools' build, the requested versions or the toolkit binaries
change.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuready.lab import nvidia_tools
from gpuready.lab.emulator import package_files as pf

DRIVER_VERSIONS = ("580.178.04", "570.195.03", "595.91.07")  # the default, an older branch, a newer branch
TOOLKIT_VERSIONS = ("1.20.0", "1.17.3")  # the default, and one below NVIDIAScape's fix (1.17.8)
DRIVER_LIB = "/usr/lib/nvidia-emu"
TOOLKIT_LIB = "/usr/lib/nvidia-container-emu"
MULTIARCH_LIB = "/usr/lib/x86_64-linux-gnu"
CUDA_MAINTAINER = "cudatools <cudatools@nvidia.com>"
TOOLKIT_MAINTAINER = "NVIDIA CORPORATION <cudatools@nvidia.com>"
STAMP = ".gpuready-packages.json"


@dataclass
class Deb:
    """One binary package: control fields, files (path -> (content, mode)), symlinks, maintainer scripts."""

    name: str
    version: str
    maintainer: str
    section: str
    description: str
    depends: list[str] = field(default_factory=list)
    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    executables: dict[str, Path] = field(
        default_factory=dict
    )  # path in the package -> a built file, copied 0755
    links: dict[str, str] = field(default_factory=dict)
    scripts: dict[str, str] = field(default_factory=dict)
    conffiles: list[str] = field(default_factory=list)
    extra: dict[str, str] = field(default_factory=dict)

    def add(self, path: str, content: str | bytes, mode: int = 0o644) -> None:
        self.files[path] = (content.encode() if isinstance(content, str) else content, mode)

    @property
    def filename(self) -> str:
        return f"{self.name}_{self.version.split(':', 1)[-1]}_amd64.deb"  # pool file names carry no epoch

    def control(self) -> str:
        size = sum(len(c) for c, _m in self.files.values()) + sum(
            p.stat().st_size for p in self.executables.values()
        )
        size_kib = max(1, size // 1024)
        lines = [
            f"Package: {self.name}",
            f"Version: {self.version}",
            "Architecture: amd64",
            f"Maintainer: {self.maintainer}",
            f"Installed-Size: {size_kib}",
        ]
        if self.depends:
            lines.append("Depends: " + ", ".join(self.depends))
        lines += [f"{k}: {v}" for k, v in self.extra.items()]
        lines += [f"Section: {self.section}", "Priority: optional", "Homepage: https://www.nvidia.com"]
        summary, _, body = self.description.partition("\n")
        lines.append(f"Description: {summary}")
        lines += [f" {ln}" if ln else " ." for ln in body.splitlines()]
        lines.append(" This package is emulated by the gpuready lab: no real GPU or driver is involved.")
        return "\n".join(lines) + "\n"

    def build(self, outdir: Path) -> Path:
        with tempfile.TemporaryDirectory(prefix=f"deb-{self.name}-") as tmp:
            root = Path(tmp)
            debian = root / "DEBIAN"
            debian.mkdir(mode=0o755)
            (debian / "control").write_text(self.control())
            for script, text in self.scripts.items():
                (debian / script).write_text(text)
                (debian / script).chmod(0o755)
            if self.conffiles:
                (debian / "conffiles").write_text("".join(f"{c}\n" for c in self.conffiles))
            for path, (content, mode) in self.files.items():
                target = root / path.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
                target.chmod(mode)
            for path, built in self.executables.items():
                target = root / path.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(built, target)
                target.chmod(0o755)
            for path, dest in self.links.items():
                target = root / path.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(dest)
            for directory in [root, *sorted(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())]:
                directory.chmod(0o755)
            out = outdir / self.filename
            env = dict(os.environ, SOURCE_DATE_EPOCH="1760000000")
            subprocess.run(
                ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(out)],
                check=True,
                capture_output=True,
                env=env,
            )
        return out


def driver_debs(driver: str, libraries: dict[str, Path]) -> list[Deb]:
    """The R5xx driver packages of the CUDA repository for one driver version. ``libraries`` are the lab's mock
    ``libnvidia-ml.so.1`` and ``libcuda.so.1`` (:mod:`gpuready.lab.silicon.build`: ``"nvml"``, ``"cuda"``),
    installed where the real packages put theirs, so NVIDIA's own tools and the product's NVML and CUDA code load
    them unchanged, and the static ``nvidia-emu-tools`` (``"tools"``): ``/usr/bin/nvidia-smi``,
    ``/usr/bin/nvidia-cuda-mps-control`` (in ``nvidia-cuda-mps``, Debian's name for NVIDIA's MPS package), ELF
    files where NVIDIA's are, so the real ``nvidia-ctk cdi generate`` lists them as it lists NVIDIA's and they run
    in any container the nvidia runtime gives them to, and the daemons ``/usr/bin/nvidia-persistenced`` and
    ``/usr/bin/nv-fabricmanager``."""
    v = f"{driver}-1"
    branch = driver.split(".")[0]

    def pkg(name: str, section: str, description: str, depends: list[str] | None = None) -> Deb:
        return Deb(name, v, CUDA_MAINTAINER, section, description, depends or [])

    ml = pkg("libnvidia-ml1", "libs", "NVIDIA Management Library (NVML) runtime library")
    ml.add(f"{DRIVER_LIB}/driver-version", driver + "\n")
    ml.add(f"{MULTIARCH_LIB}/libnvidia-ml.so.{driver}", libraries["nvml"].read_bytes())
    ml.links[f"{MULTIARCH_LIB}/libnvidia-ml.so.1"] = f"libnvidia-ml.so.{driver}"

    cuda = pkg("libcuda1", "libs", "NVIDIA CUDA Driver Library", [f"libnvidia-ml1 (= {v})"])
    cuda.add(f"{MULTIARCH_LIB}/libcuda.so.{driver}", libraries["cuda"].read_bytes())
    cuda.links[f"{MULTIARCH_LIB}/libcuda.so.1"] = f"libcuda.so.{driver}"

    kmod = pkg(
        "nvidia-kernel-open-dkms",
        "kernel",
        "NVIDIA binary kernel module DKMS source (open GPU kernel module)",
    )
    kmod.add(f"{DRIVER_LIB}/kmod-version", driver + "\n")
    kmod.add(f"/usr/src/nvidia-{driver}/dkms.conf", f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{driver}"\n')
    kmod.extra["Provides"] = f"nvidia-kernel-dkms-any (= {v})"
    kmod.scripts = {"postinst": pf.KMOD_POSTINST, "postrm": pf.KMOD_POSTRM}

    smi = pkg("nvidia-smi", "utils", "NVIDIA System Management Interface", [f"libnvidia-ml1 (= {v})"])
    smi.executables["/usr/bin/nvidia-smi"] = libraries["tools"]

    mps = pkg(
        "nvidia-cuda-mps",
        "utils",
        "NVIDIA CUDA Multi Process Service (MPS)",
        [f"libnvidia-ml1 (= {v})", f"libcuda1 (= {v})"],
    )
    mps.executables["/usr/bin/nvidia-cuda-mps-control"] = libraries["tools"]

    pd = pkg(
        "nvidia-persistenced",
        "utils",
        "daemon to maintain persistent software state in the NVIDIA driver",
        [f"libnvidia-ml1 (= {v})"],
    )
    pd.executables["/usr/bin/nvidia-persistenced"] = libraries["tools"]
    pd.add("/lib/systemd/system/nvidia-persistenced.service", pf.PERSISTENCED_UNIT)
    pd.scripts = {
        "postinst": pf.postinst_enable("nvidia-persistenced.service", start=True),
        "prerm": pf.prerm_stop("nvidia-persistenced.service"),
        "postrm": pf.postrm_disable("nvidia-persistenced.service"),
    }

    fm = pkg(
        "nvidia-fabricmanager",
        "utils",
        "Fabric Manager for NVSwitch based systems",
        [f"libnvidia-ml1 (= {v})", f"nvidia-kernel-open-dkms (= {v}) | nvidia-kernel-dkms-any (= {v})"],
    )
    fm.extra["Provides"] = f"nvidia-fabricmanager-{branch} (= {v})"
    fm.executables["/usr/bin/nv-fabricmanager"] = libraries["tools"]
    fm.add("/lib/systemd/system/nvidia-fabricmanager.service", pf.FABRICMANAGER_UNIT)
    fm.add("/usr/share/nvidia/nvswitch/fabricmanager.cfg", pf.FABRICMANAGER_CFG)
    fm.conffiles = ["/usr/share/nvidia/nvswitch/fabricmanager.cfg"]
    fm.scripts = {
        "postinst": pf.postinst_enable("nvidia-fabricmanager.service", start=False),
        "prerm": pf.prerm_stop("nvidia-fabricmanager.service"),
        "postrm": pf.postrm_disable("nvidia-fabricmanager.service"),
    }

    dc = pkg(
        "nvidia-driver-cuda",
        "utils",
        "NVIDIA driver CUDA integration components\nnvidia-smi, NVML, libcuda and the persistence daemon.",
        [
            f"nvidia-smi (= {v})",
            f"libnvidia-ml1 (= {v})",
            f"libcuda1 (= {v})",
            f"nvidia-persistenced (= {v})",
            f"nvidia-cuda-mps (= {v})",
            f"nvidia-kernel-open-dkms (= {v}) | nvidia-kernel-dkms-any (= {v})",
        ],
    )
    meta = pkg("nvidia-driver", "non-free/x11", "NVIDIA metapackage", [f"nvidia-driver-cuda (= {v})"])
    return [ml, cuda, kmod, smi, mps, pd, fm, dc, meta]


def toolkit_debs(toolkit: str, binaries: dict[str, Path], tools: Path) -> list[Deb]:
    """The libnvidia-container stable repository's packages for one toolkit version, with `binaries` (command name ->
    built file, :func:`gpuready.lab.nvidia_tools.ensure_toolkit`) where NVIDIA's packages install them, and
    ``nvidia-container-cli`` the static ``nvidia-emu-tools`` (`tools`, :mod:`gpuready.lab.silicon.build`), which
    reports the toolkit version ``libnvidia-container1`` ships."""
    v = f"{toolkit}-1"

    def pkg(name: str, section: str, description: str, depends: list[str] | None = None) -> Deb:
        return Deb(name, v, TOOLKIT_MAINTAINER, section, description, depends or [])

    def add_binary(deb: Deb, command: str) -> None:
        if command in binaries:
            deb.executables[f"/usr/bin/{command}"] = binaries[command]

    lib = pkg("libnvidia-container1", "libs", "NVIDIA container runtime library")
    lib.add(f"{MULTIARCH_LIB}/libnvidia-container.so.{toolkit}", f"emulated libnvidia-container {toolkit}\n")
    lib.links[f"{MULTIARCH_LIB}/libnvidia-container.so.1"] = f"libnvidia-container.so.{toolkit}"
    lib.add(f"{TOOLKIT_LIB}/version", toolkit + "\n")

    cli = pkg(
        "libnvidia-container-tools",
        "utils",
        "NVIDIA container runtime library (command-line tools)",
        [f"libnvidia-container1 (>= {v})"],
    )
    cli.executables["/usr/bin/nvidia-container-cli"] = tools

    # packaging/debian/nvidia-container-toolkit-base.install: the runtime, nvidia-ctk, nvidia-cdi-hook, the units
    base = pkg("nvidia-container-toolkit-base", "utils", "NVIDIA Container Toolkit Base")
    for command in ("nvidia-ctk", "nvidia-container-runtime", "nvidia-cdi-hook"):
        add_binary(base, command)
    refresh_units = tuple(int(x) for x in toolkit.split(".")[:2]) >= (1, 18)  # they ship from 1.18
    if refresh_units:
        base.add("/lib/systemd/system/nvidia-cdi-refresh.path", pf.CDI_REFRESH_PATH)
        base.add("/lib/systemd/system/nvidia-cdi-refresh.service", pf.CDI_REFRESH_SERVICE)
        base.add("/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env", pf.CDI_REFRESH_ENV)
        base.conffiles = ["/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"]
    # /etc/nvidia-container-runtime/config.toml is no file of the package: its postinst has nvidia-ctk write it
    base.scripts = {"postinst": pf.toolkit_base_postinst(refresh_units)}

    tk = pkg(
        "nvidia-container-toolkit",
        "utils",
        "NVIDIA Container toolkit\nProvides tools and utilities to enable GPU support in containers.",
        [
            f"nvidia-container-toolkit-base (= {v})",
            f"libnvidia-container-tools (>= {v})",
            "libnvidia-container-tools (<< 2.0.0)",
        ],
    )
    add_binary(tk, "nvidia-container-runtime-hook")
    tk.scripts = {"postinst": pf.TOOLKIT_POSTINST, "postrm": pf.TOOLKIT_POSTRM}
    return [lib, cli, base, tk]


DCGM_VERSION = "1:4.5.2-1"  # the emulated dcgmi reports DCGM 4.5.2 (gpuready/lab/silicon/tools/dcgmi.go)
NVBANDWIDTH_VERSION = "0.8-1"
DCGM_CUDA_MAJORS = (12, 13)  # the lab's drivers: R570 (CUDA 12.8), R580 and R595 (CUDA 13)
DCGM_SERVICE = "nvidia-dcgm"


def diag_debs(tools: Path) -> list[Deb]:
    """What the diag layer runs on a node: DCGM's ``dcgmi`` and ``nvbandwidth``, for lab hosts that install them.

    ``datacenter-gpu-manager-4-core`` is the real name of DCGM 4's package in NVIDIA's CUDA repository, with
    ``dcgmi``, ``nv-hostengine`` (``tools``, the static ``nvidia-emu-tools``) and the ``nvidia-dcgm`` unit (not
    enabled by the package), and
    ``datacenter-gpu-manager-4-cuda12``/``-cuda13`` its per-CUDA diagnostics. nvbandwidth has no NVIDIA package
    (Debian and Ubuntu package it as ``nvbandwidth``); the lab serves its emulation under that name from the CUDA
    repository, so a node deploy with ``diag_tools`` finds it there. Both ``nvbandwidth`` and ``dcgmi`` are ``tools``,
    the static ``nvidia-emu-tools`` (:mod:`gpuready.lab.silicon.build`) under their names, as NVIDIA's are ELF files:
    nvbandwidth prints the figures the mock libcuda.so.1 times copies by, dcgmi reads the machine as the mock NVML
    does.
    """
    dcgm = Deb(
        "datacenter-gpu-manager-4-core",
        DCGM_VERSION,
        CUDA_MAINTAINER,
        "utils",
        "NVIDIA Data Center GPU Manager (DCGM) 4: core libraries and dcgmi",
        ["libnvidia-ml1"],
    )
    dcgm.executables["/usr/bin/dcgmi"] = tools
    dcgm.executables["/usr/bin/nv-hostengine"] = tools
    dcgm.add(f"/lib/systemd/system/{DCGM_SERVICE}.service", pf.DCGM_UNIT)
    dcgm.scripts = {
        "postinst": pf.DAEMON_RELOAD_POSTINST,
        "prerm": pf.prerm_stop(f"{DCGM_SERVICE}.service"),
        "postrm": pf.postrm_disable(f"{DCGM_SERVICE}.service"),
    }
    # DCGM 4's diagnostics per CUDA major (gpuready.nvidia.diag_packages): the node deploy installs the one of
    # its driver's CUDA major; here they only carry the dependency, the emulated dcgmi runs every level
    cuda = [
        Deb(
            f"datacenter-gpu-manager-4-cuda{major}",
            DCGM_VERSION,
            CUDA_MAINTAINER,
            "utils",
            f"NVIDIA Data Center GPU Manager (DCGM) 4: diagnostics for CUDA {major}",
            [f"datacenter-gpu-manager-4-core (= {DCGM_VERSION})"],
        )
        for major in DCGM_CUDA_MAJORS
    ]
    nvbw = Deb(
        "nvbandwidth",
        NVBANDWIDTH_VERSION,
        CUDA_MAINTAINER,
        "utils",
        "NVIDIA nvbandwidth: copy bandwidth between host and GPUs and between GPUs",
        ["libcuda1"],
    )
    nvbw.executables["/usr/bin/nvbandwidth"] = tools
    return [dcgm, *cuda, nvbw]


def _fingerprint(
    driver_versions: tuple[str, ...], toolkit_versions: tuple[str, ...], binaries: list[Path]
) -> str:
    h = hashlib.sha256(json.dumps([driver_versions, toolkit_versions]).encode())
    h.update(Path(__file__).read_bytes())
    for (
        binary
    ) in binaries:  # built once per version and renamed into place: path, size and time tell a rebuild
        st = binary.stat()
        h.update(f"{binary}:{st.st_size}:{st.st_mtime_ns}".encode())
    h.update(Path(pf.__file__).read_bytes())  # the units, configuration files and maintainer scripts
    return h.hexdigest()


def build_packages(
    outdir: Path,
    driver_versions: tuple[str, ...] | list[str] = DRIVER_VERSIONS,
    toolkit_versions: tuple[str, ...] | list[str] = TOOLKIT_VERSIONS,
    toolkit_binaries: Callable[[str], dict[str, Path]] = nvidia_tools.ensure_toolkit,
    driver_libraries: Callable[[], dict[str, Path]] | None = None,
) -> dict[str, list[Path]]:
    """Build (or reuse) every package; returns .deb paths by repository key ("cuda", "libnvidia-container").

    `toolkit_binaries` gives the real toolkit binaries of a version (built from the Go module once, then cached;
    a cold build takes about a minute per version)."""
    if shutil.which("dpkg-deb") is None:
        raise RuntimeError("dpkg-deb not found: install dpkg (Debian/Ubuntu) to build the lab packages")
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    built = {ver: toolkit_binaries(ver) for ver in toolkit_versions}
    if driver_libraries is None:
        from gpuready.lab.hosts import progress
        from gpuready.lab.silicon import build

        libraries = build.ensure_libraries(progress, names=["nvml", "cuda", "tools"])
    else:
        libraries = driver_libraries()
    by_repo = {
        "cuda": [
            *(d for ver in driver_versions for d in driver_debs(ver, libraries)),
            *diag_debs(libraries["tools"]),
        ],
        "libnvidia-container": [
            d for ver in toolkit_versions for d in toolkit_debs(ver, built[ver], libraries["tools"])
        ],
    }
    result = {key: [outdir / d.filename for d in debs] for key, debs in by_repo.items()}
    binaries = [path for ver in toolkit_versions for _name, path in sorted(built[ver].items())]
    binaries += [path for _name, path in sorted(libraries.items())]
    fingerprint = _fingerprint(tuple(driver_versions), tuple(toolkit_versions), binaries)
    stamp = outdir / STAMP
    wanted = {p.name for paths in result.values() for p in paths}
    if stamp.exists() and stamp.read_text() == fingerprint and all((outdir / n).exists() for n in wanted):
        return result
    for old in outdir.glob("*.deb"):
        if old.name not in wanted:
            old.unlink()
    for debs in by_repo.values():
        for deb in debs:
            deb.build(outdir)
    stamp.write_text(fingerprint)
    return result
