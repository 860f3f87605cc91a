"""node-feature-discovery's real nfd-master and nfd-worker, built from the Go module into the lab's image of it.

gpuready's add-ons (:mod:`gpuready.deploy.nfd_addons`) start ``nfd-master`` and ``nfd-worker`` from the image the
``nfd_image`` knob names, ``registry.k8s.io/nfd/node-feature-discovery:v0.17.3``. On a real-kubelet lab host that
image is this module's: NFD's own commands, so the Node labels GFD's features turn into are written by the real
nfd-master (issue #29; DESIGN.md, "The lab").

How upstream builds it, read from the module (v0.17.3's ``Makefile`` and ``Dockerfile``):

* ``make install`` in the builder: ``go install -tags osusergo,netgo -ldflags "-s -w -extldflags=-static -X
  .../pkg/version.version=$(VERSION) -X .../pkg/utils/hostpath.pathPrefix=$(HOSTMOUNT_PREFIX)" ./cmd/<cmd>``;
  the image build passes ``HOSTMOUNT_PREFIX=/host-`` (``CONTAINER_HOSTMOUNT_PREFIX``), where the worker's
  manifests mount the host's ``/sys``, ``/usr/lib``, ``/etc/os-release``... With ``netgo``/``osusergo`` no package
  of nfd-master or nfd-worker uses cgo (``go list -deps`` finds no ``CgoFiles``), so ``CGO_ENABLED=0`` gives the
  same static binary without a C compiler.
* ``sigs.k8s.io/node-feature-discovery/api/nfd`` is a nested module the main module ``replace``s with ``./api/nfd``;
  the proxy's zip of the main module leaves it out (a nested module never is in it). It is downloaded at the same
  version (``api/nfd/v0.17.3``, the same commit) and put back at ``api/nfd`` of a writable copy of the main
  module, which is then the tree the Dockerfile builds (``COPY . /go/node-feature-discovery``).
* The image (``minimal``, what the plain tag names): ``FROM scratch``, the commands in ``/usr/bin``,
  ``nfd-worker.conf.example`` as ``/etc/kubernetes/node-feature-discovery/nfd-worker.conf``, ``USER 65534:65534``,
  ``GRPC_GO_LOG_SEVERITY_LEVEL=INFO``. The lab builds only the two commands gpuready starts (upstream's image also
  carries nfd-gc, nfd-topology-updater, kubectl-nfd and nfd).

Cached through :func:`gpuready.lab.gobuild.ensure_built` at ``<cache>/node-feature-discovery-<version>/`` with the
archive beside the binaries; ``python -m gpuready.lab.nfd_image [VERSION]``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from gpuready.lab import realnode
from gpuready.lab.gobuild import (
    Progress,
    cached_commands,
    download_module,
    ensure_built,
    go_build,
    main_for_versions,
)
from gpuready.lab.state import cache_dir, locked

MODULE = "sigs.k8s.io/node-feature-discovery"
API_MODULE = f"{MODULE}/api/nfd"  # a nested module, `replace`d by ./api/nfd in the main go.mod
NAME = "node-feature-discovery"
DEFAULT_VERSION = "0.17.3"  # the nfd_image knob's tag (gpuready.deploy.nfd_addons renders v0.17.3)
IMAGE_REPOSITORY = "registry.k8s.io/nfd/node-feature-discovery"  # the Makefile's IMAGE_REGISTRY/IMAGE_NAME
COMMANDS = ("nfd-master", "nfd-worker")  # what gpuready's manifests start
TAGS = "osusergo,netgo"
HOSTMOUNT_PREFIX = "/host-"  # the Makefile's CONTAINER_HOSTMOUNT_PREFIX, what the image build passes
WORKER_CONF = "etc/kubernetes/node-feature-discovery/nfd-worker.conf"
WORKER_CONF_SOURCE = "deployment/components/worker-config/nfd-worker.conf.example"
# the Dockerfile's minimal stage; PATH as a scratch image built by docker gets it (the manifests name bare commands)
IMAGE_CONFIG = {
    "User": "65534:65534",
    "Env": [
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "GRPC_GO_LOG_SEVERITY_LEVEL=INFO",
    ],
}


def image_name(version: str = DEFAULT_VERSION) -> str:
    """``registry.k8s.io/nfd/node-feature-discovery:v<version>``: the nfd_image knob's default for v0.17.3."""
    return f"{IMAGE_REPOSITORY}:v{version}"


def nfd_cache(version: str, cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / f"{NAME}-{version}"


def cached_nfd(version: str = DEFAULT_VERSION, cache: Path | None = None) -> dict[str, Path] | None:
    """The built commands of `version` by name, or None when the cache has no complete build."""
    return cached_commands(nfd_cache(version, cache))


def ldflags(version: str) -> str:
    """The Makefile's BUILD_FLAGS ldflags for the image: static, stripped, ``v<version>``, host mounts at /host-."""
    return (
        f"-s -w -extldflags=-static -X {MODULE}/pkg/version.version=v{version} "
        f"-X {MODULE}/pkg/utils/hostpath.pathPrefix={HOSTMOUNT_PREFIX}"
    )


def source_tree(main: Path, api: Path, into: Path) -> Path:
    """A writable copy of the main module's directory `main` with the nested API module `api` at ``api/nfd``
    (what a checkout of the tag holds)."""
    shutil.copytree(main, into)
    target = into / "api" / "nfd"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(api, target)
    for path in [into, *into.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
    return into


def ensure_nfd(
    version: str = DEFAULT_VERSION, progress: Progress = lambda _m: None, cache: Path | None = None
) -> dict[str, Path]:
    """NFD's nfd-master and nfd-worker of `version` by name, built once into the cache."""
    target = nfd_cache(version, cache)
    label = f"node-feature-discovery v{version}"

    def build(tmp: Path) -> None:
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": ""}
        progress(f"{label}: resolving {MODULE} and {API_MODULE} through the Go module proxy")
        main = download_module(MODULE, f"v{version}", tmp, env)
        api = download_module(API_MODULE, f"v{version}", tmp, env)
        source = source_tree(main.dir, api.dir, tmp / "src")
        progress(f"{label}: compiling {', '.join(COMMANDS)} (minutes cold)")
        (tmp / "bin").mkdir()
        args = ["-tags", TAGS, "-o", f"{tmp / 'bin'}/", *(f"./cmd/{c}" for c in COMMANDS)]
        go_build(args, source, f"go build of {label}", env, ldflags(version))
        shutil.copyfile(source / WORKER_CONF_SOURCE, tmp / "nfd-worker.conf")
        shutil.rmtree(source)
        (tmp / "commands.json").write_text(json.dumps(list(COMMANDS)) + "\n")

    found, _ = ensure_built(
        target,
        target.parent / f".{NAME}-{version}.lock",
        lambda: cached_nfd(version, cache),
        build,
        label,
        progress,
    )
    return found


def image_layer(binaries: dict[str, Path], worker_conf: Path) -> bytes:
    """The minimal image's one layer: the commands in /usr/bin and the example worker config (scratch: no shell,
    no libraries; the binaries are static)."""
    files = {f"usr/bin/{name}": (path.read_bytes(), 0o755) for name, path in binaries.items()}
    files[WORKER_CONF] = (worker_conf.read_bytes(), 0o644)
    return realnode.layer_tar(files)


def image_archive(version: str = DEFAULT_VERSION, progress: Progress = lambda _m: None) -> tuple[str, bytes]:
    """The OCI archive of ``registry.k8s.io/nfd/node-feature-discovery:v<version>`` (file name, bytes) for the lab
    hosts' containerd, written once beside the cached binaries."""
    binaries = ensure_nfd(version, progress)
    target = nfd_cache(version) / f"{NAME}_v{version}.oci.tar"
    with locked(target.parent / f".{target.name}.lock"):
        if not target.is_file():
            layer = image_layer(binaries, nfd_cache(version) / "nfd-worker.conf")
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(realnode.oci_archive(image_name(version), [layer], IMAGE_CONFIG))
            tmp.rename(target)
            progress(
                f"node-feature-discovery v{version}: image {image_name(version)}, {target.stat().st_size} bytes"
            )
    return target.name, target.read_bytes()


def main(argv: list[str] | None = None) -> int:
    """`python -m gpuready.lab.nfd_image [VERSION...]`: build nfd-master, nfd-worker and the lab's image of them."""

    def build(version: str, progress: Progress) -> str:
        name, data = image_archive(version, progress)
        return f"{image_name(version)}: {nfd_cache(version) / name}, {len(data)} bytes"

    return main_for_versions(argv, DEFAULT_VERSION, build)


if __name__ == "__main__":
    raise SystemExit(main())
