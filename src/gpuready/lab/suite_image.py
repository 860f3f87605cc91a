"""The conformance suite's own image and its probe image, built from the lab's Debian base root (issue #30 item 2).

``gpuready manifests`` runs the suite as a Job whose container runs ``gpuready check``; the suite's host and gpu
layers then start one probe pod per node from the knob ``probe_image`` (``docker.io/library/debian:trixie-slim``).
The lab has no registry, so it makes both images itself, as OCI archives the real-kubelet hosts' containerd imports
(:func:`import_into`), with the writer the lab's other images use (:func:`gpuready.lab.realnode.oci_archive`):

* **base layer**: the lab's cached trixie base root (:func:`gpuready.lab.hosts.ensure_base`, debootstrap minbase
  plus python3, coreutils, ca-certificates), without what a slim image leaves out (documentation, manual pages,
  locales, apt's lists and caches) and without the device nodes of ``/dev`` (the runtime makes a container's).
  Under ``docker.io/library/debian:trixie-slim`` it is the probe image: the probe script needs a POSIX shell,
  ``chroot``, ``timeout``, ``mktemp`` and ``base64``.
* **suite layers**, on top of the same base layer: the gpuready wheel's runtime dependencies, installed by pip
  (from PyPI, binary wheels only, for the base root's Python: trixie's 3.13) into
  ``/usr/local/lib/python3.X/dist-packages``, then the wheel itself unpacked there (its dist-info too: the pytest
  plugin's entry point) with ``/usr/local/bin/gpuready`` (the console script). That is the recipe a user's image
  follows (``FROM debian:trixie-slim``, ``apt-get install python3``, ``pip install gpuready``). Named
  ``docker.io/library/gpuready:<version>``, what ``gpuready manifests`` names by default (``gpuready:<version>``).

Cached in the lab cache: the base layer per base root, the dependencies layer per requirement list (pip runs once,
about 2 minutes here), the image per hash of the wheel's members (a zip's timestamps change with every build; its
files do not), so a changed gpuready costs only ``pip wheel`` and the archive.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from gpuready.lab import hosts, realnode
from gpuready.lab.gobuild import Progress
from gpuready.lab.state import LabPaths, cache_dir, locked

RELEASE = "trixie"
PROBE_IMAGE = "docker.io/library/debian:trixie-slim"  # the knob probe_image's default
SUITE_REPOSITORY = "docker.io/library/gpuready"  # containerd's name for manifests' "gpuready:<tag>"
# left out of the base layer: what Debian's slim images drop, apt's state, the build machine's device nodes
EXCLUDED = (
    "usr/share/doc/",
    "usr/share/man/",
    "usr/share/info/",
    "usr/share/locale/",
    "var/lib/apt/lists/",
    "var/cache/",
    "dev/",
    "proc/",
    "sys/",
    "run/",
    "tmp/",
)
PIP_PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_28_x86_64", "manylinux_2_34_x86_64", "linux_x86_64")


def _excluded(name: str) -> bool:
    return any(name.startswith(prefix) and name != prefix.rstrip("/") for prefix in EXCLUDED)


def _root_tar(root: Path) -> bytes:
    """A layer of the directory tree `root` (numeric owners kept, names dropped)."""

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        name = info.name.lstrip("./")
        if name and _excluded(name):
            return None
        info.uname = info.gname = ""
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for child in sorted(root.iterdir()):
            tar.add(child, arcname=child.name, filter=keep)
    return buf.getvalue()


def python_version(root: Path) -> str:
    """The base root's python3 (``3.13`` on trixie), from its standard library's directory."""
    found = sorted(
        p.name[len("python") :] for p in (root / "usr/lib").glob("python3.*") if (p / "os.py").is_file()
    )
    if not found:
        raise RuntimeError(f"{root}: no python3 standard library under usr/lib")
    return found[-1]


def base_layer(progress: Progress = lambda _m: None) -> tuple[bytes, str]:
    """The slim base layer of the lab's trixie base root, cached beside it; (layer, Python version)."""
    root, _ = hosts.ensure_base(RELEASE)
    target = cache_dir() / f"image-layer-{root.name}.tar"
    with locked(cache_dir() / f".image-layer-{root.name}.lock"):
        if not target.is_file():
            progress(f"suite image: base layer from {root.name}")
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(_root_tar(root))
            tmp.rename(target)
            progress(f"suite image: base layer {target.stat().st_size} bytes")
    return target.read_bytes(), python_version(root)


def build_wheel(source: Path, out: Path) -> Path:
    """``pip wheel`` of the checkout `source` (no dependencies) into `out`."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)],
                   check=True, stdin=subprocess.DEVNULL)  # fmt: skip
    return next(out.glob("gpuready-*.whl"))


def wheel_digest(wheel: Path) -> str:
    """The hash of the wheel's members (names and contents), not of the zip (its timestamps change per build)."""
    h = hashlib.sha256()
    with zipfile.ZipFile(wheel) as z:
        for name in sorted(z.namelist()):
            h.update(name.encode() + b"\0" + hashlib.sha256(z.read(name)).digest())
    return h.hexdigest()[:16]


CONSOLE_SCRIPT = """#!/usr/bin/python3
import sys

from gpuready.cli import main

sys.exit(main())
"""


def requirements(wheel: Path) -> list[str]:
    """The wheel's runtime requirements (``Requires-Dist`` without an extra's marker)."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    found = [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:")]
    return sorted(r for r in found if "extra ==" not in r)


def deps_layer(wheel: Path, python: str, progress: Progress) -> bytes:
    """The wheel's runtime dependencies for `python` (binary wheels from PyPI, pip's own resolution), in
    ``/usr/local/lib/python3.X/dist-packages``; cached by the requirements, so a changed gpuready costs no pip."""
    return pip_layer(requirements(wheel), python, progress, f"the dependencies of {wheel.name}")


def pip_layer(
    wanted: list[str], python: str, progress: Progress, what: str, prefix: str = "suite-deps-layer"
) -> bytes:
    """`wanted` (requirement strings) installed by pip for `python` (binary wheels from PyPI) into
    ``/usr/local/lib/python3.X/dist-packages``, scripts left out; cached as ``<prefix>-<key>.tar`` by the
    requirements, one kept per prefix."""
    key = hashlib.sha256(json.dumps([python, PIP_PLATFORMS, sorted(wanted)]).encode()).hexdigest()[:16]
    target = cache_dir() / f"{prefix}-{key}.tar"
    with locked(cache_dir() / f".{prefix}-{key}.lock"):
        if target.is_file():
            return target.read_bytes()
        with tempfile.TemporaryDirectory(prefix="gpuready-suite-image-") as tmp:
            site = Path(tmp) / f"usr/local/lib/python{python}/dist-packages"
            platforms = [arg for p in PIP_PLATFORMS for arg in ("--platform", p)]
            progress(f"image layer: pip install {what} for Python {python} (once)")
            result = subprocess.run(
                [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile",
                 "--only-binary=:all:", "--python-version", python, "--implementation", "cp", *platforms,
                 "--target", str(site), *sorted(wanted)],
                capture_output=True, text=True, stdin=subprocess.DEVNULL,
            )  # fmt: skip
            if result.returncode != 0:
                raise RuntimeError(
                    f"pip install of {what} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
                )
            files: dict[str, tuple[bytes, int]] = {}
            for path in sorted(site.rglob("*")):
                inside = path.relative_to(site)
                if path.is_file() and not path.is_symlink() and inside.parts[0] != "bin":
                    mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
                    files[str(path.relative_to(tmp))] = (path.read_bytes(), mode)
        tmp_target = target.with_suffix(".tmp")
        tmp_target.write_bytes(realnode.layer_tar(files))
        tmp_target.rename(target)
        for old in cache_dir().glob(f"{prefix}-*.tar"):  # one kept
            if old != target:
                old.unlink(missing_ok=True)
        progress(f"image layer: {what}, {target.stat().st_size} bytes")
        return target.read_bytes()


def wheel_layer(wheel: Path, python: str) -> bytes:
    """The wheel unpacked where pip puts a pure wheel (its dist-info too: the pytest plugin's entry point), and
    the console script ``/usr/local/bin/gpuready``."""
    site = f"usr/local/lib/python{python}/dist-packages"
    files: dict[str, tuple[bytes, int]] = {"usr/local/bin/gpuready": (CONSOLE_SCRIPT.encode(), 0o755)}
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if not info.is_dir():
                files[f"{site}/{info.filename}"] = (z.read(info), 0o644)
    return realnode.layer_tar(files)


def suite_image_name(version: str) -> str:
    """``docker.io/library/gpuready:<version>``: the name ``gpuready manifests``' default image ``gpuready:<version>``
    has in containerd."""
    return f"{SUITE_REPOSITORY}:{version}"


def probe_archive(progress: Progress = lambda _m: None) -> tuple[str, bytes]:
    """The probe image (``debian:trixie-slim`` from the base layer): (file name, OCI archive)."""
    layer, _ = base_layer(progress)
    config = {"Cmd": ["bash"], "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]}
    return "debian_trixie-slim.oci.tar", realnode.oci_archive(PROBE_IMAGE, [layer], config)


def suite_archive(wheel: Path, version: str, progress: Progress = lambda _m: None) -> tuple[str, bytes]:
    """The suite image ``gpuready:<version>``: the base layer and the suite layer, cached by the wheel's content."""
    layer, python = base_layer(progress)
    digest = wheel_digest(wheel)
    target = cache_dir() / f"gpuready-suite-image-{digest}.oci.tar"
    with locked(cache_dir() / ".gpuready-suite-image.lock"):  # one lock, as one image is kept
        if not target.is_file():
            deps, top = deps_layer(wheel, python, progress), wheel_layer(wheel, python)
            config = {
                "Entrypoint": ["gpuready"],
                "Env": [
                    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "PYTHONDONTWRITEBYTECODE=1",
                ],
                "WorkingDir": "/tmp",
            }
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(realnode.oci_archive(suite_image_name(version), [layer, deps, top], config))
            tmp.rename(target)
            progress(
                f"suite image: {suite_image_name(version)}, {target.stat().st_size} bytes (layers: base {len(layer)}, dependencies {len(deps)}, gpuready {len(top)})"
            )
        for old in cache_dir().glob("gpuready-suite-image-*.oci.tar"):  # one suite image kept
            if old != target:
                old.unlink(missing_ok=True)
    return "gpuready-suite.oci.tar", target.read_bytes()


def import_into(paths: LabPaths, node: str, archives: dict[str, bytes]) -> None:
    """Import OCI archives into a running real-kubelet host's containerd (namespace k8s.io), where the lab's
    other images are: written beside them (:data:`gpuready.lab.realhost.IMAGES_DIR`, so a containerd restart
    imports them again) and imported now."""
    from gpuready.lab.realhost import IMAGES_DIR, images_dir

    directory = images_dir(paths.host_dir(node))
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in archives.items():
        (directory / name).write_bytes(data)
        result = hosts.run_on_host(paths, node, ["ctr", "-n", "k8s.io", "images", "import", "--all-platforms",
                                                 f"{IMAGES_DIR}/{name}"], timeout=300)  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(
                f"{node}: ctr images import {name} exited {result.returncode}: {result.stderr}"
            )
