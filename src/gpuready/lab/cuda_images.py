"""The images the conformance suite's workloads and metrics layers start, for real-kubelet hosts (issues #28/#29).

The lab has no registry: like :mod:`gpuready.lab.suite_image` it builds the images itself, under the knobs' default
names, on the same slim trixie base layer (:func:`gpuready.lab.suite_image.base_layer`), and every real-kubelet
host imports them at ``lab up`` (:func:`gpuready.lab.realhost.images`). They are one OCI archive,
``gpuready-lab-cuda-images.oci.tar``, so the 176 MB base layer is written into each host once for all four:

* ``nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04`` (knob ``vectoradd_image``): NVIDIA's sample is
  a compiled CUDA program; here ``/cuda-samples/vectorAdd`` (the image's CMD, as upstream) runs gpuready's own
  driver-API vectorAdd (:func:`gpuready.conformance.cuda.vector_add.main`) over the ``libcuda.so.1`` the nvidia
  runtime / CDI injects: the lab's mock, which really adds the vectors. It prints ``Test PASSED`` per device, what
  the suite's check looks for, and exits 1 (``Test FAILED`` or ``CUDA does not start: ...``) where CUDA fails.
  Its layer is only the modules that import pulls in (gpuready.conformance.cuda and gpuready.nvidia.cuda: a few kB,
  stdlib only).
* ``nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04`` (knob ``cuda_base_image``): the base layer and
  ``/opt/nvidia/nvidia_entrypoint.sh`` (ENTRYPOINT; CMD ``/bin/bash``). Its users run ``nvidia-smi``: the host's,
  injected by the runtime (a Python wrapper over the host's ``/usr/lib/nvidia-emu``, so the image has python3).
* ``nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04`` (knob ``dcgm_exporter_image``): the exporter needs DCGM's
  ``libdcgm``, which the lab neither builds nor mocks, so it stays emulated: :mod:`gpuready.lab.dcgm_exporter` as ``/usr/bin/dcgm-exporter`` (ENTRYPOINT),
  its renderer over the machine files mounted into the container, pod mapping from the kubelet's
  pod-resources API through grpcio. Layers: base, a pip layer (grpcio, the third-party modules the exporter's
  import closure needs at this checkout's versions, and the ``lab`` extra's distributions, which
  ``gpuready.lab``'s import guard looks for; cached by the requirement list, pip runs once) and the exporter's
  gpuready modules.
* ``docker.io/library/debian:trixie-slim`` (knob ``probe_image``), the probe image of the host and gpu layers, as
  :func:`gpuready.lab.suite_image.probe_archive` makes it: free here, as it is the base layer alone.

**Source, not a wheel**: the gpuready layers are the modules of the gpuready that builds the lab (this checkout),
found by importing each entry module in a fresh interpreter and keeping the ``gpuready.*`` modules it loaded, so
no ``pip wheel`` runs at ``lab up`` (the suite's image, which needs the whole package and its dependencies, still
comes from :func:`gpuready.lab.suite_image.suite_archive` of a wheel). Cached in the lab cache by the hash of its
layers' inputs (one archive kept), so a lab up with unchanged sources only reads it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import gpuready
from gpuready.extras import EXTRAS
from gpuready.lab import realnode, suite_image
from gpuready.lab.gobuild import Progress
from gpuready.lab.state import cache_dir, locked

VECTORADD_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"  # knob vectoradd_image
CUDA_BASE_IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"  # knob cuda_base_image
DCGM_EXPORTER_IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04"  # knob dcgm_exporter_image
ARCHIVE = "gpuready-lab-cuda-images.oci.tar"
VECTORADD_MODULE = "gpuready.conformance.cuda.vector_add"
EXPORTER_MODULE = "gpuready.lab.dcgm_exporter.server"
GRPC = "grpcio"  # the exporter's pod-resources client (imported only in the image)
PATH = "PATH=/usr/local/nvidia/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

VECTORADD_SCRIPT = """#!/usr/bin/python3
# gpuready lab: NVIDIA's vectorAdd sample is a compiled CUDA program; this runs gpuready's own driver-API
# vectorAdd (gpuready.conformance.cuda.vector_add) over the libcuda.so.1 the container runtime injected.
import sys

from gpuready.conformance.cuda.vector_add import main

sys.exit(main())
"""
EXPORTER_SCRIPT = """#!/usr/bin/python3
# gpuready lab: an emulated dcgm-exporter (DCGM is proprietary), gpuready.lab.dcgm_exporter
import sys

from gpuready.lab.dcgm_exporter.server import main

sys.exit(main())
"""
ENTRYPOINT_SCRIPT = """#!/bin/bash
# gpuready lab: the CUDA base image's entrypoint. NVIDIA's prints the CUDA banner, then runs its arguments.
echo
echo "=========="
echo "== CUDA =="
echo "=========="
echo
echo "CUDA Version ${CUDA_VERSION:-12.4.1} (gpuready lab image: the host's driver and nvidia-smi, injected)"
echo
exec "$@"
"""


def closure(module: str) -> tuple[dict[str, Path], set[str]]:
    """What importing `module` loads, in a fresh interpreter on this gpuready: (gpuready module file path inside
    the package -> file, third-party top-level module names)."""
    root = Path(gpuready.__file__).resolve().parent
    code = (
        "import json, sys\n"
        f"import {module}\n"
        "print(json.dumps({n: getattr(m, '__file__', None) for n, m in sys.modules.items()}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL,
        env={"PYTHONPATH": str(root.parent), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    loaded: dict[str, str | None] = json.loads(result.stdout)
    files: dict[str, Path] = {}
    others: set[str] = set()
    for name, file in loaded.items():
        top = name.split(".", 1)[0]
        if top == "gpuready" and file:
            path = Path(file).resolve()
            files[str(path.relative_to(root.parent))] = path
        elif (
            top not in sys.stdlib_module_names
            and not top.startswith("_")
            and file
            and "site-packages" in file
        ):
            others.add(top)
    return files, others


def _pinned(distribution: str) -> str:
    try:
        return f"{distribution}=={importlib.metadata.version(distribution)}"
    except importlib.metadata.PackageNotFoundError:
        return distribution


def exporter_requirements(third_party: set[str]) -> list[str]:
    """pip requirements of the exporter's image: grpcio, the distributions of the third-party modules it
    imports, and the lab extra's (``gpuready.lab`` checks they are importable), at this checkout's versions."""
    by_module = importlib.metadata.packages_distributions()
    wanted = {d for m in third_party for d in by_module.get(m, [m])} | set(EXTRAS["lab"].values())
    return sorted({GRPC, *(_pinned(d) for d in wanted)})


def _module_layer(files: dict[str, Path], python: str, scripts: dict[str, str]) -> bytes:
    site = f"usr/local/lib/python{python}/dist-packages"
    content = {f"{site}/{rel}": (path.read_bytes(), 0o644) for rel, path in sorted(files.items())}
    content.update({path: (text.encode(), 0o755) for path, text in scripts.items()})
    return realnode.layer_tar(content)


def _env(*extra: str) -> list[str]:
    return [PATH, *extra]


def image_configs() -> dict[str, dict[str, object]]:
    """Each image's OCI config (the parts the upstream image has that a pod sees)."""
    nvidia = ("NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility")
    return {
        VECTORADD_IMAGE: {
            "Cmd": ["/cuda-samples/vectorAdd"],
            "Env": _env("CUDA_VERSION=12.5.0", *nvidia, "PYTHONDONTWRITEBYTECODE=1"),
            "WorkingDir": "/cuda-samples",
        },
        CUDA_BASE_IMAGE: {
            "Entrypoint": ["/opt/nvidia/nvidia_entrypoint.sh"],
            "Cmd": ["/bin/bash"],
            "Env": _env("CUDA_VERSION=12.4.1", *nvidia),
        },
        DCGM_EXPORTER_IMAGE: {
            "Entrypoint": ["/usr/bin/dcgm-exporter"],
            "Env": _env(
                "NVIDIA_VISIBLE_DEVICES=all",
                "NVIDIA_DRIVER_CAPABILITIES=compute,utility,compat32",
                "PYTHONDONTWRITEBYTECODE=1",
                f"GPUREADY_LAB_IMAGE={DCGM_EXPORTER_IMAGE}",
            ),
            "ExposedPorts": {"9400/tcp": {}},
        },
        suite_image.PROBE_IMAGE: {"Cmd": ["bash"], "Env": _env()},
    }


def archive(progress: Progress = lambda _m: None) -> tuple[str, bytes]:
    """The archive of the four images: (file name, OCI archive), cached by its inputs."""
    base, python = suite_image.base_layer(progress)
    vector_files, vector_others = closure(VECTORADD_MODULE)
    if vector_others:
        raise RuntimeError(
            f"{VECTORADD_MODULE} imports more than the standard library: {sorted(vector_others)}"
        )
    exporter_files, exporter_others = closure(EXPORTER_MODULE)
    requirements = exporter_requirements(exporter_others)
    vector_layer = _module_layer(vector_files, python, {"cuda-samples/vectorAdd": VECTORADD_SCRIPT})
    exporter_layer = _module_layer(exporter_files, python, {"usr/bin/dcgm-exporter": EXPORTER_SCRIPT})
    entry_layer = realnode.layer_tar({"opt/nvidia/nvidia_entrypoint.sh": (ENTRYPOINT_SCRIPT.encode(), 0o755)})
    configs = image_configs()
    h = hashlib.sha256(
        json.dumps([suite_image.RELEASE, python, requirements, configs], sort_keys=True).encode()
    )
    h.update(str(len(base)).encode())
    for layer in (vector_layer, exporter_layer, entry_layer):
        h.update(hashlib.sha256(layer).digest())
    target = cache_dir() / f"cuda-images-{h.hexdigest()[:16]}.oci.tar"
    with locked(cache_dir() / ".cuda-images.lock"):  # one lock, as one archive is kept
        if not target.is_file():
            deps = suite_image.pip_layer(requirements, python, progress, "the lab dcgm-exporter's packages",
                                         prefix="dcgm-exporter-deps-layer")  # fmt: skip
            layers = {
                VECTORADD_IMAGE: [base, vector_layer],
                CUDA_BASE_IMAGE: [base, entry_layer],
                DCGM_EXPORTER_IMAGE: [base, deps, exporter_layer],
                suite_image.PROBE_IMAGE: [base],
            }
            data = realnode.oci_images_archive([(name, layers[name], configs[name]) for name in layers])
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.rename(target)
            progress(
                f"CUDA images: {target.stat().st_size} bytes (layers: base {len(base)}, vectorAdd "
                f"{len(vector_layer)}, entrypoint {len(entry_layer)}, exporter packages {len(deps)}, "
                f"exporter {len(exporter_layer)})"
            )
        for old in cache_dir().glob("cuda-images-*.oci.tar"):
            if old != target:
                old.unlink(missing_ok=True)
    return ARCHIVE, target.read_bytes()


if __name__ == "__main__":
    name, data = archive(lambda m: print(m, file=sys.stderr, flush=True))
    print(f"{name}: {len(data)} bytes")
