"""gpuready's readers on a real H200's answers (scripts/device-check.sh on a lent machine, driver 580.159.04;
tests/fixtures/SOURCES.md): nvidia-smi's text and XML reports, its ``-L`` list, and what NVML answered
(``python -m gpuready.conformance.nvml_probe``) all describe the same GPU, and the suite's own local run there passed
the gpu and diag layers."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from gpuready.nvidia.smi import parse_list, parse_query_text, parse_query_xml

DEVICE = Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h200__580.159.04"
MIB = 1024 * 1024


def read(name: str) -> str:
    return (DEVICE / name).read_text()


def test_text_and_xml_reports_agree_on_every_field_but_the_power_reading() -> None:
    text = parse_query_text(read("nvidia-smi-q.txt"))
    xml = parse_query_xml(read("nvidia-smi-q-x.xml"))
    (t,), (x,) = text.gpus, xml.gpus
    differ = {f.name for f in dataclasses.fields(t) if getattr(t, f.name) != getattr(x, f.name)}
    assert differ <= {"power_draw_w"}, differ  # two runs of nvidia-smi, two power readings
    assert (
        (text.driver_version, text.cuda_version)
        == (xml.driver_version, xml.cuda_version)
        == ("580.159.04", "13.0")
    )
    assert (t.name, t.memory_total_mib, t.mig_mode_current, t.ecc_mode_current) == (
        "NVIDIA H200", 143771, "Disabled", "Enabled",
    )  # fmt: skip
    # a VM with the GPU passed through: no NVSwitch fabric is visible there (nvidia-smi: State N/A)
    assert (t.fabric_state, t.pcie_link_gen_max, t.pcie_link_width_max) == (None, 5, 16)


def test_nvml_answers_what_nvidia_smi_reports() -> None:
    probe = json.loads(read("nvml-probe.json"))
    (gpu,) = parse_query_xml(read("nvidia-smi-q-x.xml")).gpus
    (listed,) = parse_list(read("nvidia-smi-L.txt"))
    (nvml,) = probe["gpus"]
    assert probe["system"]["nvmlSystemGetDriverVersion"] == "580.159.04"
    assert nvml["nvmlDeviceGetName"] == gpu.name == listed.name
    assert nvml["nvmlDeviceGetUUID"] == gpu.uuid == listed.uuid
    assert nvml["nvmlDeviceGetPciInfo"]["busId"] == gpu.pci_bus_id
    assert nvml["nvmlDeviceGetMemoryInfo"]["total"] // MIB == gpu.memory_total_mib
    assert nvml["nvmlDeviceGetMigMode"] == [0, 0] and gpu.mig_mode_current == "Disabled"
    assert nvml["nvmlDeviceGetMaxMigDeviceCount"] == 0  # MIG off: no MIG device slots, though MIG capable
    assert (nvml["nvmlDeviceGetMaxPcieLinkGeneration"], nvml["nvmlDeviceGetMaxPcieLinkWidth"]) == (5, 16)


def test_the_suite_passed_the_gpu_and_diag_layers_there() -> None:
    """What the lent machine could show: no containerd, toolkit or kubelet there (the host layer says so), and a
    driver older than the security floor; the gpu layer and the CUDA copies through the driver API passed."""
    statuses = {}
    for layer in ("host", "gpu", "diag"):
        verdict = json.loads(read(f"report/{layer}-verdict.json"))
        for node in verdict["nodes"].values():
            for checks in node["layers"].values():
                statuses |= {name: r["status"] for name, r in checks["checks"].items()}
    assert statuses["test_vector_add"] == statuses["test_gpus_match_spec"] == "pass"
    assert statuses["test_host_to_device_bandwidth"] == statuses["test_device_to_host_bandwidth"] == "pass"
    assert statuses["test_driver_security_floor"] == "fail"  # 580.159.04 is below 580.178.04
