"""The lab's emulated machine against a real one (gpuready.lab.fidelity): the lab profile ``h200-1`` must answer
every static NVML field exactly as the lent H200 did (tests/fixtures/device/h200__580.159.04), and its emulated
nvidia-smi must differ from the real report only in the lines ``SMI_KNOWN`` names with a reason."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from gpuready.lab import fidelity
from gpuready.lab.gobuild import cgo_problem
from gpuready.lab.silicon import build

DEVICE = Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h200__580.159.04"
REAL = json.loads((DEVICE / "nvml-probe.json").read_text())
DRIVER = REAL["system"]["nvmlSystemGetDriverVersion"]


@pytest.fixture(scope="module")
def lab_h200() -> fidelity.LabAnswers:
    problem = cgo_problem()
    if problem:
        pytest.skip(f"the mock NVML is built with Go and cgo: {problem}")
    library = build.ensure_libraries(lambda _msg: None, names=["nvml"])["nvml"]
    return fidelity.lab_answers("h200-1", DRIVER, library.parent)


def describe(fields: list[fidelity.Field]) -> list[str]:
    return [f"{f.path}: real {f.real!r}, lab {f.lab!r}" for f in fields]


def test_every_static_nvml_field_agrees_with_the_real_h200(lab_h200) -> None:
    fields = fidelity.compare(REAL, lab_h200.probe)
    static = [f for f in fields if f.kind == "static"]
    assert len(static) > 200  # the whole probe: MIG profiles, placements, limits, error codes
    assert describe(fidelity.unexplained(fields)) == []


def test_emulated_nvidia_smi_differs_only_where_named(lab_h200) -> None:
    fields = fidelity.compare_smi((DEVICE / "nvidia-smi-q.txt").read_text(), lab_h200.smi_q)
    assert describe(fidelity.unexplained(fields, fidelity.SMI_KNOWN)) == []
    differing = {f.path for f in fields if f.kind == "static" and not f.agrees}
    assert differing == set(fidelity.SMI_KNOWN), "a named difference is gone: drop it from SMI_KNOWN"


def test_a_changed_static_field_is_caught_and_readings_are_not() -> None:
    lab = copy.deepcopy(REAL)
    gpu = lab["gpus"][0]
    gpu["nvmlDeviceGetMemoryInfo"]["total"] -= 1024 * 1024
    gpu["nvmlDeviceGetNvLinkState"][3] = 1
    gpu["nvmlDeviceGetMemoryInfo"]["used"] += 1  # a reading
    gpu["nvmlDeviceGetUUID"] = "GPU-00000000-0000-0000-0000-000000000000"  # identity
    found = {f.path for f in fidelity.unexplained(fidelity.compare(REAL, lab))}
    assert found == {"gpus[0].nvmlDeviceGetMemoryInfo.total", "gpus[0].nvmlDeviceGetNvLinkState[3]"}


NO_CGO = cgo_problem()


@pytest.mark.skipif(NO_CGO is not None, reason=f"GFD builds with Go and cgo: {NO_CGO}")
def test_nvidias_gfd_labels_the_lab_h200_as_it_labelled_the_real_one() -> None:
    """NVIDIA's own GPU feature discovery (built from its Go module), run once over the mock NVML, prints the labels
    it printed on the lent H200: product, memory, family, compute capability, CUDA and driver versions, MIG."""
    from gpuready.lab import nvidia_addons

    gfd = nvidia_addons.ensure_plugin()["gpu-feature-discovery"]
    library = build.ensure_libraries(lambda _msg: None, names=["nvml"])["nvml"]
    lab = fidelity.lab_answers("h200-1", DRIVER, library.parent, gfd)
    assert lab.gfd_labels is not None
    real = fidelity.parse_labels((DEVICE / "gfd-labels.txt").read_text())
    fields = fidelity.compare_labels(real, lab.gfd_labels)
    assert len([f for f in fields if f.kind == "static"]) >= 25
    assert describe(fidelity.unexplained(fields)) == []
    assert lab.gfd_labels["nvidia.com/gpu.product"] == "NVIDIA-H200"


def test_the_kernel_files_of_the_lab_h200_are_the_real_ones() -> None:
    """/dev/nvidia*, /proc/devices, /proc/driver/nvidia (GPU information, capabilities) and the PCI sysfs
    attributes, rendered by the lab for h200-1, against what the lent H200's kernel showed."""
    fields = fidelity.compare_kernel(DEVICE, "h200-1", DRIVER)
    assert len([f for f in fields if f.kind == "static"]) >= 40
    assert describe(fidelity.unexplained(fields, fidelity.KERNEL_KNOWN)) == []
    differing = {f.path for f in fields if f.kind == "static" and not f.agrees}
    assert differing == set(fidelity.KERNEL_KNOWN), "a named difference is gone: drop it from KERNEL_KNOWN"


def test_two_real_h200s_differ_only_in_what_is_not_compared() -> None:
    """The classification itself, checked on two lent H200s (different UUIDs, same driver): every field that
    differs between two real GPUs of one model must be identity, a reading or binding, never static."""
    other = json.loads((DEVICE / "nvml-probe.second-machine.json").read_text())
    fields = fidelity.compare(REAL, other)
    assert {f.kind for f in fields if not f.agrees} <= {"identity", "reading", "binding"}
    assert any(f.path == "gpus[0].nvmlDeviceGetUUID" and not f.agrees for f in fields)
