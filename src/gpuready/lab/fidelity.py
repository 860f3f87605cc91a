"""How close the lab's emulated machine is to a real one, field by field: what NVML answers on a real GPU machine
(``nvml-probe.json`` from ``scripts/device-check.sh``) against what the lab's mock ``libnvidia-ml.so.1`` answers for
the lab profile of that machine, through the same probe (:mod:`gpuready.conformance.nvml_probe`).

Every field is one of five kinds, and only one kind must agree:

* ``identity``: UUID, serial, PCI location, fabric cluster: a lab host has its own, by design;
* ``reading``: temperature, power, current clocks, utilisation, memory in use: they move on the real GPU too;
* ``binding``: fields whose presence or size depends on the nvidia-ml-py version that read them (the structures'
  ``version`` member);
* ``host file``: GFD labels taken from files of the machine GFD runs on (compared in the kernel-files table);
* ``static``: everything else (model, memory size, limits, capabilities, MIG profiles and placements, the error
  code a query answers): the lab must answer exactly what the real GPU answered.

The same is done for ``nvidia-smi -q`` (the capture's ``nvidia-smi-q.txt`` against the lab's emulated nvidia-smi on
the same machine) line by line, for NVIDIA's GPU feature discovery's labels, and for the kernel driver's files
(/dev, /proc, PCI sysfs): :data:`SMI_KNOWN` and :data:`KERNEL_KNOWN` name each static field where the lab still
differs from the real machine, and why.

``python -m gpuready.lab.fidelity tests/fixtures/device/h200__580.159.04 --profile h200-1`` prints the four tables;
``tests/unit/test_fidelity.py`` requires every static field to agree or be named.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuready.lab import hardware
from gpuready.lab.emulator import nvemu
from gpuready.nvidia import smi

IDENTITY = ("nvmlDeviceGetUUID", "nvmlDeviceGetSerial", "nvmlDeviceGetPciInfo.bus", "nvmlDeviceGetPciInfo.busId",
            "nvmlDeviceGetPciInfo.busIdLegacy", "nvmlDeviceGetPciInfo.device", "nvmlDeviceGetPciInfo.domain",
            "nvmlDeviceGetGpuFabricInfo.clusterUuid", "nvmlDeviceGetGpuFabricInfo.cliqueId")  # fmt: skip
READINGS = ("nvmlDeviceGetTemperature(GPU)", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetClockInfo(",
            "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo.free", "nvmlDeviceGetMemoryInfo.used",
            "nvmlDeviceGetBAR1MemoryInfo.bar1Free", "nvmlDeviceGetBAR1MemoryInfo.bar1Used",
            "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetPerformanceState",
            "nvmlDeviceGetCurrentClocksEventReasons")  # fmt: skip


@dataclass(frozen=True)
class Field:
    path: str
    kind: str  # identity | reading | binding | host file | static
    real: Any
    lab: Any

    @property
    def agrees(self) -> bool:
        return self.real == self.lab


# nvidia-smi -q lines (paths below the GPU's own header) by kind; the rest are static
SMI_IDENTITY = ("GPU UUID", "Serial Number", "GPU PDI", "Board ID", "Platform Info/Module Id", "Bus Id",
                "Timestamp")  # fmt: skip
SMI_READINGS = ("FB Memory Usage/Free", "FB Memory Usage/Used", "GPU Power Readings/Average Power Draw",
                "GPU Power Readings/Instantaneous Power Draw", "GPU Memory Power Readings/", "PCI/Rx Throughput",
                "PCI/Tx Throughput", "PCI/Replays Since Reset", "Temperature/GPU Current Temp",
                "Temperature/Memory Current Temp", "Clocks/", "Utilization/")  # fmt: skip
# Static nvidia-smi -q lines where the lab's emulated nvidia-smi differs from driver 580.159.04 (H200), and why;
# fix one, drop its row (the test requires the differences to be exactly these).
SMI_KNOWN = {
    "Display Attached": "the lent VM answered Yes (no display is attached to an H200); bare metal says No",
}


def smi_kind(path: str) -> str:
    if path.startswith(SMI_IDENTITY) or path.endswith(SMI_IDENTITY):
        return "identity"
    if path.startswith(SMI_READINGS):
        return "reading"
    return "static"


def compare_smi(real_text: str, lab_text: str) -> list[Field]:
    real, lab = smi.query_text_fields(real_text), smi.query_text_fields(lab_text)
    return [Field(p, smi_kind(p), real.get(p), lab.get(p)) for p in sorted(set(real) | set(lab))]


def kind_of(path: str) -> str:
    field = path.split("]", 1)[-1].lstrip(".")  # gpus[0].nvmlDeviceGetUUID -> nvmlDeviceGetUUID
    if field.startswith(IDENTITY):
        return "identity"
    if field.startswith(READINGS):
        return "reading"
    if field.endswith(".version"):
        return "binding"
    return "static"


def flatten(value: Any, path: str = "") -> dict[str, Any]:
    """{"a": {"b": [1, 2]}} -> {"a.b[0]": 1, "a.b[1]": 2}; an NVML error answer stays one leaf."""
    if isinstance(value, dict) and not (len(value) == 1 and "error" in value):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out |= flatten(item, f"{path}.{key}" if path else key)
        return out
    if isinstance(value, list) and not (
        path.endswith("clusterUuid") or path.endswith("CudaComputeCapability")
    ):
        out = {}
        for i, item in enumerate(value):
            out |= flatten(item, f"{path}[{i}]")
        return out
    return {path: value}


def compare(real: dict[str, Any], lab: dict[str, Any]) -> list[Field]:
    """Every field either document has, with its kind; a field one side lacks reads as ``None`` there."""
    flat_real, flat_lab = flatten(real), flatten(lab)
    paths = sorted(set(flat_real) | set(flat_lab))
    return [Field(p, kind_of(p), flat_real.get(p), flat_lab.get(p)) for p in paths if p != "schema"]


@dataclass(frozen=True)
class LabAnswers:
    probe: dict[str, Any]  # the NVML probe's document
    smi_q: str  # nvidia-smi -q
    gfd_labels: dict[str, str] | None  # GPU feature discovery's labels, where its binary was given


def parse_labels(text: str) -> dict[str, str]:
    """GFD's output file: one ``name=value`` per line."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def lab_answers(profile: str, driver_version: str, library_dir: Path, gfd: Path | None = None) -> LabAnswers:
    """What node 0 of lab ``profile`` answers with persistence mode on (as the node deploy leaves it): NVML
    through the mock in ``library_dir``, nvidia-smi through the lab's emulated one, and NVIDIA's GPU feature
    discovery (``gfd``, built from its Go module) run once over the mock, as scripts/device-check.sh runs it."""
    from gpuready.lab.silicon import build

    with tempfile.TemporaryDirectory(prefix="gpuready-fidelity-") as tmp:
        root = Path(tmp)
        hardware.write_hardware(root / "hardware.json", hardware.make_hardware(profile, 0))
        (root / "persistenced.pid").write_text(f"{os.getpid()}\n")  # a live pid: the daemon counts as running
        env = {
            **os.environ,
            "LD_LIBRARY_PATH": str(library_dir),
            "GPUREADY_LAB_HARDWARE": str(root / "hardware.json"),
            "GPUREADY_LAB_STATE": str(root / "state" / "state.json"),
            "GPUREADY_LAB_BOOT_ID": "fidelity",
            "GPUREADY_LAB_DRIVER_VERSION": driver_version,
            "GPUREADY_LAB_PERSISTENCED_PID": str(root / "persistenced.pid"),
        }
        probe = subprocess.run(
            [sys.executable, "-m", "gpuready.conformance.nvml_probe"],
            env=env, capture_output=True, text=True, check=True, timeout=120,
        )  # fmt: skip
        smi = subprocess.run(
            [str(build.static_tools()), "nvidia-smi", "-q"],
            env=env, capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        labels = None
        if gfd is not None:
            out = root / "gfd-labels.txt"
            subprocess.run(
                [str(gfd), "--oneshot", "--no-timestamp", "--use-node-feature-api=false", "--mig-strategy", "mixed",
                 "--device-discovery-strategy", "nvml", "--machine-type-file", str(root / "no-dmi"),
                 "--output-file", str(out)],
                env=env, capture_output=True, text=True, check=True, timeout=120,
            )  # fmt: skip
            labels = parse_labels(out.read_text())
    return LabAnswers(json.loads(probe.stdout), smi.stdout, labels)


# GFD labels that GFD takes from files of the machine it runs on rather than from NVML: outside a lab host (the
# unit test, this command) those are the workstation's, so they are shown and not compared; the kernel-files table
# compares the sysfs values they come from.
GFD_FROM_HOST_FILES = {
    "nvidia.com/gpu.mode": "the PCI class in /sys/bus/pci/devices/<bdf>/class (0x0302xx: compute)",
}


def compare_labels(real: dict[str, str], lab: dict[str, str]) -> list[Field]:
    """GFD's labels: static, but for :data:`GFD_FROM_HOST_FILES` (the lent VM had no DMI product name, and the lab
    run is given none either: ``gpu.machine`` is compared)."""
    return [
        Field(name, "host file" if name in GFD_FROM_HOST_FILES else "static", real.get(name), lab.get(name))
        for name in sorted(set(real) | set(lab))
    ]


# --- the kernel driver's files: /dev, /proc/devices, /proc/driver/nvidia, PCI sysfs -------------------------------

SYSFS_ATTRIBUTES = ("vendor", "device", "subsystem_vendor", "subsystem_device", "class", "numa_node",
                    "current_link_speed", "current_link_width", "max_link_speed", "max_link_width",
                    "local_cpulist")  # fmt: skip  # what scripts/device-check.sh reads
_MODES = {"crw-rw-rw-": "0666", "cr--r--r--": "0444", "cr--------": "0400"}
KERNEL_KNOWN = {
    "/dev/nvidia-modeset": "the lent VM loads no nvidia_modeset module (/proc/modules: nvidia, nvidia_uvm); a lab "
    "host's driver package loads it, as a node with nvidia-drm does",
}


def _real_kernel(capture: Path) -> dict[str, str]:
    """The capture's kernel-side files as {path: value}; dynamic majors by name (the kernel hands them out)."""
    majors: dict[str, str] = {}
    out: dict[str, str] = {}
    for line in (capture / "proc-devices.txt").read_text().splitlines():
        major, name = line.split()
        majors[major] = "195" if major == "195" else name
        out[f"/proc/devices/{name}"] = majors[major]
    folder = "/dev"
    for line in (capture / "dev-nvidia.txt").read_text().splitlines():
        if line.endswith(":") and line.startswith("/dev/"):
            folder = line[:-1]
            continue
        fields = line.split()
        if len(fields) < 10 or not line.startswith("c"):
            continue
        major, minor, name = fields[4].rstrip(","), fields[5], fields[-1]
        path = name if name.startswith("/dev/") else f"{folder}/{name}"
        out[path] = f"char {majors.get(major, major)}:{minor} {_MODES.get(fields[0], fields[0])}"
    current = None
    for line in (capture / "proc-driver-nvidia-gpus.txt").read_text().splitlines():
        if line.startswith("== "):
            current = line[3:] if line.endswith("/information") else None
        elif current and ":" in line and not line.startswith(("/", "total", "-", "d")):
            key, value = line.split(":", 1)
            out[f"{current}/{key.strip()}"] = value.strip()
    current = None
    for line in (capture / "proc-driver-nvidia-capabilities.txt").read_text().splitlines():
        if line.startswith("== "):
            current = line[3:]
        elif current and ":" in line:
            key, value = line.split(":", 1)
            out[f"{current}/{key.strip()}"] = value.strip()
    for line in (capture / "pci-sysfs.txt").read_text().splitlines():
        if line.startswith("== "):
            current = line[3:].replace("/sys/bus/pci/devices/", "/sys/bus/pci/devices/")
        elif current and ": " in line:
            key, value = line.split(": ", 1)
            out[f"{current}/{key}"] = value.strip()
    return out


def _lab_kernel(profile: str, driver_version: str) -> dict[str, str]:
    """The same paths as the lab renders them for node 0 of ``profile`` with the driver loaded."""
    from gpuready.lab import kernel_files
    from gpuready.lab.silicon import build

    hw = hardware.make_hardware(profile, 0)
    with tempfile.TemporaryDirectory(prefix="gpuready-fidelity-") as tmp:
        hardware.write_hardware(Path(tmp) / "hardware.json", hw)
        view = nvemu.read_view(build.static_tools(), Path(tmp) / "hardware.json", None, "fidelity")
    files = kernel_files.render(kernel_files.Reading(hw, view, driver_version), "Character devices:\n")
    names = {str(major): name for name, major in kernel_files.DYNAMIC_MAJORS.items()}
    out: dict[str, str] = {}
    for line in files["proc-devices"].splitlines()[1:]:
        major, name = line.split()
        out[f"/proc/devices/{name}"] = "195" if major == "195" else name
    for path, entry in files["dev"].items():
        if entry[0] == "char":
            major = "195" if entry[1] == kernel_files.NVIDIA_MAJOR else names[str(entry[1])]
            out[f"/dev/{path}"] = f"char {major}:{entry[2]} {entry[3]:04o}"
    for path, entry in files["proc-driver"].items():
        if entry[0] == "file" and (path.endswith("/information") or path.startswith("nvidia/capabilities/")):
            for line in entry[1].splitlines():
                key, value = line.split(":", 1)
                out[f"/proc/driver/{path}/{key.strip()}"] = value.strip()
    for path, entry in files["sys-pci-devices"].items():
        if entry[0] == "file" and path.rsplit("/", 1)[-1] in SYSFS_ATTRIBUTES:
            out[f"/sys/bus/pci/devices/{path}"] = entry[1].strip()
    return out


def kernel_kind(path: str) -> str:
    if path.endswith(("/IRQ", "/GPU UUID")):
        return "identity"
    return "static"


def compare_kernel(capture: Path, profile: str, driver_version: str) -> list[Field]:
    real, lab = _real_kernel(capture), _lab_kernel(profile, driver_version)
    lab = {p: v for p, v in lab.items() if not p.startswith("/proc/devices/") or p in real or v == "195"}
    return [Field(p, kernel_kind(p), real.get(p), lab.get(p)) for p in sorted(set(real) | set(lab))]


def report(title: str, fields: list[Field], known: dict[str, str] | None = None) -> str:
    """A Markdown table: static fields first (the ones that must agree), then the rest, each with its verdict;
    ``known``: static fields whose difference is named, with the reason."""
    known = known or {}
    order = {"static": 0, "binding": 1, "identity": 2, "reading": 3, "host file": 4}
    lines = [f"## {title}", "", "| field | kind | real | lab | |", "|---|---|---|---|---|"]
    for f in sorted(fields, key=lambda f: (order[f.kind], f.path)):
        if f.agrees:
            verdict = "same"
        elif f.kind != "static":
            verdict = "differs (expected)"
        else:
            verdict = f"known: {known[f.path]}" if f.path in known else "DIFFERENT"
        lines.append(f"| `{f.path}` | {f.kind} | {json.dumps(f.real)} | {json.dumps(f.lab)} | {verdict} |")
    static = [f for f in fields if f.kind == "static"]
    wrong = [f for f in static if not f.agrees]
    named = [f for f in wrong if f.path in known]
    lines.append("")
    lines.append(f"{len(static) - len(wrong)} of {len(static)} static fields agree, {len(named)} differ as named, "
                 f"{len(wrong) - len(named)} differ unexplained; {len(fields) - len(static)} other fields (identity, "
                 "readings, binding, host files) are shown, not compared.")  # fmt: skip
    return "\n".join(lines) + "\n\n"


def unexplained(fields: list[Field], known: dict[str, str] | None = None) -> list[Field]:
    return [f for f in fields if f.kind == "static" and not f.agrees and f.path not in (known or {})]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpuready.lab.fidelity", description=__doc__.splitlines()[0]
    )
    parser.add_argument("capture", type=Path, help="a device-check capture folder (holds nvml-probe.json)")
    parser.add_argument("--profile", required=True, choices=sorted(hardware.PROFILES), help="the lab profile")
    args = parser.parse_args(argv)
    from gpuready.lab import nvidia_addons
    from gpuready.lab.silicon import build

    real = json.loads((args.capture / "nvml-probe.json").read_text())
    libraries = build.ensure_libraries(lambda line: print(line, file=sys.stderr), names=["nvml"])
    gfd = nvidia_addons.ensure_plugin(progress=lambda line: print(line, file=sys.stderr))[
        "gpu-feature-discovery"
    ]
    driver = real["system"]["nvmlSystemGetDriverVersion"]
    lab = lab_answers(args.profile, driver, libraries["nvml"].parent, gfd)
    nvml = compare(real, lab.probe)
    smi = compare_smi((args.capture / "nvidia-smi-q.txt").read_text(), lab.smi_q)
    labels = compare_labels(parse_labels((args.capture / "gfd-labels.txt").read_text()), lab.gfd_labels or {})
    against = f"{args.capture.name} against lab profile {args.profile}"
    sys.stdout.write(report(f"NVML: {against}", nvml))
    sys.stdout.write(report(f"nvidia-smi -q: {against}", smi, SMI_KNOWN))
    sys.stdout.write(report(f"GPU feature discovery's labels: {against}", labels))
    kernel = compare_kernel(args.capture, args.profile, driver)
    sys.stdout.write(report(f"Kernel files: {against}", kernel, KERNEL_KNOWN))
    failed = (
        unexplained(nvml)
        or unexplained(smi, SMI_KNOWN)
        or unexplained(labels)
        or unexplained(kernel, KERNEL_KNOWN)
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
