"""``nvbandwidth -j`` reader: a real capture (tests/fixtures/SOURCES.md) and documents in the layout of
nvbandwidth's json_output.cpp (v0.8) for what the capture does not show (several GPUs, errors)."""

from __future__ import annotations

import ctypes
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gpuready.conformance.cuda import bandwidth as cuda_bandwidth
from gpuready.nvidia import nvbandwidth
from gpuready.nvidia.errors import ParseError
from gpuready.nvidia.nvbandwidth import (
    NVBANDWIDTH_COMMAND,
    BandwidthReport,
    NvbandwidthError,
    parse_nvbandwidth_json,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "nvbandwidth" / "dcgm__verbose-full-output.json"


def document(*testcases: dict, **top: object) -> str:
    body = {
        "CUDA Runtime Version": 13000,
        "Driver Version": "580.178.04",
        "git_version": "v0.8",
        "version": "v0.8",
    }
    body.update(top)
    if testcases:
        body["testcases"] = list(testcases)
    return json.dumps({"nvbandwidth": body}, indent="\t", sort_keys=True)


def passed(name: str, *rows: list[str]) -> dict:
    return {
        "name": name,
        "status": "Passed",
        "bandwidth_description": "memcpy CE",
        "bandwidth_matrix": list(rows),
        "sum": 0.0,
    }


H2D = nvbandwidth.HOST_TO_DEVICE
D2H = nvbandwidth.DEVICE_TO_HOST
READ = nvbandwidth.DEVICE_TO_DEVICE_READ
WRITE = nvbandwidth.DEVICE_TO_DEVICE_WRITE


def test_real_capture_one_gpu() -> None:
    report = parse_nvbandwidth_json(FIXTURE.read_text(encoding="utf-8"))
    assert report.driver_version == "565.02"
    assert report.host_to_device == {0: 12.3964}
    assert report.device_to_host == {0: 13.2001}
    assert report.peer == {}
    assert report.errors == ()
    assert len(report.testcases) == 32
    assert report.testcases[:2] == (H2D, D2H)
    assert READ in report.waived and WRITE in report.waived
    assert "device_to_device_latency_sm" in report.waived
    assert report.devices == ()  # v0.5 had no "GPU Device list"


def test_eight_gpus_with_na_diagonal_and_an_impossible_pair() -> None:
    h2d = [f"{53 + i / 10:g}" for i in range(8)]
    peer_rows = [["N/A" if r == c else f"{370 + r + c / 10:g}" for c in range(8)] for r in range(8)]
    peer_rows[6][7] = "N/A"
    devices = [
        f"{i}: NVIDIA H100 80GB HBM3 (00000000:{b}:00): (node-3)"
        for i, b in enumerate(["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"])
    ]
    text = document(
        passed(H2D, h2d),
        passed(D2H, list(reversed(h2d))),
        passed(READ, *peer_rows),
        **{"GPU Device list": devices},
    )
    report = parse_nvbandwidth_json(text)
    assert report.host_to_device == {i: 53 + i / 10 for i in range(8)}
    assert report.device_to_host[0] == 53.7
    assert len(report.peer) == 8 * 7 - 1
    assert (6, 7) not in report.peer and (7, 6) in report.peer
    assert report.peer[(2, 5)] == 372.5
    assert all(r != c for r, c in report.peer)
    assert report.devices == tuple(devices)
    assert report.errors == ()
    assert report.driver_version == "580.178.04"


def test_write_testcase_is_used_when_read_is_absent_and_read_wins_when_both() -> None:
    write = passed(WRITE, ["N/A", "80"], ["81", "N/A"])
    read = passed(READ, ["N/A", "90"], ["91", "N/A"])
    assert parse_nvbandwidth_json(document(write)).peer == {(0, 1): 80.0, (1, 0): 81.0}
    assert parse_nvbandwidth_json(document(write, read)).peer == {(0, 1): 90.0, (1, 0): 91.0}


def test_host_gpu_that_could_not_be_measured_is_absent() -> None:
    report = parse_nvbandwidth_json(document(passed(H2D, ["26.1", "N/A", "26.3"])))
    assert report.host_to_device == {0: 26.1, 2: 26.3}


def test_cuinit_failure_is_a_report_with_the_error() -> None:
    # What nvbandwidth prints with -j when CU_ASSERT(cuInit(0)) fails: version keys and the error, no testcases.
    error = (
        "[CUDA_ERROR_SYSTEM_DRIVER_MISMATCH] system has unsupported display driver / cuda driver combination in "
        "expression cuInit(0) in int main(int, char**)() : /opt/nvbandwidth/nvbandwidth.cpp:270\n"
    )
    text = json.dumps(
        {"nvbandwidth": {"error": error, "git_version": "v0.8", "version": "v0.8"}}, indent="\t"
    )
    report = parse_nvbandwidth_json(text)
    assert report == BandwidthReport({}, {}, {}, (f"nvbandwidth: {error.strip()}",), None)
    assert "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH" in report.errors[0]


def test_unknown_testcase_running_and_error_statuses_are_errors() -> None:
    text = document(
        passed(H2D, ["26"]),
        {"name": "no_such_case", "status": "ERROR"},
        {"name": D2H, "status": "Error", "error": "cuMemcpyAsync failed"},
        {"name": READ, "status": "Running"},
        error="[CUDA_ERROR_LAUNCH_FAILED] unspecified launch failure in expression cuStreamSynchronize(stream)",
    )
    report = parse_nvbandwidth_json(text)
    assert report.host_to_device == {0: 26.0}
    assert report.device_to_host == {} and report.peer == {}
    assert report.errors[0].startswith("nvbandwidth: [CUDA_ERROR_LAUNCH_FAILED]")
    assert report.errors[1:] == (
        "no_such_case: not a testcase of this nvbandwidth",
        f"{D2H}: Error: cuMemcpyAsync failed",
        f"{READ}: Running",
    )


def test_lines_around_the_document_are_ignored() -> None:
    # DCGM's reader has to skip driver/runtime warnings printed on the same stdout; so does this one.
    text = "WARNING: something {odd}\n" + FIXTURE.read_text(encoding="utf-8") + "\nWARNING: after }}}\n"
    assert parse_nvbandwidth_json(text).host_to_device == {0: 12.3964}


def test_warning_is_not_an_error() -> None:
    report = parse_nvbandwidth_json(
        document(passed(H2D, ["20"]), warning="NOTE: You have chosen a buffer size...")
    )
    assert report.errors == ()


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("", "empty output"),
        (
            "nvbandwidth Version: v0.8\nBuilt from Git version: v0.8\n\nCUDA Runtime Version: 13000\n",
            "no JSON object; found 'nvbandwidth Version: v0.8'",
        ),
        ('{"nvbandwidth": {"testcases": [', "unreadable JSON"),
        ('{"nvbandwith": {}}', "found ['nvbandwith']"),
        ("[1, 2]", "no JSON object; found '[1, 2]'"),
        (document(passed(H2D, ["fast"])), "bandwidth_matrix[0][0] is 'fast'"),
        (document(passed(H2D, [26.0])), "bandwidth_matrix[0][0] is 26.0"),
        (document(passed(H2D, ["-1"])), "expected a finite bandwidth"),
        (document(passed(H2D, ["nan"])), "expected a finite bandwidth"),
        (document(passed(H2D, ["26"], ["27"])), "has 2 rows, expected 1 (the CPU)"),
        (document(passed(READ, ["N/A", "1", "2"], ["3", "N/A", "4"])), "is 2x3, expected a square"),
        (document(passed(READ, ["N/A", "1"], ["3"])), "rows have [2, 1] cells"),
        (document({"name": H2D, "status": "Passed"}), "its bandwidth_matrix is None"),
        (document(), "no testcases and no error"),
        (document(passed(H2D, ["1"]), **{"GPU Device list": "0: x"}), "'GPU Device list' is '0: x'"),
        (json.dumps({"nvbandwidth": {"testcases": {"a": 1}}}), "testcases is {'a': 1}"),
        (
            json.dumps({"nvbandwidth": {"testcases": [{"status": "Passed"}]}}),
            "testcases[0] is {'status': 'Passed'}",
        ),
    ],
)
def test_unreadable_output_names_what_was_found(text: str, found: str) -> None:
    with pytest.raises(NvbandwidthError) as info:
        parse_nvbandwidth_json(text)
    assert found in str(info.value)
    assert str(info.value).startswith("nvbandwidth -j: ")
    assert isinstance(info.value, ParseError) and isinstance(info.value, ValueError)


def test_command_runs_the_three_copy_engine_testcases_with_one_t() -> None:
    argv = shlex.split(NVBANDWIDTH_COMMAND)
    assert argv[:3] == ["nvbandwidth", "-j", "-t"]
    # boost::program_options rejects a second -t ("cannot be specified more than once"): one -t, several names.
    assert argv.count("-t") == 1
    assert argv[3:] == [H2D, D2H, READ]


# ---- gpuready.conformance.cuda.bandwidth prints the same document ------------------------------------------------
def _has_libcuda() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_has_libcuda(), reason="this machine has libcuda.so.1: the module would measure for real")
def test_cuda_bandwidth_without_libcuda_exits_no_libcuda_with_one_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gpuready.conformance.cuda.bandwidth"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == cuda_bandwidth.NO_LIBCUDA == 3
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "libcuda.so.1" in result.stderr


def test_gbps_from_event_timings() -> None:
    mib256 = 256 * 1024 * 1024
    # 8 copies of 256 MiB in 40 ms: 53.687 GB/s (10^9 bytes per second)
    assert cuda_bandwidth.gbps(mib256, 8, 40.0) == pytest.approx(53.687091, rel=1e-6)
    assert cuda_bandwidth.median_gbps(mib256, 8, [40.0, 80.0, 41.0]) == pytest.approx(
        cuda_bandwidth.gbps(mib256, 8, 41.0)
    )
    with pytest.raises(ValueError):
        cuda_bandwidth.gbps(mib256, 8, 0.0)
    with pytest.raises(ValueError):
        cuda_bandwidth.median_gbps(mib256, 8, [])


def test_cuda_bandwidth_document_reads_back_with_the_parser() -> None:
    mib256 = 256 * 1024 * 1024
    ms = {"h2d": [40.1, 40.0, 40.3], "d2h": [39.0, 39.2, 39.1], "peer": [5.6, 5.7, 5.65]}
    m = cuda_bandwidth.Measurements(
        devices=[
            "NVIDIA H100 80GB HBM3 (00000000:18:00)",
            "NVIDIA H100 80GB HBM3 (00000000:2a:00)",
            "NVIDIA H100 80GB HBM3 (00000000:3a:00)",
        ]
    )
    for d in range(3):
        m.host_to_device[d] = cuda_bandwidth.median_gbps(mib256, 8, ms["h2d"])
        m.device_to_host[d] = cuda_bandwidth.median_gbps(mib256, 8, ms["d2h"])
    for pair in [(0, 1), (1, 0)]:  # GPU 2 cannot reach the others
        m.peer_pairs.add(pair)
        m.peer[pair] = cuda_bandwidth.median_gbps(mib256, 8, ms["peer"])
    doc = cuda_bandwidth.build_document(m, driver_version="580.178.04", cuda_version=13000, hostname="gpu-7")
    report = parse_nvbandwidth_json(cuda_bandwidth.render(doc))
    assert report.errors == () and report.waived == ()
    assert report.driver_version == "580.178.04"
    assert report.testcases == (H2D, D2H, READ)
    assert report.host_to_device == {d: pytest.approx(53.5532, abs=1e-4) for d in range(3)}
    assert report.device_to_host == {d: pytest.approx(54.9229, abs=1e-4) for d in range(3)}
    assert report.peer == {(0, 1): pytest.approx(380.086, abs=1e-3), (1, 0): pytest.approx(380.086, abs=1e-3)}
    assert report.devices[2] == "2: NVIDIA H100 80GB HBM3 (00000000:3a:00): (gpu-7)"
    body = doc["nvbandwidth"]
    assert body["testcases"][2]["bandwidth_matrix"][2] == ["N/A", "N/A", "N/A"]
    assert (
        body["testcases"][0]["bandwidth_description"] == "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)"
    )


def test_cuda_bandwidth_document_one_gpu_and_failures() -> None:
    one = cuda_bandwidth.Measurements(devices=["NVIDIA L4 (00000000:00:03)"], host_to_device={0: 25.0})
    one.errors[D2H] = (
        "cuMemcpyDtoHAsync_v2 failed: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)"
    )
    report = parse_nvbandwidth_json(
        cuda_bandwidth.render(
            cuda_bandwidth.build_document(one, driver_version=None, cuda_version=12080, hostname="h")
        )
    )
    assert report.host_to_device == {0: 25.0} and report.device_to_host == {}
    assert report.waived == (READ,)
    assert report.errors == (f"{D2H}: Error: {one.errors[D2H]}",)
    # nothing could start: the top-level error, as nvbandwidth's CU_ASSERT prints it
    failed = cuda_bandwidth.build_document(
        cuda_bandwidth.Measurements(devices=[]),
        driver_version=None,
        cuda_version=None,
        hostname="h",
        error="cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)",
    )
    report = parse_nvbandwidth_json(cuda_bandwidth.render(failed))
    assert report.errors == (
        "nvbandwidth: cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)",
    )
    assert report.testcases == ()
