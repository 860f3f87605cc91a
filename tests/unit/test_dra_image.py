"""NVIDIA's DRA driver built from its Go module for the lab (gpuready.lab.dra_image): the Makefile's link and version
flags, the image under the name the ``dra_driver_image`` knob gives, the cache layout (gpuready.lab.gobuild).

The pure parts run everywhere; the build (cached in the lab cache: minutes cold on 2 cores, seconds after) is
skipped where Go or gcc is missing.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gpuready.lab import dra_image, go_images
from gpuready.lab.gobuild import cgo_problem
from gpuready.spec import knobs


def test_ldflags_are_the_makefiles() -> None:
    flags = dra_image.ldflags("0.4.1", "764900e7")
    assert flags == (
        "-s -w -X sigs.k8s.io/dra-driver-nvidia-gpu/internal/info.version=v0.4.1"
        " -X sigs.k8s.io/dra-driver-nvidia-gpu/internal/info.gitCommit=764900e7"
    )
    assert "gitCommit" not in dra_image.ldflags("0.4.1", "")
    assert dra_image.CGO_LDFLAGS_ALLOW == "-Wl,--unresolved-symbols=ignore-in-object-files"


def test_the_image_is_the_one_the_dra_driver_image_knob_names() -> None:
    assert dra_image.image_name() == knobs.KNOBS["dra_driver_image"].default
    assert dra_image.COMMANDS == ("gpu-kubelet-plugin",)  # what gpuready's DRA manifests start


def test_cache_paths(tmp_path: Path) -> None:
    assert dra_image.driver_cache("0.4.1", tmp_path) == tmp_path / "dra-driver-nvidia-gpu-0.4.1"
    assert dra_image.cached_driver("0.4.1", tmp_path) is None
    bin_dir = tmp_path / "dra-driver-nvidia-gpu-0.4.1" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir.parent / "commands.json").write_text(json.dumps(list(dra_image.COMMANDS)))
    assert dra_image.cached_driver("0.4.1", tmp_path) is None  # the binary missing: incomplete
    (bin_dir / "gpu-kubelet-plugin").write_text("")
    assert dra_image.cached_driver("0.4.1", tmp_path) == {
        "gpu-kubelet-plugin": bin_dir / "gpu-kubelet-plugin"
    }


NO_CGO = cgo_problem()


@pytest.mark.skipif(NO_CGO is not None, reason=f"building the DRA driver needs Go and gcc: {NO_CGO}")
def test_the_built_plugin_reports_its_version_and_needs_only_glibc() -> None:
    built = dra_image.ensure_driver()
    assert dra_image.cached_driver() == built
    out = subprocess.run(
        [str(built["gpu-kubelet-plugin"]), "--version"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert f"v{dra_image.DEFAULT_VERSION}" in out.stdout, out.stdout
    libraries = go_images.shared_libraries(list(built.values()))
    assert any(p.endswith("libc.so.6") for p in libraries), libraries
    # NVML is dlopened from the driver root at run time, never linked
    assert not [p for p in libraries if "nvidia" in p], libraries
