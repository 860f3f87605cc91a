"""NVIDIA's device plugin built from its Go module for the lab (gpuready.lab.nvidia_addons): upstream's link and
version flags, the cache layout shared with the container toolkit's (gpuready.lab.gobuild), and the OCI image the
lab's real-kubelet hosts import under the upstream name.

The pure parts run everywhere; the build (cached in the lab cache: minutes cold on 2 cores, instant after) is
skipped where Go or gcc is missing.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from gpuready.lab import go_images, nvidia_addons, nvidia_tools, realnode
from gpuready.lab.gobuild import cgo_problem


def test_ldflags_are_upstreams_makefile() -> None:
    flags = nvidia_addons.ldflags("0.19.3", "570e776d")
    info = "github.com/NVIDIA/k8s-device-plugin/internal/info"
    # versions.mk's VERSION keeps its "v"; the Makefile stamps version and gitCommit into internal/info
    assert f"-X {info}.version=v0.19.3" in flags and f"-X {info}.gitCommit=570e776d" in flags
    assert flags.startswith(f"-s -w '-extldflags={nvidia_addons.EXTLDFLAGS}' ")
    assert nvidia_addons.EXTLDFLAGS == "-Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files"
    assert "-z,lazy" not in flags  # the toolkit's Makefile adds it, the device plugin's does not
    assert "gitCommit" not in nvidia_addons.ldflags("0.19.3", "")
    assert nvidia_addons.EXTLDFLAGS in nvidia_tools.EXTLDFLAGS


def test_cache_paths_and_image_name(tmp_path: Path) -> None:
    assert nvidia_addons.plugin_cache("0.19.3", tmp_path) == tmp_path / "k8s-device-plugin-0.19.3"
    assert nvidia_addons.cached_plugin("0.19.3", tmp_path) is None
    bin_dir = tmp_path / "k8s-device-plugin-0.19.3" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir.parent / "commands.json").write_text(json.dumps(list(nvidia_addons.COMMANDS)))
    for name in nvidia_addons.COMMANDS[:-1]:
        (bin_dir / name).write_text("")
    assert nvidia_addons.cached_plugin("0.19.3", tmp_path) is None  # one command missing: incomplete
    (bin_dir / nvidia_addons.COMMANDS[-1]).write_text("")
    assert nvidia_addons.cached_plugin("0.19.3", tmp_path) == {n: bin_dir / n for n in nvidia_addons.COMMANDS}
    assert nvidia_addons.image_name() == "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"
    assert nvidia_addons.image_name("0.18.2").startswith(nvidia_addons.IMAGE_REPOSITORY + ":")


def _layer_names(archive: bytes) -> tuple[dict[str, object], set[str]]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as outer:
        index = json.loads(outer.extractfile("index.json").read())  # type: ignore[union-attr]
        manifest_digest = index["manifests"][0]["digest"].split(":")[1]
        manifest = json.loads(outer.extractfile(f"blobs/sha256/{manifest_digest}").read())  # type: ignore[union-attr]
        layer = outer.extractfile(f"blobs/sha256/{manifest['layers'][0]['digest'].split(':')[1]}").read()  # type: ignore[union-attr]
    with tarfile.open(fileobj=io.BytesIO(layer)) as inner:
        return index["manifests"][0]["annotations"], set(inner.getnames())


def test_image_layer_holds_the_commands_their_glibc_and_a_shell(tmp_path: Path) -> None:
    sh = Path("/bin/sh").resolve()
    binaries = {f"usr/bin/{name}": sh for name in nvidia_addons.COMMANDS}
    libraries = go_images.shared_libraries([sh])
    assert any(p.endswith("libc.so.6") for p in libraries), libraries
    busybox = (
        tmp_path / "busybox"
    )  # answers --list as Debian's busybox-static does: its applets, one per line
    busybox.write_text("#!/bin/sh\nprintf 'mount\\ntail\\nsh\\n'\n")
    busybox.chmod(0o755)
    layer = go_images.image_layer(binaries, libraries, busybox)
    archive = realnode.oci_archive(nvidia_addons.image_name(), [layer], nvidia_addons.IMAGE_CONFIG)
    annotations, names = _layer_names(archive)
    assert annotations["io.containerd.image.name"] == "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"
    assert {f"usr/bin/{c}" for c in nvidia_addons.COMMANDS} <= names
    assert {p.lstrip("/") for p in libraries} <= names and {"busybox/sh", "bin/sh"} <= names
    # the distroless -dev bases' applets on the PATH: NVIDIA's MPS control daemon runs mount and tail
    assert {"busybox/busybox", "busybox/mount", "busybox/tail"} <= names


NO_CGO = cgo_problem()


@pytest.mark.skipif(NO_CGO is not None, reason=f"building the device plugin needs Go and gcc: {NO_CGO}")
def test_the_built_plugin_reports_its_version_and_needs_only_glibc() -> None:
    built = nvidia_addons.ensure_plugin()
    assert set(built) == set(nvidia_addons.COMMANDS)
    assert nvidia_addons.cached_plugin() == built
    out = subprocess.run(
        [str(built["nvidia-device-plugin"]), "--version"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert f"v{nvidia_addons.DEFAULT_VERSION}" in out.stdout, out.stdout
    libraries = go_images.shared_libraries(list(built.values()))
    # NVML is dlopened at run time, never linked
    assert not [p for p in libraries if "nvidia" in p], libraries
