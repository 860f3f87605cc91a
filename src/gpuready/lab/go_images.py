"""OCI images of the Go commands the lab builds (NVIDIA's add-ons), written once per version into the lab cache.

The lab has no Debian base root for images (pause and busybox are static), so an image of cgo-built commands is
one layer: the commands where the upstream Dockerfile copies them, the glibc files ``ldd`` names for them on this
machine (they were linked against it; NVML is dlopened at run time, never linked), and busybox as
``/busybox/sh`` and ``/bin/sh`` (what the distroless ``-dev``/``debug`` bases upstream uses give). Used by
:mod:`gpuready.lab.nvidia_addons` (the device plugin) and :mod:`gpuready.lab.dra_image` (the DRA driver).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from gpuready.lab import realnode
from gpuready.lab.gobuild import Progress
from gpuready.lab.state import locked

# What every image of this module holds besides its commands; a change renames the cached archives.
LAYOUT = "busybox-applets"


def shared_libraries(binaries: list[Path]) -> dict[str, Path]:
    """What the dynamic loader maps for `binaries` here (``ldd``): path as the binary asks for it (the loader's
    absolute path, libraries where ``ldd`` found them) -> the real file. A static binary adds nothing."""
    found: dict[str, Path] = {}
    for binary in binaries:
        out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
        for line in out.splitlines():
            match = re.search(r"(?:=>\s*)?(/\S+)\s+\(0x", line)
            if match:
                found[match[1]] = Path(match[1]).resolve()
    return found


def image_layer(files: Mapping[str, Path], libraries: Mapping[str, Path], busybox: Path) -> bytes:
    """One layer: `files` (path in the image -> file here, all executable), the glibc files they link against,
    and busybox as /busybox/sh and /bin/sh."""
    content = {inside.lstrip("/"): (path.read_bytes(), 0o755) for inside, path in files.items()}
    content.update({inside.lstrip("/"): (real.read_bytes(), 0o755) for inside, real in libraries.items()})
    content["busybox/busybox"] = (busybox.read_bytes(), 0o755)
    links = {f"busybox/{applet}": "busybox" for applet in applets(busybox)}
    return realnode.layer_tar(content, {**links, "busybox/sh": "busybox", "bin/sh": "/busybox/busybox"})


def applets(busybox: Path) -> list[str]:
    """The commands `busybox` provides, each linked in /busybox as the distroless ``-dev`` bases have them (on
    their PATH): NVIDIA's MPS control daemon runs ``mount`` and ``tail`` from there."""
    out = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout
    return sorted({name for name in out.split() if name and "/" not in name and name != "busybox"})


def cached_archive(
    target: Path,
    name: str,
    files: Mapping[str, Path],
    config: Mapping[str, object],
    label: str,
    progress: Progress,
) -> tuple[str, bytes]:
    """The OCI archive of image `name` (file name, bytes) holding `files` (path in the image -> file here) with
    their libraries and busybox, and `config` (Entrypoint, Env, Labels), written once to `target`."""
    from gpuready.lab.realhost import _busybox_binary

    stem = target.name.removesuffix(".oci.tar")  # an archive of an older layout is not reused
    target = target.with_name(f"{stem}-{LAYOUT}.oci.tar")
    with locked(target.parent / f".{target.name}.lock"):
        if not target.is_file():
            libraries = shared_libraries(list(files.values()))
            layer = image_layer(files, libraries, _busybox_binary(progress))
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(realnode.oci_archive(name, [layer], config))
            tmp.rename(target)
            progress(f"{label}: image {name}, {target.stat().st_size} bytes")
    return target.name, target.read_bytes()
