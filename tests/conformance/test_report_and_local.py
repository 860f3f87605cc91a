"""The fleet report on its own, the vectorAdd launch plumbing (no GPU needed) and the NVML reader (fake NVML)."""

from __future__ import annotations

import ctypes
import json
import re
import types
import xml.etree.ElementTree as ET

import pytest
from verdict_schema import assert_valid_verdict

from gpuready.conformance import local_gpu
from gpuready.conformance.cuda import vector_add as cuda_vector_add
from gpuready.conformance.report import FleetResults, Measurement, render_table, write_reports


def sample() -> FleetResults:
    results = FleetResults(["gpu-node-1", "gpu-node-2", "gpu-node-3"], "inventory/lab.py")
    results.record("gpu-node-1", "host", "test_driver_version", "pass", seconds=0.25)
    results.record("gpu-node-1", "gpu", "test_vector_add", "skip", "gpu-node-1: no libcuda.so.1")
    results.record(
        "gpu-node-2", "host", "test_driver_version", "fail", "gpu-node-2: driver version is 575.57.08"
    )
    results.record(
        "gpu-node-2", "gpu", "test_gpus_match_spec", "skip", "skipped: host layer failed on gpu-node-2"
    )
    return results


def test_layer_statuses_and_table():
    table = render_table(sample()).splitlines()
    assert re.split(r"\s+", table[0]) == ["node", "host", "gpu", "node", "workloads", "metrics", "policy", "diag"]  # fmt: skip
    assert re.split(r"\s+", table[1]) == ["gpu-node-1", "PASS", "SKIP", "-", "-", "-", "-", "-"]
    assert re.split(r"\s+", table[2]) == ["gpu-node-2", "FAIL", "SKIP", "-", "-", "-", "-", "-"]
    assert re.split(r"\s+", table[3]) == ["gpu-node-3", "-", "-", "-", "-", "-", "-", "-"]
    assert table[4] == "gpu-node-2: host/test_driver_version: gpu-node-2: driver version is 575.57.08"


def test_verdict_json_and_fleet_xml(tmp_path):
    paths = write_reports(sample(), tmp_path / "out", exit_code=1)
    assert [p.name for p in paths] == ["fleet.xml", "verdict.json", "report.html"]
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    assert_valid_verdict(verdict)
    assert verdict["verdict"] == "fail" and verdict["exit_code"] == 1
    assert verdict["exit_code_meaning"] == "at least one check failed on at least one node"
    none, one_each = {"pass": 0, "fail": 0, "skip": 0}, {"pass": 1, "fail": 0, "skip": 1}
    assert verdict["nodes"]["gpu-node-1"] == {
        "verdict": "pass",
        "counts": one_each,
        "layers": {
            "host": {
                "status": "pass",
                "counts": {**none, "pass": 1},
                "seconds": 0.25,
                "checks": {"test_driver_version": {"status": "pass", "message": "", "seconds": 0.25}},
            },
            "gpu": {
                "status": "skip",
                "counts": {**none, "skip": 1},
                "seconds": 0.0,
                "checks": {
                    "test_vector_add": {
                        "status": "skip",
                        "message": "gpu-node-1: no libcuda.so.1",
                        "seconds": 0.0,
                    }
                },
            },
        },
    }
    assert verdict["nodes"]["gpu-node-3"] == {"verdict": "skip", "counts": none, "layers": {}}
    assert verdict["counts"] == {"pass": 1, "fail": 1, "skip": 2}
    assert verdict["node_counts"] == {"pass": 1, "fail": 1, "skip": 1}
    assert verdict["api_server"] is None and verdict["inventory"] == "inventory/lab.py"
    root = ET.parse(tmp_path / "out" / "fleet.xml").getroot()
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert list(suites) == ["gpu-node-1", "gpu-node-2", "gpu-node-3"]
    failure = suites["gpu-node-2"].find("testcase[@name='host / test_driver_version']/failure")
    assert failure.get("message") == "gpu-node-2: driver version is 575.57.08"
    assert suites["gpu-node-1"].get("failures") == "0" and suites["gpu-node-2"].get("failures") == "1"


def test_measurements_reach_verdict_json_fleet_xml_and_the_table(tmp_path):
    results = FleetResults(["gpu-node-1"])
    figures = (
        Measurement("GPU 0 host->device", 12.5, 44.11, "GB/s"),
        Measurement("lowest host->device", 12.5, 44.11, "GB/s"),
    )
    message = "gpu-node-1: GPU 0: host->device 12.5 GB/s < floor 44.11 GB/s"
    results.record("gpu-node-1", "diag", "test_host_to_device_bandwidth", "fail", message, 1.0, figures)
    write_reports(results, tmp_path, exit_code=1)
    check = json.loads((tmp_path / "verdict.json").read_text())["nodes"]["gpu-node-1"]["layers"]["diag"]
    assert check["checks"]["test_host_to_device_bandwidth"]["measurements"][0] == {
        "name": "GPU 0 host->device",
        "measured": 12.5,
        "floor": 44.11,
        "unit": "GB/s",
    }
    suite = ET.parse(tmp_path / "fleet.xml").getroot().find("testsuite")
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert (
        props["diag/test_host_to_device_bandwidth/GPU 0 host->device"]
        == "measured=12.5 floor=44.11 unit=GB/s"
    )
    assert render_table(results).splitlines()[-1] == (
        "gpu-node-1 figures: lowest host->device 12.5 GB/s (floor 44.11)"
    )


def test_a_failure_is_not_overwritten_by_a_later_phase():
    results = FleetResults(["n"])
    results.record("n", "host", "c", "fail", "setup failed")
    results.record("n", "host", "c", "pass")
    assert results.layer_status("n", "host") == "FAIL"
    with pytest.raises(ValueError):
        results.record("n", "host", "c", "error")


def test_all_passing_fleet_with_exit_0_passes():
    results = FleetResults(["n"])
    results.record("n", "host", "c", "pass")
    assert results.verdict(0)["verdict"] == "pass"
    assert results.verdict(2)["verdict"] == "fail"  # interrupted: incomplete, never a pass


def test_a_run_whose_every_check_skipped_is_not_a_pass():
    results = FleetResults(["n1", "n2"])
    results.record("n1", "host", "c", "skip", "n1: no nvidia-smi")
    results.record("n2", "host", "c", "skip", "n2: no nvidia-smi")
    verdict = results.verdict(0)
    assert_valid_verdict(verdict)
    assert verdict["verdict"] == "skip"
    assert [n["verdict"] for n in verdict["nodes"].values()] == ["skip", "skip"]
    assert verdict["nodes"]["n1"]["layers"]["host"]["status"] == "skip"
    # one node proven, the other not: nothing failed, but the fleet is not a pass either
    results.record("n1", "gpu", "d", "pass")
    assert results.verdict(0)["verdict"] == "skip"
    results.record("n2", "gpu", "d", "pass")
    assert results.verdict(0)["verdict"] == "pass"


# --- vectorAdd plumbing -------------------------------------------------------------------------------------------


def test_grid_covers_every_element():
    assert cuda_vector_add.grid_for(50_000) == 196  # 196 * 256 = 50176 >= 50000 > 195 * 256
    assert cuda_vector_add.grid_for(256) == 1
    assert cuda_vector_add.grid_for(257) == 2
    with pytest.raises(ValueError):
        cuda_vector_add.grid_for(0)


def test_kernel_params_point_at_each_argument_in_ptx_order():
    params, keep = cuda_vector_add.kernel_params([0x7F0000001000, 0x7F0000002000, 0x7F0000003000], 50_000)
    assert len(params) == 4 and len(keep) == 4
    pointers = [ctypes.cast(params[i], ctypes.POINTER(ctypes.c_uint64)).contents.value for i in range(3)]
    assert pointers == [0x7F0000001000, 0x7F0000002000, 0x7F0000003000]
    assert ctypes.cast(params[3], ctypes.POINTER(ctypes.c_uint32)).contents.value == 50_000


def test_ptx_declares_the_parameters_the_launch_passes():
    ptx = cuda_vector_add.PTX
    entry = re.search(r"\.visible \.entry (\w+)\(([^)]*)\)", ptx)
    assert entry.group(1).encode() == cuda_vector_add.KERNEL
    assert re.findall(r"\.param \.(\w+) (\w+)", entry.group(2)) == [
        ("u64", "param_a"),
        ("u64", "param_b"),
        ("u64", "param_c"),
        ("u32", "param_n"),
    ]
    assert ".target sm_50" in ptx and ".address_size 64" in ptx


def test_inputs_sum_exactly_in_float32():
    a, b, expected = cuda_vector_add.inputs(2000)
    assert all(x + y == z for x, y, z in zip(a, b, expected, strict=True))
    assert expected[1001] == 1.0 + 7007 % 1000 / 4


def test_without_libcuda_it_says_so_and_exits_3(monkeypatch, capsys):
    monkeypatch.setattr(cuda_vector_add, "load_libcuda", lambda: None)
    assert cuda_vector_add.main() == cuda_vector_add.NO_LIBCUDA == 3
    assert "no libcuda.so.1 on this machine" in capsys.readouterr().err


# --- NVML reader ----------------------------------------------------------------------------------------------------


class FakeNVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value


def fake_nvml(lost: set[int] = frozenset()) -> types.SimpleNamespace:
    """The pynvml calls the reader makes, answering like an idle 2-GPU A100 node with GPU 1 in MIG mode."""

    def handle(i):
        if i in lost:
            raise FakeNVMLError(15)  # NVML_ERROR_GPU_IS_LOST
        return i

    def not_supported(*_):
        raise FakeNVMLError(3)

    mem = types.SimpleNamespace(total=81920 * 2**20, used=0, free=81920 * 2**20)
    return types.SimpleNamespace(
        NVMLError=FakeNVMLError,
        NVML_ERROR_NOT_SUPPORTED=3,
        NVML_ERROR_NO_PERMISSION=4,
        NVML_FEATURE_ENABLED=1,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        NVML_VOLATILE_ECC=0,
        NVML_AGGREGATE_ECC=1,
        NVML_TEMPERATURE_GPU=0,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "580.178.04",
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=handle,
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=f"00000000:0{7 + h * 8:X}:00.0".encode()),
        nvmlDeviceGetName=lambda h: "NVIDIA A100-SXM4-80GB",
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetMemoryInfo=lambda h: mem,
        nvmlDeviceGetPersistenceMode=lambda h: 1,
        nvmlDeviceGetComputeMode=lambda h: 3 if h == 0 else 0,  # NVML_COMPUTEMODE_EXCLUSIVE_PROCESS, DEFAULT
        nvmlDeviceGetMigMode=lambda h: (1, 1) if h == 1 else (0, 0),
        nvmlDeviceGetMaxMigDeviceCount=lambda h: 2,
        nvmlDeviceGetMigDeviceHandleByIndex=lambda h, i: (h, i) if i == 0 else not_supported(),
        nvmlDeviceGetGpuInstanceId=lambda m: 1,
        nvmlDeviceGetComputeInstanceId=lambda m: 0,
        nvmlDeviceGetTotalEccErrors=lambda h, kind, counter: 0,
        nvmlDeviceGetRetiredPagesPendingStatus=not_supported,
        nvmlDeviceGetRemappedRows=lambda h: (0, 1, 1, 0) if h == 0 else (0, 0, 0, 0),
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 4,
        nvmlDeviceGetMaxPcieLinkGeneration=lambda h: 4,
        nvmlDeviceGetCurrPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetMaxPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0x1 | 0x4,
        nvmlDeviceGetTemperature=lambda h, sensor: 30,
        nvmlDeviceGetPerformanceState=lambda h: 0,
    )


def test_nvml_report_has_the_fields_the_checks_read():
    report, pstates = local_gpu.nvml_report(fake_nvml())
    assert report.driver_version == "580.178.04" and report.attached_gpus == 2
    g0, g1 = report.gpus
    assert g0.pci_bus_id == "00000000:07:00.0" and g1.pci_bus_id == "00000000:0F:00.0"
    assert g0.memory_total_mib == 81920 and g0.persistence_mode is True
    assert (g0.compute_mode, g1.compute_mode) == ("Exclusive_Process", "Default")
    assert g0.remapped_rows.pending is True and g0.retired_pages_pending is None
    assert g0.clock_event_reasons_active == ("gpu_idle", "sw_power_cap")
    assert (g0.mig_mode_current, g1.mig_mode_current) == ("Disabled", "Enabled")
    assert len(g1.mig_devices) == 1 and g1.mig_devices[0].memory_total_mib == 81920
    assert pstates == {0: 0, 1: 0}


def test_nvml_report_leaves_out_a_lost_gpu_and_is_none_without_nvml():
    report, _ = local_gpu.nvml_report(fake_nvml(lost={1}))
    assert [g.index for g in report.gpus] == [0] and report.attached_gpus == 2

    def no_library():
        raise FakeNVMLError(12)  # NVML_ERROR_LIBRARY_NOT_FOUND

    nvml = fake_nvml()
    nvml.nvmlInit = no_library
    assert local_gpu.nvml_report(nvml) is None


def test_real_pynvml_on_this_machine_gives_a_report_or_none():
    """Here (no driver) NVML does not load; on a GPU runner this reads the real GPUs."""
    result = local_gpu.nvml_report()
    assert result is None or result[0].attached_gpus >= 1
