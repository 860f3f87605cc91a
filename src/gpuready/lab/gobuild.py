"""Building Go code into the lab cache: the steps every lab binary shares, written once.

The control plane and etcd (:mod:`gpuready.lab.cluster.binaries`), NVIDIA's container toolkit
(:mod:`gpuready.lab.nvidia_tools`), nvidia-mig-parted (:mod:`gpuready.lab.mig_parted`) and the mock NVIDIA
libraries (:mod:`gpuready.lab.silicon.build`) are each built the same way:

* a module is fetched at one version through the Go module proxy (:func:`download_module`: its source
  directory, its go.mod and the release commit and time the proxy's ``.info`` names);
* ``go build`` (or ``go install``) ``-trimpath`` with the module's own ``-ldflags`` (:func:`go_build`);
* in a temporary directory next to the cache directory, renamed into place when whole, so an interrupted build
  leaves nothing half-made (:func:`build_into`), under a file lock and only when the cache has no complete build
  (:func:`ensure_built`), with a progress line saying how long it took.

Each caller keeps its own cache directory name; nothing here names one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from gpuready.lab.state import locked

GO_MIN = (1, 26)  # k8s.io/kubernetes 1.36's go directive: the newest Go any lab build needs

Progress = Callable[[str], None]
T = TypeVar("T")


class PrerequisiteError(RuntimeError):
    """A tool a lab build needs is missing or failed; the message names each and how to get it."""


def run(cmd: list[str], cwd: Path, what: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-25:])
        raise PrerequisiteError(f"{what} failed ({' '.join(cmd)}, exit {result.returncode}):\n{tail}")
    return result.stdout


def go_problem() -> str | None:
    """Why Go cannot build the lab's binaries here, or None."""
    go = shutil.which("go")
    if not go:
        return (
            f"Go {GO_MIN[0]}.{GO_MIN[1]} or newer is not on PATH: it builds kube-apiserver, kube-scheduler and "
            "kube-controller-manager from the Kubernetes Go module (install it from https://go.dev/dl/; Debian's "
            "golang-go carries it only in releases newer than trixie)"
        )
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True).stdout.strip()
    found = re.match(r"go(\d+)\.(\d+)", out)
    if not found or (int(found[1]), int(found[2])) < GO_MIN:
        return f"{go} is {out or 'of unknown version'}; building Kubernetes needs Go {GO_MIN[0]}.{GO_MIN[1]} or newer"
    return None


def cgo_problem() -> str | None:
    """Why Go with cgo cannot build here (no Go, too old a Go, or no C compiler for cgo), or None."""
    problem = go_problem()
    if problem:
        return problem
    cc = os.environ.get("CC", "gcc")
    if not shutil.which(cc):
        return f"{cc} is not on PATH: cgo needs a C compiler (install gcc)"
    return None


def require_go(cgo: str = "") -> None:
    """Raise PrerequisiteError when Go cannot build here; with `cgo` (what needs it, e.g. "nvidia-mig-parted
    builds with cgo (go-nvml dlopens libnvidia-ml.so.1)"), also when cgo's C compiler is missing."""
    problem = go_problem() or (cgo_problem() if cgo else None)
    if problem:
        raise PrerequisiteError(f"{problem}; {cgo}" if cgo else problem)


@dataclass(frozen=True)
class GoModule:
    """A module as the Go module proxy served it: its unpacked source, its go.mod, and the release commit and
    time from the proxy's ``.info`` ("" when it names none)."""

    dir: Path
    go_mod: Path
    commit: str
    time: str


def download_module(module: str, version: str, work: Path, env: dict[str, str]) -> GoModule:
    """`module` at `version` (with its "v"), downloaded into the Go module cache (`go mod download -json`)."""
    info = json.loads(
        run(
            ["go", "mod", "download", "-json", f"{module}@{version}"],
            work,
            f"downloading {module} {version} from the Go module proxy",
            env,
        )
    )
    if info.get("Error"):
        raise PrerequisiteError(f"{module} {version}: {info['Error']}")
    release = json.loads(Path(info["Info"]).read_text()) if info.get("Info") else {}
    return GoModule(
        Path(info["Dir"]),
        Path(info["GoMod"]),
        (release.get("Origin") or {}).get("Hash", ""),
        release.get("Time", ""),
    )


def go_build(
    args: list[str], cwd: Path, what: str, env: dict[str, str], ldflags: str = "", verb: str = "build"
) -> None:
    """`go <verb> -trimpath [-ldflags=...] <args>` in `cwd`; a failure raises PrerequisiteError with its tail."""
    cmd = ["go", verb, "-trimpath", *([f"-ldflags={ldflags}"] if ldflags else []), *args]
    run(cmd, cwd, what, env)


def build_module_commands(
    module_path: str,
    version: str,
    commands: Sequence[str],
    tmp: Path,
    env: dict[str, str],
    ldflags: Callable[[str], str],
    label: str,
    progress: Progress,
) -> list[str]:
    """Build each of `commands` that `module_path` at `version` (with its "v") has under ``cmd/``, as NVIDIA's
    Makefiles do: ``go build ./cmd/<name>`` in the module's downloaded directory (``go install <cmd>@<version>``
    first lists the module's versions, which the lab's proxy refuses with 403), into ``tmp/bin``, linked with
    ``ldflags(release commit)``; ``tmp/commands.json`` (what :func:`cached_commands` reads) is written last.
    Returns the names built."""
    progress(f"{label}: resolving {module_path} through the Go module proxy")
    module = download_module(module_path, version, tmp, env)
    found = [c for c in commands if (module.dir / "cmd" / c).is_dir()]
    progress(f"{label}: compiling {', '.join(found)} (cgo; minutes cold)")
    (tmp / "bin").mkdir()
    packages = ["-o", f"{tmp / 'bin'}/", *(f"./cmd/{c}" for c in found)]
    go_build(packages, module.dir, f"go build of the {label}", env, ldflags(module.commit))
    (tmp / "commands.json").write_text(json.dumps(found) + "\n")
    return found


def cached_commands(target: Path) -> dict[str, Path] | None:
    """A cached build of commands: ``<target>/bin/<name>`` by name for each name ``<target>/commands.json``
    lists (the build writes it last), or None when the list or any binary is missing."""
    try:
        names = json.loads((target / "commands.json").read_text())
    except (OSError, ValueError):
        return None
    found = {name: target / "bin" / name for name in names}
    return found if found and all(p.is_file() for p in found.values()) else None


def stamped_ldflags(extldflags: str, info_package: str, version: str, commit: str) -> str:
    """The `-ldflags` NVIDIA's Makefiles use for their Go commands: stripped, `extldflags` for the C linker,
    ``<info_package>.version`` and (when known) ``.gitCommit`` stamped."""
    stamp = f"-X {info_package}.version={version}"
    if commit:
        stamp += f" -X {info_package}.gitCommit={commit}"
    return f"-s -w '-extldflags={extldflags}' {stamp}"


def build_into(
    target: Path, build: Callable[[Path], None], label: str, progress: Progress, into: Path | None = None
) -> float:
    """Run `build` on a fresh temporary directory next to `target`, then rename it to `target` (replacing an
    incomplete earlier build); returns the seconds it took, also said as "<label>: built in ..s into <into>"."""
    started = time.monotonic()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".build-{target.name}-"))
    try:
        build(tmp)
        tmp.chmod(0o755)
        if target.exists():  # an incomplete earlier build (the caller's cache check found it wanting)
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    seconds = time.monotonic() - started
    progress(f"{label}: built in {seconds:.1f}s into {into or target}")
    return seconds


def ensure_built(
    target: Path,
    lock: Path,
    cached: Callable[[], T | None],
    build: Callable[[Path], None],
    label: str,
    progress: Progress,
    cgo: str = "",
    into: Path | None = None,
) -> tuple[T, float | None]:
    """What `cached` finds, built first (:func:`build_into`) when it finds nothing, all under the file lock
    `lock`. Returns (found, build seconds or None when it was cached)."""
    with locked(lock):
        found = cached()
        if found is not None:
            return found, None
        require_go(cgo)
        seconds = build_into(target, build, label, progress, into)
        found = cached()
        if found is None:
            raise PrerequisiteError(f"{label}: the build left no complete result in {target}")
        return found, seconds


def main_for_versions(argv: list[str] | None, default: str, build: Callable[[str, Progress], str]) -> int:
    """A lab build's command line (``python -m <module> [VERSION...]``): `build` each version named, or `default`,
    saying what it returns; 1 with the reason when a prerequisite is missing."""
    import sys

    from gpuready.lab.hosts import progress

    versions = (sys.argv[1:] if argv is None else argv) or [default]
    try:
        for version in versions:
            progress(build(version, progress))
    except PrerequisiteError as exc:
        print(f"gpuready: {exc}", file=sys.stderr)
        return 1
    return 0
