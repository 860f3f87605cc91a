"""The Container Device Interface (CDI) as NVIDIA's container toolkit uses it: where the spec lives, what it must
name, which toolkit and containerd versions can serve it.

Why CDI: since toolkit 1.18 the ``nvidia`` runtime resolves to CDI (``jit-cdi``) by default, and the GPU Operator
made CDI its default in 25.10. A container gets the devices its CDI names resolve to in the spec
(``/var/run/cdi/nvidia.yaml``, kind ``nvidia.com/gpu``), so a spec that lacks a device (a GPU added, a MIG layout
changed and the spec not refreshed) makes containerd refuse the container: "unresolvable CDI devices". The
toolkit's ``nvidia-cdi-refresh.path`` regenerates the spec when the driver is (re)installed; a MIG change needs the
refresh service started again (what the MIG task does).

Pure: text in, names and problems out (checks and deploys both use it; no I/O here).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from gpuready.nvidia.errors import check_text
from gpuready.nvidia.security import compare_versions
from gpuready.nvidia.smi import ListedGpu

KIND = "nvidia.com/gpu"
SPEC_PATH = "/var/run/cdi/nvidia.yaml"  # what nvidia-cdi-refresh writes (NVIDIA_CTK_OUTPUT_FILE_PATH)
STATIC_SPEC_PATH = "/etc/cdi/nvidia.yaml"  # where a hand-run `nvidia-ctk cdi generate` is told to write
SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")  # containerd's default cdi_spec_dirs, in precedence order
REFRESH_PATH_UNIT = "nvidia-cdi-refresh.path"
REFRESH_SERVICE = "nvidia-cdi-refresh.service"
# 1.18.0 ships the refresh units but its containerd drop-in overwrote the top-level `imports` (fixed in 1.18.1)
MIN_TOOLKIT = "1.18.1"
BROKEN_TOOLKIT = "1.18.0"
# containerd's CRI plugin resolves CDI devices from 1.7 (enable_cdi); from 2.0 it is on by default
MIN_CONTAINERD = "1.7"


def toolkit_problem(version: str) -> str | None:
    """Why CDI mode cannot use this toolkit version, or None."""
    if compare_versions(version, BROKEN_TOOLKIT) == 0:
        return (
            f"toolkit {BROKEN_TOOLKIT}'s containerd drop-in overwrites the top-level imports of config.toml "
            f"(fixed in {MIN_TOOLKIT}): pin {MIN_TOOLKIT} or newer, or set nvidia_cdi = False"
        )
    if compare_versions(version, MIN_TOOLKIT) < 0:
        return (
            f"CDI mode needs toolkit >= {MIN_TOOLKIT} (the nvidia-cdi-refresh units that keep {SPEC_PATH} "
            "current): pin a newer toolkit or set nvidia_cdi = False"
        )
    return None


def containerd_problem(version: str) -> str | None:
    """Why CDI mode cannot use this containerd version (a Debian package version is fine), or None."""
    if compare_versions(version, MIN_CONTAINERD) < 0:
        return (
            f"containerd {version} cannot inject CDI devices (its CRI plugin has CDI from {MIN_CONTAINERD}): "
            "set nvidia_cdi = False for this node (runtime-class mode) or install a newer containerd"
        )
    return None


def expected_devices(gpus: Iterable[ListedGpu]) -> dict[str, str]:
    """{CDI device name: what it is} the spec must name for the devices ``nvidia-smi -L`` lists.

    A GPU by index and UUID; a MIG-enabled GPU's MIG devices as ``<gpu>:<mig>`` and by MIG UUID (their parent is
    not a device a container gets in MIG mode); and ``all``.
    """
    out: dict[str, str] = {}
    for gpu in gpus:
        if gpu.mig_devices:
            for mig in gpu.mig_devices:
                what = f"MIG device {gpu.index}:{mig.index} ({mig.profile}) of GPU {gpu.index}"
                out[f"{gpu.index}:{mig.index}"] = what
                out[mig.uuid] = what
        else:
            out[str(gpu.index)] = f"GPU {gpu.index} ({gpu.uuid})"
            out[gpu.uuid] = f"GPU {gpu.index} ({gpu.uuid})"
    out["all"] = "all GPUs"
    return out


@dataclass(frozen=True)
class Spec:
    """One CDI spec file: its path, kind, CDI version and device names."""

    path: str
    kind: str
    cdi_version: str
    devices: tuple[str, ...]
    # the driver versions of the libraries it mounts (libcuda.so.<version>): the driver it was generated for
    driver_versions: frozenset[str] = frozenset()


class SpecError(ValueError):
    """The CDI spec output cannot be read (not YAML, not a CDI spec, nested too deep, too long): the one error
    :func:`parse_specs` raises."""


FILE_MARK = "# gpuready-cdi-file: "


def spec_command(paths: Iterable[str] = (STATIC_SPEC_PATH, SPEC_PATH)) -> str:
    """One command printing every NVIDIA CDI spec file that exists, each after a marker line with its path."""
    return "; ".join(f'test -f {p} && echo "{FILE_MARK}{p}" && cat {p}' for p in paths) + "; true"


def parse_specs(text: str) -> list[Spec]:
    """The specs in ``spec_command``'s output; a file that is not a CDI spec raises :class:`SpecError`."""
    check_text(text, "CDI spec files", SpecError)
    files: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith(FILE_MARK):
            files.append((line[len(FILE_MARK) :].strip(), []))
        elif files:
            files[-1][1].append(line)
    return [_parse_one(path, "\n".join(lines)) for path, lines in files]


def _parse_one(path: str, text: str) -> Spec:
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: an integer of more digits than Python converts
        raise SpecError(f"{path} is not valid YAML: {str(exc)[:300]}") from None
    except RecursionError:
        raise SpecError(f"{path} nests too deep to be a CDI spec") from None
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise SpecError(f"{path} is not one CDI spec document")
    doc: dict[str, Any] = docs[0]
    missing = [key for key in ("cdiVersion", "kind", "devices") if key not in doc]
    if missing:
        raise SpecError(f"{path} has no {', '.join(missing)}: not a CDI spec")
    devices = doc.get("devices") or []
    if not isinstance(devices, list) or not all(isinstance(d, dict) and "name" in d for d in devices):
        raise SpecError(f"{path}: devices must be a list of entries with a name")
    try:
        edits = yaml.safe_dump(doc.get("containerEdits") or {})
    except (yaml.YAMLError, RecursionError):
        raise SpecError(f"{path}: containerEdits cannot be read") from None
    return Spec(
        path,
        str(doc["kind"]),
        str(doc["cdiVersion"]),
        tuple(str(d["name"]) for d in devices),
        frozenset(_LIBRARY_VERSION.findall(edits)),
    )


# a driver library the spec mounts, e.g. /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05
_LIBRARY_VERSION = re.compile(r"/lib(?:cuda|nvidia-ml)\.so\.([0-9]+\.[0-9]+(?:\.[0-9]+)?)\b")


def qualified(name: str) -> str:
    return f"{KIND}={name}"
