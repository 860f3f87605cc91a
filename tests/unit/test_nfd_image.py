"""node-feature-discovery built from its Go module for the lab (gpuready.lab.nfd_image): upstream's Makefile flags,
the nested API module put back, the cache layout (gpuready.lab.gobuild) and the minimal image under the name the
``nfd_image`` knob gives.

The pure parts run everywhere; the build (cached: minutes cold on 2 cores, instant after) is skipped without Go.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from gpuready.lab import nfd_image, realnode
from gpuready.lab.gobuild import go_problem
from gpuready.spec import knobs


def test_ldflags_and_tags_are_the_makefiles_for_the_image() -> None:
    flags = nfd_image.ldflags("0.17.3")
    assert flags.startswith("-s -w -extldflags=-static ")
    assert "-X sigs.k8s.io/node-feature-discovery/pkg/version.version=v0.17.3" in flags
    # CONTAINER_HOSTMOUNT_PREFIX: the worker reads the host's /sys, /usr/lib... where the manifests mount them
    assert "-X sigs.k8s.io/node-feature-discovery/pkg/utils/hostpath.pathPrefix=/host-" in flags
    assert nfd_image.TAGS == "osusergo,netgo"


def test_the_image_is_the_one_the_nfd_image_knob_names() -> None:
    assert nfd_image.image_name() == knobs.KNOBS["nfd_image"].default
    assert nfd_image.image_name() == "registry.k8s.io/nfd/node-feature-discovery:v0.17.3"


def test_cache_paths(tmp_path: Path) -> None:
    assert nfd_image.nfd_cache("0.17.3", tmp_path) == tmp_path / "node-feature-discovery-0.17.3"
    assert nfd_image.cached_nfd("0.17.3", tmp_path) is None
    bin_dir = tmp_path / "node-feature-discovery-0.17.3" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir.parent / "commands.json").write_text(json.dumps(list(nfd_image.COMMANDS)))
    (bin_dir / "nfd-master").write_text("")
    assert nfd_image.cached_nfd("0.17.3", tmp_path) is None  # nfd-worker missing: incomplete
    (bin_dir / "nfd-worker").write_text("")
    assert nfd_image.cached_nfd("0.17.3", tmp_path) == {n: bin_dir / n for n in nfd_image.COMMANDS}


def test_source_tree_puts_the_nested_api_module_back_writable(tmp_path: Path) -> None:
    main, api = tmp_path / "main", tmp_path / "api"
    (main / "cmd" / "nfd-master").mkdir(parents=True)
    (main / "go.mod").write_text("module sigs.k8s.io/node-feature-discovery\n")
    (main / "api" / "generated").mkdir(parents=True)
    (api / "v1alpha1").mkdir(parents=True)
    (api / "go.mod").write_text("module sigs.k8s.io/node-feature-discovery/api/nfd\n")
    for d in (main, main / "cmd", main / "cmd" / "nfd-master", main / "api", api, api / "v1alpha1"):
        d.chmod(0o555)  # the Go module cache's directories are read-only
    try:
        tree = nfd_image.source_tree(main, api, tmp_path / "src")
    finally:
        for d in (main, main / "cmd", main / "cmd" / "nfd-master", main / "api", api, api / "v1alpha1"):
            d.chmod(0o755)
    assert (tree / "api" / "nfd" / "go.mod").read_text().endswith("/api/nfd\n")
    assert (tree / "api" / "generated").is_dir() and (tree / "cmd" / "nfd-master").is_dir()
    (tree / "api" / "nfd" / "v1alpha1" / "x").write_text("")  # writable, as a checkout is


def test_the_image_is_upstreams_minimal_one(tmp_path: Path) -> None:
    binaries = {name: tmp_path / name for name in nfd_image.COMMANDS}
    for path in binaries.values():
        path.write_bytes(b"\x7fELF")
    conf = tmp_path / "nfd-worker.conf"
    conf.write_text("#core:\n")
    archive = realnode.oci_archive(
        nfd_image.image_name(), [nfd_image.image_layer(binaries, conf)], nfd_image.IMAGE_CONFIG
    )
    with tarfile.open(fileobj=io.BytesIO(archive)) as outer:
        index = json.loads(outer.extractfile("index.json").read())  # type: ignore[union-attr]
        digest = index["manifests"][0]["digest"].split(":")[1]
        manifest = json.loads(outer.extractfile(f"blobs/sha256/{digest}").read())  # type: ignore[union-attr]
        blob = lambda d: outer.extractfile(f"blobs/sha256/{d.split(':')[1]}").read()  # type: ignore[union-attr]  # noqa: E731
        config = json.loads(blob(manifest["config"]["digest"]))
        layer = blob(manifest["layers"][0]["digest"])
    assert index["manifests"][0]["annotations"]["io.containerd.image.name"] == nfd_image.image_name()
    assert config["config"]["User"] == "65534:65534"  # the Dockerfile's USER
    assert "GRPC_GO_LOG_SEVERITY_LEVEL=INFO" in config["config"]["Env"]
    with tarfile.open(fileobj=io.BytesIO(layer)) as inner:
        files = {m.name for m in inner.getmembers() if m.isfile()}
    # FROM scratch: the commands and the example worker config, no shell, no libraries
    assert files == {
        "usr/bin/nfd-master",
        "usr/bin/nfd-worker",
        "etc/kubernetes/node-feature-discovery/nfd-worker.conf",
    }


NO_GO = go_problem()


@pytest.mark.skipif(NO_GO is not None, reason=f"building NFD needs Go: {NO_GO}")
def test_the_built_commands_are_static_and_report_their_version() -> None:
    built = nfd_image.ensure_nfd()
    assert set(built) == set(nfd_image.COMMANDS)
    for name, path in built.items():
        out = subprocess.run([str(path), "-version"], capture_output=True, text=True, timeout=60)
        assert f"v{nfd_image.DEFAULT_VERSION}" in out.stdout + out.stderr, (name, out)
        ldd = subprocess.run(["ldd", str(path)], capture_output=True, text=True)
        assert "not a dynamic executable" in ldd.stdout + ldd.stderr, ldd  # scratch has no libc
