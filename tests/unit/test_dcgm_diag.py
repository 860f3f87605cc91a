"""``dcgmi diag -j`` reader against real DCGM 3.x and 4.x documents (tests/fixtures/SOURCES.md, "dcgm-diag")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuready.nvidia.dcgm_diag import DiagError, DiagReport, DiagTest, parse_diag_json
from gpuready.nvidia.errors import ParseError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm-diag"
PERSISTENCE = (
    'Persistence Mode: Persistence mode for GPU 0 is disabled. Enable persistence mode by running "nvidia-smi '
    '-i <gpuId> -pm 1 " as root.'
)
SRAM = (
    "Error getting the SRAM Threshold Count for GPU 0. Status = 0. Value = 9223372036854775794. SRAM Threshold "
    "checking was skipped."
)
DEPLOYMENT_3X = [
    "Denylist",
    "NVML Library",
    "CUDA Main Library",
    "Permissions and OS Blocks",
    "Persistence Mode",
    "Environment Variables",
    "Page Retirement/Row Remap",
    "Graphics Processes",
    "Inforom",
]
# What dcgmi prints when nv-hostengine is not running (quoted in public DCGM troubleshooting notes).
HOSTENGINE_DOWN = (
    "Error: unable to establish a connection to the specified host: localhost\n"
    "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def load(name: str) -> DiagReport:
    return parse_diag_json(fixture(name))


# ---- DCGM 4.x ---------------------------------------------------------------------------------------
def test_dcgm_4_5_level2_with_failed_software_test() -> None:
    report = load("glimmer-burnin__gb10-level2-plugins-allowed.json")
    assert report.dcgm_version == "4.5.2"
    assert report.driver_version == "580.82.09"
    assert report.level == 2
    assert report.gpus == (0,)
    assert report.names() == ("software", "memory", "pcie")
    assert [(t.name, t.category, t.gpu, t.status) for t in report.tests] == [
        ("software", "Deployment", 0, "Fail"),
        ("memory", "Hardware", 0, "Pass"),
        ("pcie", "Integration", 0, "Pass"),
    ]
    assert report.failed() == [DiagTest("software", "Deployment", 0, "Fail", (PERSISTENCE,))]
    assert report.warned() == []
    assert report.tests[1].messages == ("Allocated 112427837082 bytes (87.5%)",)
    assert report.tests[2].messages == (
        "GPU to Host bandwidth:\t\t58.62 GB/s",
        "Host to GPU bandwidth:\t\t58.88 GB/s",
        "bidirectional bandwidth:\t58.69 GB/s",
        "GPU to Host latency:\t\t1.563 us",
        "Host to GPU latency:\t\t1.740 us",
        "bidirectional latency:\t\t3.078 us",
    )


def test_dcgm_4_5_level2_gated_plugins_are_skips() -> None:
    report = load("glimmer-burnin__gb10-level2-plugins-gated.json")
    assert report.dcgm_version == "4.5.2"
    assert [(t.name, t.gpu, t.status, t.messages) for t in report.tests] == [
        ("software", 0, "Fail", (PERSISTENCE,)),
        ("memory", 0, "Skip", ()),
        ("pcie", 0, "Skip", ()),
    ]
    assert [t.name for t in report.failed()] == ["software"]
    assert report.level == 2  # skipped tests still show what was asked for


def test_dcgm_4_2_level1() -> None:
    report = load("glimmer-burnin__gb10-level1.json")
    assert (report.dcgm_version, report.driver_version, report.level, report.gpus) == (
        "4.2.3",
        "580.82.09",
        1,
        (0,),
    )
    assert report.tests == (DiagTest("software", "Deployment", 0, "Fail", (PERSISTENCE,)),)
    assert report.failed() == list(report.tests)


def test_caller_given_level_wins() -> None:
    assert parse_diag_json(fixture("glimmer-burnin__gb10-level1.json"), level=3).level == 3


def test_summary_failure_without_failing_entity_is_kept() -> None:
    """DCGM 4.2.3 failed pcie as a whole while every GPU line said Pass (NVIDIA/DCGM#253)."""
    doc = json.loads(fixture("glimmer-burnin__gb10-level2-plugins-allowed.json"))
    pcie = doc["DCGM Diagnostic"]["test_categories"][2]["tests"][0]
    internal = (
        "There was an internal error during the test: 'A child process (152) exited with non-zero status 1'"
    )
    pcie["test_summary"] = {"status": "Fail", "warnings": [{"error_id": 44, "warning": internal}]}
    report = parse_diag_json(json.dumps(doc))
    assert [(t.name, t.gpu, t.status) for t in report.tests if t.name == "pcie"] == [
        ("pcie", 0, "Pass"),
        ("pcie", None, "Fail"),
    ]
    assert [(t.name, t.gpu, t.messages) for t in report.failed()] == [
        ("software", 0, (PERSISTENCE,)),
        ("pcie", None, (internal,)),
    ]


def test_warn_is_not_a_failure() -> None:
    """dcgmi exits 0 when the worst result is a warning; failed() follows DCGM's verdict."""
    doc = json.loads(fixture("glimmer-burnin__gb10-level2-plugins-allowed.json"))
    software = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]
    software["results"][0]["status"] = "Warn"
    software["test_summary"]["status"] = "Warn"
    report = parse_diag_json(json.dumps(doc))
    assert report.failed() == []
    assert [(t.name, t.status) for t in report.warned()] == [("software", "Warn")]


def test_banner_before_the_document_is_skipped() -> None:
    text = "Successfully ran diagnostic for group.\n" + fixture("glimmer-burnin__gb10-level1.json")
    assert parse_diag_json(text).names() == ("software",)


# ---- DCGM 2.x/3.x -----------------------------------------------------------------------------------
def test_dcgm_3x_level1_all_pass() -> None:
    report = load("virtualclient__DCGMIDiag_r1_results.json")
    assert report.names() == tuple(DEPLOYMENT_3X)
    assert all(t.category == "Deployment" and t.gpu is None and t.status == "Pass" for t in report.tests)
    assert (report.dcgm_version, report.driver_version, report.level, report.gpus) == (None, None, 1, ())
    assert report.failed() == []


def test_dcgm_3x_failed_cuda_library_and_per_gpu_tests() -> None:
    report = load("virtualclient__DCGMIIncorrectresults.json")
    assert report.names() == (*DEPLOYMENT_3X, "PCIe", "GPU Memory")
    assert report.level == 2
    assert report.failed() == [
        DiagTest(
            "CUDA Main Library",
            "Deployment",
            None,
            "Fail",
            (
                "Cannot open library libcuda.so: 'libcuda.so: cannot open shared object file: No such file or "
                "directory' Check for the existence of the library and set LD_LIBRARY_PATH if needed.",
            ),
        )
    ]
    pcie, memory = report.tests[-2:]
    assert (pcie.name, pcie.category, pcie.gpu, pcie.status) == ("PCIe", "Integration", 0, "Pass")
    assert "GPU to Host bandwidth:\t\t13.15 GB/s" in pcie.messages[0]
    assert (memory.name, memory.category, memory.gpu, memory.status) == ("GPU Memory", "Hardware", 0, "Pass")
    assert memory.messages == ("GPU 0 Allocated 15206918958 bytes (97.3%)",)
    assert report.for_gpu(0) == [pcie, memory]


def test_nvvs_style_results_with_gpu_list_and_warning_objects() -> None:
    """NVVS's own JSON: upper-case statuses, "gpu_ids" lists for software tests, warning objects, null holes."""
    doc = {
        "DCGM GPU Diagnostic": {
            "test_categories": [
                {
                    "category": "Deployment",
                    "tests": [
                        {"name": "Denylist", "results": [{"gpu_ids": "0,1,2,3", "status": "PASS"}]},
                        None,
                        {
                            "name": "Persistence Mode",
                            "results": [
                                {
                                    "gpu_ids": "0,1,2,3",
                                    "status": "FAIL",
                                    "warnings": [
                                        {"warning": "Persistence mode for GPU 1 is disabled.", "error_id": 29}
                                    ],
                                }
                            ],
                        },
                    ],
                },
                {
                    "category": "Hardware",
                    "tests": [{"name": "GPU Memory", "results": [{"gpu_ids": "2", "status": "SKIPPED"}]}],
                },
            ],
            "version": "3.3.5",
        }
    }
    report = parse_diag_json(json.dumps(doc))
    assert report.dcgm_version == "3.3.5"
    assert [(t.name, t.gpu, t.status, t.messages) for t in report.tests] == [
        ("Denylist", None, "Pass", ()),
        ("Persistence Mode", None, "Fail", ("Persistence mode for GPU 1 is disabled.",)),
        ("GPU Memory", 2, "Skip", ()),
    ]


# ---- not a result document --------------------------------------------------------------------------
def test_hostengine_not_running_is_a_diag_error() -> None:
    with pytest.raises(DiagError) as err:
        parse_diag_json(HOSTENGINE_DOWN)
    message = str(err.value)
    assert "nv-hostengine is not reachable" in message
    assert "unable to establish a connection to the specified host: localhost" in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "printed nothing"),
        ("Segmentation fault (core dumped)\n", "no JSON object"),
        ('{"DCGM Diagnostic": {"test_categories": [', "JSON is broken"),
        ('{"driver": "580.178.04"}', "top-level keys: 'driver'"),
        ('[1, 2]\n{"x": 1}', "no 'DCGM Diagnostic'"),
        ('{"DCGM Diagnostic": {"version": "4.2.3"}}', "no test_categories"),
        ('{"DCGM Diagnostic": {"test_categories": []}}', "holds no test results"),
        (
            '{"DCGM Diagnostic": {"runtime_error": "Unable to run diagnostic on unsupported GPU 0."}}',
            "did not run",
        ),
        (
            '{"DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [{"name": "software", '
            '"results": [{"entity_group": "GPU", "entity_id": 0, "status": "Inconclusive"}]}]}]}}',
            "unknown status 'Inconclusive'",
        ),
    ],
)
def test_garbage_raises_diag_error_saying_what_was_found(text: str, expected: str) -> None:
    with pytest.raises(DiagError) as err:
        parse_diag_json(text)
    assert expected in str(err.value)


def test_diag_error_is_a_value_error() -> None:
    assert issubclass(DiagError, ParseError)
    assert issubclass(DiagError, ValueError)
