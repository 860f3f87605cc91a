"""The lab's mock NVIDIA user-space libraries and tools, built from this Go module into the lab cache once per source.

Each library is a cgo c-shared build of one directory of the ``gpuready.lab/silicon`` module (``nvml`` ->
``libnvidia-ml.so.1``, ``cuda`` -> ``libcuda.so.1``), answering from the emulated machine (package ``machine``).
``tools`` is a static executable (no cgo), ``nvidia-emu-tools``: the NVIDIA tools that must run in images without
Python (``nvidia-cuda-mps-control``, and ``nvidia-smi -c`` in NVIDIA's MPS control daemon image), must change the
driver state as the mock NVML does (``nvidia-smi -c``, ``-mig``, ``-r`` and ``mig``: package ``machine``) or must print
exactly the mock libcuda's figures (``nvbandwidth``: packages ``cudadev`` and ``machine`` hold both).
NVIDIA's header ``nvml.h`` is not committed: it comes from the go-nvml module (NVIDIA's royalty-free header
licence) through the Go module proxy, put on the include path with ``CGO_CFLAGS``.

Each library lands in ``<cache>/silicon-<hash>/<file>``, the hash covering that library's directory, the
shared sources (``machine``, go.mod) and the Go version, so changing the CUDA mock does not rebuild NVML. Built
in a temporary directory and renamed into place under a file lock, as ``gpuready.lab.cluster.binaries`` builds
the control plane (both through gpuready.lab.gobuild). Nothing prebuilt is committed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gpuready.lab.gobuild import (
    PrerequisiteError,
    Progress,
    build_into,
    download_module,
    go_build,
    locked,
    require_go,
)
from gpuready.lab.state import cache_dir

SILICON = Path(__file__).resolve().parent
GO_NVML = "github.com/NVIDIA/go-nvml"
GO_NVML_VERSION = "v0.13.4-1"  # the nvml.h the libraries are compiled against
SOURCE_SUFFIXES = (".go", ".c", ".h", ".mod", ".sum")


@dataclass(frozen=True)
class Library:
    """One c-shared library (or, ``shared=False``, a static executable): the Go package directory (relative to
    this module), its file name, and whether it compiles against nvml.h (fetched through the Go module proxy, so
    the others build offline)."""

    directory: str
    filename: str
    nvml_header: bool = False
    shared: bool = True


# Which directory builds which library; one not present in the checkout is skipped.
LIBRARIES: dict[str, Library] = {
    "nvml": Library("nvml", "libnvidia-ml.so.1", nvml_header=True),
    "cuda": Library("cuda", "libcuda.so.1"),
    "tools": Library("tools", "nvidia-emu-tools", shared=False),
}


def available() -> dict[str, Library]:
    """The libraries whose source directory exists here."""
    return {name: lib for name, lib in LIBRARIES.items() if (SILICON / lib.directory).is_dir()}


def go_version() -> str | None:
    """`go env GOVERSION`, or None without Go: part of each cache key, since Go versions change the binary."""
    go = shutil.which("go")
    if not go:
        return None
    result = subprocess.run(
        [go, "env", "GOVERSION"], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    return result.stdout.strip() or None


def _sources(name: str) -> list[Path]:
    """Files that make library ``name``: its directory and everything shared, not the other libraries' ones."""
    others = {SILICON / lib.directory for other, lib in LIBRARIES.items() if other != name}
    files = []
    for path in sorted(SILICON.rglob("*")):
        if not path.is_file() or not path.name.endswith(SOURCE_SUFFIXES) or path.name.endswith("_test.go"):
            continue
        if any(parent in others for parent in path.parents):
            continue
        files.append(path)
    return files


def source_hash(name: str, go: str) -> str:
    """Key of library ``name``'s cache directory: its sources, the header version and the Go version."""
    digest = hashlib.sha256(f"{name}\0{LIBRARIES[name].filename}\0{go}\0{GO_NVML_VERSION}\0".encode())
    for path in _sources(name):
        digest.update(str(path.relative_to(SILICON)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def library_cache(name: str, go: str, cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / f"silicon-{source_hash(name, go)}"


def _nvml_include(env: dict[str, str], work: Path) -> Path:
    """The directory holding go-nvml's nvml.h, downloaded into the Go module cache if needed."""
    include = download_module(GO_NVML, GO_NVML_VERSION, work, env).dir / "pkg" / "nvml"
    if not (include / "nvml.h").is_file():
        raise PrerequisiteError(f"{GO_NVML}@{GO_NVML_VERSION} has no pkg/nvml/nvml.h in {include}")
    return include


def _build_one(name: str, lib: Library, go: str, cache: Path, progress: Progress) -> Path:
    target = library_cache(name, go, cache)

    def build(tmp: Path) -> None:
        env = {**os.environ, "CGO_ENABLED": "1" if lib.shared else "0", "GOFLAGS": "-buildvcs=false"}
        if lib.nvml_header:
            env["CGO_CFLAGS"] = f"-O2 -g -I{_nvml_include(env, tmp)}"
        if not lib.shared:  # static: runs in any image, as NVIDIA's tools run from the driver's CDI mounts
            progress(f"mock {lib.filename}: go build ./{lib.directory}")
            go_build(
                ["-o", str(tmp / lib.filename), f"./{lib.directory}"],
                SILICON,
                f"go build {name}",
                env,
                "-s -w",
            )
            return
        progress(f"mock {lib.filename}: go build -buildmode=c-shared ./{lib.directory}")
        args = ["-buildmode=c-shared", "-o", str(tmp / lib.filename), f"./{lib.directory}"]
        go_build(args, SILICON, f"go build {name}", env, f"-s -w -extldflags=-Wl,-soname,{lib.filename}")
        for header in tmp.glob("*.h"):  # cgo's export header: not part of the installed library
            header.unlink()

    build_into(target, build, f"mock {lib.filename}", progress)
    return target / lib.filename


def ensure_libraries(
    progress: Progress, cache: Path | None = None, names: Iterable[str] | None = None
) -> dict[str, Path]:
    """Every available library (name -> file), or those in ``names``, built into the cache when its sources
    changed. ``names`` lets a caller that needs one library not depend on the others building."""
    base = cache or cache_dir()
    base.mkdir(parents=True, exist_ok=True)
    with locked(base / ".silicon.lock"):
        require_go(cgo="cgo builds the mock libraries")
        go = go_version()
        if go is None:
            raise PrerequisiteError("`go env GOVERSION` printed nothing")
        built = {}
        wanted = available()
        if names is not None:
            missing = set(names) - set(wanted)
            if missing:
                raise PrerequisiteError(f"no such mock library here: {', '.join(sorted(missing))}")
            wanted = {name: wanted[name] for name in names}
        for name, lib in wanted.items():
            path = library_cache(name, go, base) / lib.filename
            built[name] = path if path.is_file() else _build_one(name, lib, go, base, progress)
        return built


def static_tools(cache: Path | None = None) -> Path:
    """The static ``nvidia-emu-tools`` (tools/), built into the cache when its sources changed: what a lab host's
    driver package installs, for the emulated tools run outside one (tests, benches)."""
    return ensure_libraries(lambda _line: None, cache, names=["tools"])["tools"]
