"""The real control plane's binaries, built or fetched once per version into the lab cache.

* kube-apiserver, kube-controller-manager, kube-scheduler and kubeadm come from the official ``k8s.io/kubernetes``
  Go module at the pinned version, through the Go module proxy. That module cannot be required as published: its
  go.mod points each ``k8s.io/*`` staging module at ``./staging/...``. So the cache directory gets a small module that
  requires it and replaces every staging module with its published ``v0.<minor>.<patch>`` twin (the list is read
  from the Kubernetes go.mod itself, so a new staging module needs no change here), then ``go build -trimpath``.
* etcd is built the same way from its official ``go.etcd.io/etcd/server/v3`` module (``ETCD_VERSION``, the 3.6
  line that kubeadm of Kubernetes 1.36 renders its flags for: ``--feature-gates=InitialCorruptCheck=true`` and
  ``--watch-progress-notify-interval``, which 3.5 refuses; Debian has no 3.6 package). Its go.mod ``replace``s
  point at the etcd repository's own directories, so it cannot be ``go install``ed: a small module requires it
  and builds its main package.
* promtool (which proves the add-ons' Prometheus alert rules) comes the same way from Debian's ``prometheus``
  package (bookworm: 2.42). Installing that package would enable and start a Prometheus server (its postinst runs
  ``deb-systemd-invoke start prometheus.service``, or ``invoke-rc.d`` without systemd) and pull in a web UI's
  JavaScript; unpacking it runs nothing, and only ``usr/bin/promtool`` is kept.

Everything lands in ``<cache>/kubernetes-v<version>/bin``, ``<cache>/etcd/`` and ``<cache>/promtool/``, keyed by
version like
the Debian base root, built in a temporary directory and renamed into place, so an interrupted build leaves
nothing half-made. Nothing prebuilt is committed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from gpuready.lab.gobuild import (
    GO_MIN,
    PrerequisiteError,
    Progress,
    download_module,
    ensure_built,
    go_build,
    go_problem,
    locked,
    run,
)
from gpuready.lab.state import cache_dir

# re-exported: the lab imported these from here before gpuready.lab.gobuild held them
__all__ = ["GO_MIN", "PrerequisiteError", "Progress", "go_problem", "locked", "run"]

KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubeadm")
ETCD_VERSION = "3.6.16"  # the newest 3.6 patch on the Go module proxy (2026-11)
PROMTOOL_SUITE = "bookworm"
PROMTOOL_PACKAGE = "prometheus"


@dataclass(frozen=True)
class KubeBinaries:
    version: str  # "1.36.3"
    bin_dir: Path

    def path(self, command: str) -> Path:
        return self.bin_dir / command


def kube_cache(version: str, cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / f"kubernetes-v{version}"


def cached_kube(version: str, cache: Path | None = None) -> KubeBinaries | None:
    bin_dir = kube_cache(version, cache) / "bin"
    if all((bin_dir / c).is_file() for c in KUBE_COMMANDS):
        return KubeBinaries(version, bin_dir)
    return None


def staging_replacements(kubernetes_go_mod: str, version: str) -> list[str]:
    """`replace` lines pointing each ``./staging`` module of the Kubernetes go.mod at its published version."""
    staged = re.findall(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", kubernetes_go_mod, flags=re.MULTILINE)
    if not staged:
        raise PrerequisiteError(
            "the k8s.io/kubernetes go.mod names no staging modules; cannot pin their versions"
        )
    minor_patch = version.split(".", 1)[1]
    return [f"\t{module} => {module} v0.{minor_patch}" for module in sorted(set(staged))]


def _module_source(version: str, work: Path, env: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The Kubernetes go.mod text, and the version stamp its release build would link in (commit, date)."""
    module = download_module("k8s.io/kubernetes", f"v{version}", work, env)
    stamp = {
        "gitVersion": f"v{version}",
        "gitMajor": version.split(".")[0],
        "gitMinor": version.split(".")[1],
        "gitCommit": module.commit,
        "gitTreeState": "clean",
        "buildDate": (module.time or "1970-01-01T00:00:00Z").split(".")[0].rstrip("Z") + "Z",
    }
    return module.go_mod.read_text(), stamp


def version_ldflags(stamp: dict[str, str]) -> str:
    """`-X` flags that make `--version` and the API's /version say the release, as the official build does
    (hack/lib/version.sh); without them every binary reports v0.0.0-master."""
    return " ".join(
        f"-X {pkg}.{name}={value}"
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        for name, value in stamp.items()
    )


def _write_module(work: Path, version: str, kubernetes_go_mod: str) -> None:
    replaces = "\n".join(staging_replacements(kubernetes_go_mod, version))
    (work / "go.mod").write_text(
        "// Generated by gpuready.lab.cluster.binaries: the Kubernetes control plane at one version.\n"
        f"module gpuready.lab/controlplane\n\ngo {GO_MIN[0]}.{GO_MIN[1]}\n\n"
        f"require k8s.io/kubernetes v{version}\n\nreplace (\n{replaces}\n)\n"
    )
    imports = "\n".join(f'\t_ "k8s.io/kubernetes/cmd/{c}"' for c in KUBE_COMMANDS)
    (work / "tools.go").write_text(f"//go:build tools\n\npackage controlplane\n\nimport (\n{imports}\n)\n")


def build_kube(
    version: str, progress: Progress, cache: Path | None = None
) -> tuple[KubeBinaries, float | None]:
    """The control plane binaries of `version`; builds them when missing. Returns (binaries, build seconds|None)."""
    target = kube_cache(version, cache)

    def build(tmp: Path) -> None:
        env = {**os.environ, "GOFLAGS": "-mod=mod -buildvcs=false", "CGO_ENABLED": "0"}
        progress(f"control plane v{version}: resolving k8s.io/kubernetes through the Go module proxy")
        source, stamp = _module_source(version, tmp, env)
        _write_module(tmp, version, source)
        run(["go", "mod", "tidy"], tmp, "go mod tidy", env)
        packages = [f"k8s.io/kubernetes/cmd/{c}" for c in KUBE_COMMANDS]
        total = len(run(["go", "list", "-deps", *packages], tmp, "go list", env).split())
        progress(f"control plane v{version}: compiling {total} Go packages (a cold build takes minutes)")
        _compile(tmp, packages, total, env, progress, version_ldflags(stamp))

    return ensure_built(
        target,
        target.parent / f".kubernetes-v{version}.lock",
        lambda: cached_kube(version, cache),
        build,
        f"control plane v{version}",
        progress,
        into=target / "bin",
    )


def _compile(
    work: Path, packages: list[str], total: int, env: dict[str, str], progress: Progress, ldflags: str
) -> None:
    """`go build -v` names each package it compiles (cached ones are silent): progress every tenth of the total."""
    cmd = ["go", "build", "-trimpath", "-v", f"-ldflags={ldflags}", "-o", str(work / "bin") + "/", *packages]
    proc = subprocess.Popen(
        cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    shown = 0
    tail: list[str] = []
    for built, line in enumerate(proc.stdout, start=1):
        tail = [*tail[-24:], line.rstrip()]
        step = min(10, built * 10 // max(total, 1))
        if step > shown:
            shown = step
            progress(f"  compiled {built} of at most {total} packages")
    if proc.wait() != 0:
        raise PrerequisiteError(
            f"go build of the control plane failed (exit {proc.returncode}):\n" + "\n".join(tail)
        )


def problems(version: str, cache: Path | None = None) -> list[str]:
    """What stops `build_kube` and `ensure_etcd` here, each with how to fix it; empty when both are cached or can
    be made. Asks the Go module proxy for the Kubernetes module (seconds) only when a build is needed."""
    found: list[str] = []
    if cached_kube(version, cache) is None or cached_etcd(cache) is None:
        problem = go_problem()
        if problem:
            found.append(problem)
        else:
            check = subprocess.run(
                ["go", "list", "-m", "-json", f"k8s.io/kubernetes@v{version}"],
                capture_output=True,
                text=True,
                cwd=tempfile.gettempdir(),
                timeout=120,
                env={**os.environ, "GOFLAGS": "-mod=mod"},
            )
            if check.returncode != 0:
                proxy = subprocess.run(
                    ["go", "env", "GOPROXY"], capture_output=True, text=True
                ).stdout.strip()
                found.append(
                    f"the Go module proxy (GOPROXY={proxy}) does not serve k8s.io/kubernetes v{version}: "
                    f"{(check.stderr.strip().splitlines() or ['no answer'])[-1]} (reach proxy.golang.org or set "
                    "GOPROXY to a mirror)"
                )
    return found


# --- etcd from Debian -------------------------------------------------------------------------------------------


def etcd_cache(cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / "etcd"


def cached_etcd(cache: Path | None = None, version: str = ETCD_VERSION) -> Path | None:
    found = etcd_cache(cache) / f"v{version}" / "bin" / "etcd"
    return found if found.is_file() else None


def _fetch_deb(
    mirror: str, suite: str, package: str, base: Path, progress: Progress, arch: str = "amd64", only: str = ""
) -> Path:
    """Debian `suite`'s `package`, downloaded with apt from a private source list (nothing installed, no maintainer
    script run) and unpacked into ``<base>/<package>_<version>_<arch>/``, or with `only` (a path in the package)
    just that file, alone in that directory; returns the directory. It appears whole or not at all."""
    for tool in ("apt-get", "dpkg-deb"):
        if not shutil.which(tool):
            raise PrerequisiteError(
                f"{tool} is not on PATH: the lab fetches Debian's {package} package with it"
            )
    keyring = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
    if not keyring.is_file():
        raise PrerequisiteError(f"{keyring} is missing: install Debian's debian-archive-keyring")
    progress(f"fetching Debian {suite}'s {package} from {mirror}")
    tmp = Path(tempfile.mkdtemp(dir=base, prefix=".fetch-"))
    try:
        (tmp / "lists/partial").mkdir(parents=True)
        (tmp / "archives/partial").mkdir(parents=True)
        (tmp / "sources.list").write_text(f"deb [signed-by={keyring}] {mirror} {suite} main\n")
        opts = [
            f"-oDir::Etc::SourceList={tmp / 'sources.list'}",
            "-oDir::Etc::SourceParts=/nonexistent",
            f"-oDir::State::Lists={tmp / 'lists'}",
            f"-oDir::Cache={tmp}",
            f"-oAPT::Architecture={arch}",
            "-oDebug::NoLocking=1",
            "-qq",
        ]
        run(["apt-get", *opts, "update"], tmp, f"apt-get update of Debian {suite}")
        run(["apt-get", *opts, "download", package], tmp, f"apt-get download {package}")
        (deb,) = tmp.glob(f"{package}_*.deb")
        dest = base / deb.name.removesuffix(".deb")
        run(["dpkg-deb", "-x", str(deb), str(tmp / "root")], tmp, f"unpacking {deb.name}")
        if only:
            (tmp / "only").mkdir(mode=0o755)
            (tmp / "root" / only).rename(tmp / "only" / Path(only).name)
            (tmp / "only").rename(dest)
        else:
            (tmp / "root").rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def ensure_etcd(progress: Progress, cache: Path | None = None, version: str = ETCD_VERSION) -> Path:
    """etcd `version`, built from the Go module proxy into the cache once; returns its path."""
    base = etcd_cache(cache)
    package = "go.etcd.io/etcd/server/v3"

    def build(tmp: Path) -> None:
        env = {**os.environ, "GOFLAGS": "-mod=mod -buildvcs=false", "CGO_ENABLED": "0"}
        (tmp / "go.mod").write_text(
            "// Generated by gpuready.lab.cluster.binaries: etcd at one version.\n"
            f"module gpuready.lab/etcd\n\ngo {GO_MIN[0]}.{GO_MIN[1]}\n"
        )
        progress(f"etcd v{version}: resolving {package} through the Go module proxy")
        run(["go", "get", f"{package}@v{version}"], tmp, "go get etcd", env)
        total = len(run(["go", "list", "-deps", package], tmp, "go list", env).split())
        progress(f"etcd v{version}: compiling {total} Go packages")
        go_build(["-o", str(tmp / "bin" / "etcd"), package], tmp, "go build etcd", env)

    found, _ = ensure_built(
        base / f"v{version}",
        base / ".lock",
        lambda: cached_etcd(cache, version),
        build,
        f"etcd v{version}",
        progress,
    )
    return found


# --- promtool from Debian ---------------------------------------------------------------------------------------


def promtool_cache(cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / "promtool"


def cached_promtool(cache: Path | None = None) -> Path | None:
    found = sorted(promtool_cache(cache).glob(f"{PROMTOOL_PACKAGE}_*/promtool"))
    return found[-1] if found else None


def _dpkg_arch() -> str:
    """This machine's Debian architecture (promtool runs here), amd64 when dpkg cannot say."""
    if not shutil.which("dpkg"):
        return "amd64"
    out = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True)
    return (out.stdout.strip() if out.returncode == 0 else "") or "amd64"


def ensure_promtool(mirror: str, progress: Progress, cache: Path | None = None) -> Path:
    """Debian's promtool (from `PROMTOOL_SUITE`'s ``prometheus``), fetched with apt into the cache once and kept
    alone (the server, its units and web assets are dropped); returns its path. Nothing is installed or started."""
    base = promtool_cache(cache)
    with locked(base / ".lock"):
        found = cached_promtool(cache)
        if found:
            return found
        arch = _dpkg_arch()
        promtool = _fetch_deb(
            mirror, PROMTOOL_SUITE, PROMTOOL_PACKAGE, base, progress, arch, "usr/bin/promtool"
        )
        promtool = promtool / "promtool"
        progress(f"promtool: {promtool}")
        return promtool


def _makes_lab_roots() -> bool:
    """Whether this machine makes the lab's roots here (root, with debootstrap); where not, the lab says why itself."""
    return os.geteuid() == 0 and shutil.which("debootstrap") is not None


def _start_bases(progress: Progress) -> list[tuple[str, Future[tuple[Path, float | None]]]]:
    """Start making every Debian release's lab base root (``hosts.ensure_base``, each under its own lock), one
    thread each; none where this machine cannot make them (not root, or no debootstrap: the lab says so itself)."""
    from gpuready.lab import hosts

    if not _makes_lab_roots():
        return []
    pool = ThreadPoolExecutor(max_workers=len(hosts.RELEASES), thread_name_prefix="base")
    started = [(suite, pool.submit(hosts.ensure_base, suite)) for suite in hosts.RELEASES]
    pool.shutdown(wait=False)
    return started


def _finish_bases(bases: list[tuple[str, Future[tuple[Path, float | None]]]], progress: Progress) -> None:
    """Wait for the base roots; one that failed is reported, not fatal here: the lab's start makes it again and
    fails there with the same message, while the control plane serves the tests that need no lab host."""
    for suite, future in bases:
        try:
            path, seconds = future.result()
        except Exception as exc:  # reported here; raised again where a lab needs this base
            progress(f"the {suite} base root could not be made now (the lab's start tries again): {exc}")
        else:
            progress(f"{suite} base root {'built' if seconds is not None else 'cached'}: {path}")


def _build_node_side(version: str, progress: Progress) -> None:
    """As root (the images' layers are the trixie base root): what the first lab's start would otherwise build
    (``hosts.node_side``: the real kubelet, kube-proxy and crictl, NVIDIA's add-on images, the CUDA images). They
    are CPU-bound Go builds: made here, before the tests start, they do not compete with the tests that need no
    lab host, which then run while the lab waits for hosts and pods. A failure is reported, not fatal here: the
    lab's start builds again and fails there with the same message."""
    from gpuready.lab import hosts

    if not _makes_lab_roots():
        return
    try:
        hosts.node_side(version, progress)
    except Exception as exc:  # reported here; raised again where a lab starts
        progress(
            f"the lab hosts' binaries and images could not be built now (the lab's start tries again): {exc}"
        )


def main(argv: list[str] | None = None) -> int:
    """`python -m gpuready.lab.cluster.binaries [VERSION]`: build or fetch what the lab's control plane runs,
    KWOK for its virtual nodes, promtool for the alert-rule tests, what the lab's NVIDIA packages carry and (as root) the lab's Debian base
    roots and what its hosts' start builds."""
    import sys

    from gpuready.lab.cluster.cluster import DEFAULT_VERSION
    from gpuready.lab.hosts import debian_mirror, progress

    args = sys.argv[1:] if argv is None else argv
    version = args[0] if args else DEFAULT_VERSION
    from gpuready.lab import nvidia_tools, packages
    from gpuready.lab.cluster import kwok
    from gpuready.lab.silicon import build

    # the lab's Debian base roots (debootstrap: mostly network and disk) are made beside the Go builds (CPU), so
    # a cold machine does not wait for them one after the other at the first lab's start
    bases = _start_bases(progress)
    try:
        kube, seconds = build_kube(version, progress)
        etcd = ensure_etcd(progress)
        kwok_binary = kwok.ensure_kwok(progress)
        promtool = ensure_promtool(debian_mirror(), progress)
        # what the lab's NVIDIA packages carry: NVIDIA's toolkit binaries and the mock NVML and CUDA libraries
        toolkits = [nvidia_tools.ensure_toolkit(v, progress) for v in packages.TOOLKIT_VERSIONS]
        libraries = build.ensure_libraries(progress)
    except PrerequisiteError as exc:
        print(f"gpuready: {exc}", file=sys.stderr)
        return 1
    finally:
        _finish_bases(bases, progress)
    _build_node_side(version, progress)
    state = "built" if seconds is not None else "cached"
    progress(f"control plane v{version} {state}: {kube.bin_dir}; etcd: {etcd}; KWOK: {kwok_binary}; "
             f"promtool: {promtool}")  # fmt: skip
    progress(f"NVIDIA toolkit {', '.join(packages.TOOLKIT_VERSIONS)}: {len(toolkits)} version(s) of "
             f"{', '.join(nvidia_tools.COMMANDS)}; mock libraries: {', '.join(str(p) for p in libraries.values())}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
