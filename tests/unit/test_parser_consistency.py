"""Truncated or inconsistent tool output is an error, never a smaller healthy node (issue 31, item 2).

``nvidia-smi -L`` and ``nvlink -s`` print no total, so output cut between two GPUs reads as fewer GPUs unless it is
compared with what the node should have; ``-q`` and ``-q -x`` say ``Attached GPUs``. Counters cannot be negative.
Every parser raises its documented error (a ValueError subclass) on malformed input, whatever it is. And every
check looks at the command's exit status before its output: a command that timed out may have printed the first
GPUs whole.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from pathlib import Path

import pytest
from emulated import Machine

from gpuready.conformance.checks import CannotCheck, Output, diag, gpu, host
from gpuready.nvidia import cdi, containerd_config, dcgm, dcgm_diag, nvbandwidth, smi
from gpuready.nvidia.errors import ParseError
from gpuready.spec import load_fleet

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


def read(relative: str) -> str:
    return (FIXTURES / relative).read_text()


def out(rc: int, stdout: str, stderr: str = "") -> Output:
    return Output(rc, stdout, stderr)


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    """The lab's emulated 8 x H100 SXM node: consistent -q -x, -L, nvlink -s, dcgmi and nvbandwidth outputs."""
    return Machine(tmp_path_factory.mktemp("h100"), "h100-sxm-8", persistence=True, fabric_up=True)


@pytest.fixture(scope="module")
def emulated(machine) -> dict[str, Output]:
    def run(tool: str, *args: str) -> Output:
        done = machine.run(tool, *args)
        return Output(done.returncode, done.stdout, done.stderr)

    return {
        "xml": run("nvidia-smi", "-q", "-x"),
        "list": run("nvidia-smi", "-L"),
        "nvlink": run("nvidia-smi", "nvlink", "-s"),
        "dcgmi": run("dcgmi", "diag", "-r", "2", "-j"),
        "nvbandwidth": run("nvbandwidth", *shlex.split(nvbandwidth.NVBANDWIDTH_COMMAND)[1:]),
    }


def first_gpus(text: str, count: int) -> str:
    """``text`` cut cleanly before its line ``GPU <count>: ...`` (a listing cut short at a GPU boundary)."""
    lines = text.splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if line.startswith(f"GPU {count}:"))
    return "".join(lines[:cut])


# --- nvidia-smi -L ------------------------------------------------------------------------------------------------


def test_list_cut_at_a_gpu_boundary_is_refused_when_the_count_is_known():
    listing = read("nvidia-smi-mig/nvidia_gpu_exporter__list_gpus.txt")
    assert len(smi.parse_list(listing, expected=8)) == 8
    short = first_gpus(listing, 4)
    assert len(smi.parse_list(short)) == 4  # no total in -L: alone, it cannot tell
    with pytest.raises(ParseError, match=r"nvidia-smi -L: 4 GPU\(s\) listed .* but 8 expected"):
        smi.parse_list(short, expected=8)


def test_list_with_a_repeated_gpu_is_refused():
    listing = read("nvidia-smi-mig/nvidia_gpu_exporter__list_gpus.txt")
    first = listing.splitlines(keepends=True)[0]
    with pytest.raises(ParseError, match="listed after GPU"):
        smi.parse_list(listing + first)


def test_cdi_check_compares_the_listing_with_the_report(emulated):
    """The CDI check reads -L: a listing cut short is named against -q -x's GPUs, not judged as a smaller node."""
    spec = out(
        0, f"{cdi.FILE_MARK}{cdi.SPEC_PATH}\n" + "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n"
    )
    short = out(0, first_gpus(emulated["list"].stdout, 4))
    with pytest.raises(CannotCheck, match=r"4 GPU\(s\) listed .* but 8 expected"):
        host.cdi_spec(spec, short, emulated["xml"])


# --- nvidia-smi nvlink -s -----------------------------------------------------------------------------------------


def test_nvlink_cut_at_a_gpu_boundary_is_refused_when_the_count_is_known():
    status = read("nvidia-smi-text/gpud__nvidia-smi.nvlink.status.a100")
    assert len(smi.parse_nvlink_report(status, expected=8)) == 8
    short = first_gpus(status, 4)
    with pytest.raises(ParseError, match=r"nvidia-smi nvlink -s: 4 GPU\(s\) listed .* but 8 expected"):
        smi.parse_nvlink_report(short, expected=8)
    with pytest.raises(ParseError, match="8 expected"):
        smi.parse_nvlink_status(short, expected=8)


def test_nvlink_check_fails_half_a_listing(h100, emulated):
    report = host.smi_report(emulated["xml"])
    assert len(report.gpus) == 8
    assert gpu.nvlink(h100, report, emulated["nvlink"]) == []
    (problem,) = gpu.nvlink(h100, report, out(0, first_gpus(emulated["nvlink"].stdout, 4)))
    assert "`nvidia-smi nvlink -s`" in problem and "but 8 expected" in problem


def test_nvlink_check_looks_at_the_exit_status_first(h100, emulated):
    """Timed out (124): even the first GPUs printed whole are not judged."""
    report = host.smi_report(emulated["xml"])
    for stdout in (emulated["nvlink"].stdout, first_gpus(emulated["nvlink"].stdout, 4)):
        (problem,) = gpu.nvlink(h100, report, out(124, stdout, "nvidia-smi nvlink -s: no answer within 30 s"))
        assert problem.startswith("`nvidia-smi nvlink -s` timed out (exit 124)")
    (problem,) = gpu.nvlink(h100, report, out(255, emulated["nvlink"].stdout))
    assert "failed (exit 255)" in problem


# --- nvidia-smi -q / -q -x: Attached GPUs -------------------------------------------------------------------------

QUERY_8 = "nvidia-smi-text/gpud__nvidia-smi-query.535.183.01.out.0.valid"


def test_text_query_cut_at_a_gpu_boundary_is_refused():
    text = read(QUERY_8)
    assert len(smi.parse_query_text(text).gpus) == 8
    blocks = [m.start() for m in re.finditer(r"(?m)^GPU 0000", text)]
    short = text[: blocks[4]]
    with pytest.raises(ParseError, match="attached GPUs says 8 but 4 are listed"):
        smi.parse_query_text(short)


def test_text_query_missing_the_gpus_nvidia_smi_could_not_reach_is_read():
    text = read(QUERY_8)
    blocks = [m.start() for m in re.finditer(r"(?m)^GPU 0000", text)]
    lost = "Unable to determine the device handle for GPU0000:9A:00.0: Unknown Error\n"
    report = smi.parse_query_text(text[: blocks[7]] + lost)
    assert (report.attached_gpus, len(report.gpus)) == (8, 7)
    assert len(smi.parse_query_text(text[: blocks[7]], unlisted=1).gpus) == 7
    with pytest.raises(ParseError, match="the report of 1 GPU"):
        smi.parse_query_text(text[: blocks[6]] + lost)


def test_xml_query_listing_fewer_gpus_than_attached_is_refused(emulated):
    xml = emulated["xml"].stdout
    assert len(smi.parse_query_xml(xml).gpus) == 8
    with pytest.raises(ParseError, match="attached GPUs says 9 but 8 are listed"):
        smi.parse_query_xml(
            xml.replace("<attached_gpus>8</attached_gpus>", "<attached_gpus>9</attached_gpus>")
        )
    # a whole <gpu> element missing (well-formed XML, one GPU short)
    first = re.search(r"(?s)\s*<gpu id=.*?</gpu>", xml)
    assert first is not None
    with pytest.raises(ParseError, match="the report of 1 GPU"):
        smi.parse_query_xml(xml[: first.start()] + xml[first.end() :])


def test_smi_checks_look_at_the_exit_status_first(emulated):
    xml = emulated["xml"].stdout
    timed_out = out(124, xml, "nvidia-smi -q -x: no answer within 30 s (--command-timeout)")
    with pytest.raises(CannotCheck, match="timed out"):
        host.smi_report(timed_out)
    assert host.nvidia_smi_runs(timed_out) == [
        "`nvidia-smi -q -x` timed out (exit 124): nvidia-smi -q -x: no answer within 30 s (--command-timeout)"
    ]
    # exit 15: a GPU is lost; the others are reported, and the lost one is counted from its line
    lost = "Unable to determine the device handle for GPU0000:18:00.0: Unknown Error\n"
    one_gone = xml.replace("<attached_gpus>8</attached_gpus>", "<attached_gpus>9</attached_gpus>")
    assert len(host.smi_report(out(15, one_gone, lost)).gpus) == 8
    assert host.nvidia_smi_runs(out(15, one_gone, lost)) == []
    assert "the report of 1 GPU" in host.nvidia_smi_runs(out(15, one_gone, ""))[0]
    assert len(host.smi_report(out(15, lost + one_gone)).gpus) == 8  # the line on stdout, before the XML


def test_toolkit_version_looks_at_the_exit_status():
    (problem,) = host.toolkit_version(
        load_fleet(str(REPO / "inventory" / "example.py")).nodes["gpu-train-01.prod.example.com"],
        out(124, "NVIDIA Container Toolkit CLI version 1.20.0\n", "timed out"),
    )
    assert problem.startswith("`nvidia-ctk --version` timed out (exit 124)")
    with pytest.raises(CannotCheck):
        host.toolkit_security(out(124, "NVIDIA Container Toolkit CLI version 1.17.3\n"))


def test_mig_layout_looks_at_the_exit_status(fleet):
    node = fleet.nodes["gpu-infer-a100-01.prod.example.com"]
    lgi = read("nvidia-smi-mig/openforbc__a100-pcie-40gb_mig-lgi.txt")
    report = smi.SmiReport("580.178.04", None, 0, ())
    problems = gpu.mig_layout(node, report, out(124, lgi, "no answer"))
    assert problems[-1].startswith("`nvidia-smi mig -lgi` timed out (exit 124)")


# --- negative and non-ASCII counters ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>-1</dram_uncorrectable>"),
        ("<retired_count>0</retired_count>", "<retired_count>-3</retired_count>"),
        ("<remapped_row_unc>0</remapped_row_unc>", "<remapped_row_unc>-2</remapped_row_unc>"),
        ("<total>81559 MiB</total>", "<total>-81559 MiB</total>"),
    ],
)
def test_xml_negative_counters_are_errors(emulated, old, new):
    # the emulated H100 has row remapping; the Tesla T4 capture has retired pages
    xml = (
        emulated["xml"].stdout
        if old in emulated["xml"].stdout
        else read("nvidia-smi-xml/telegraf__tesla-t4.xml")
    )
    assert old in xml, old
    with pytest.raises(ParseError, match="negative value"):
        smi.parse_query_xml(xml.replace(old, new, 1))


def test_text_negative_counters_are_errors():
    text = read(QUERY_8)
    field = re.search(r"(?m)^(\s+Uncorrectable Error\s+: )0$", text)  # Remapped Rows
    assert field is not None
    garbled = text[: field.start()] + field.group(1) + "-1" + text[field.end() :]
    with pytest.raises(ParseError, match="negative value '-1'"):
        smi.parse_query_text(garbled)


def test_csv_negative_counters_are_errors():
    fields = ["index", "ecc.errors.uncorrected.volatile.total", "retired_pages.pending"]
    assert smi.parse_query_gpu_csv("0, 0, No\n", fields)[0]["ecc.errors.uncorrected.volatile.total"] == 0
    with pytest.raises(ParseError, match="cannot be below 0"):
        smi.parse_query_gpu_csv("0, -4, No\n", fields)


def test_non_ascii_digits_are_not_numbers(emulated):
    xml = emulated["xml"].stdout
    with pytest.raises(ParseError, match="expected a number"):
        smi.parse_query_xml(
            xml.replace("<total>81559 MiB</total>", "<total>\uff18\uff11\uff15\uff15\uff19 MiB</total>", 1)
        )
    listing = "GPU \u0663: NVIDIA H100 80GB HBM3 (UUID: GPU-63d1e50a-b952-d15c-0740-12bc14859142)\n"
    with pytest.raises(ParseError):
        smi.parse_list(listing)


# --- only the documented error, whatever the input -----------------------------------------------------------------


def diag_document(results: object = None, **extra: object) -> str:
    test = {
        "name": "memory",
        "results": results if results is not None else [{"entity_id": 0, "status": "Pass"}],
    }
    return json.dumps(
        {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [test]}]}, **extra}
    )


@pytest.mark.parametrize(
    "text",
    [
        diag_document(results=5),
        json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": "x", "tests": 7}]}}),
        diag_document(entity_groups=3),
        diag_document(entity_groups=[{"entity_group": "GPU", "entities": 4}]),
        diag_document(results=[{"entity_id": -1, "status": "Pass"}]),
        diag_document(results=[{"gpu_ids": "\u0663", "status": "Pass"}]),
        '{"DCGM Diagnostic": ' + "[" * 5000 + "]" * 5000 + "}",
        '{"DCGM Diagnostic": ' + "[" * 40 + "]" * 40 + "}",
        '{"DCGM Diagnostic": {"version": ' + "9" * 5000 + "}}",
        "{" + "\ud800" + "}",
    ],
)
def test_dcgm_diag_raises_only_diag_error(text):
    with pytest.raises(dcgm_diag.DiagError):
        dcgm_diag.parse_diag_json(text)


def test_diag_check_lets_no_type_error_escape(h100):
    (problem,) = diag.dcgm(h100, out(0, diag_document(results=5)))
    assert "did not run" in problem and "expected a list" in problem


def test_diag_checks_look_at_the_exit_status_first(h100, emulated):
    assert emulated["dcgmi"].rc == 0 and diag.dcgm(h100, emulated["dcgmi"]) == []
    (problem,) = diag.dcgm(h100, out(124, emulated["dcgmi"].stdout, "no answer within 600 s"))
    assert problem.startswith(f"`dcgmi diag -r {h100.diag.dcgm_level}` timed out (exit 124)")
    (problem,) = diag.dcgm(h100, out(226, emulated["dcgmi"].stdout))
    assert "names no failed test" in problem
    copies = emulated["nvbandwidth"]
    problems, _ = diag.host_to_device(h100, copies)
    assert problems == []
    problems, figures = diag.host_to_device(h100, out(124, copies.stdout, "no answer within 600 s"))
    assert figures == [] and "timed out (exit 124)" in problems[0]
    problems, figures = diag.peer(h100, out(1, copies.stdout))
    assert figures == [] and "failed (exit 1) without naming an error" in problems[0]


@pytest.mark.parametrize(
    "text",
    [
        '{"nvbandwidth": ' + "[" * 5000 + "]" * 5000 + "}",
        '{"nvbandwidth": {"testcases": ' + "[" * 40 + "]" * 40 + "}}",
        '{"nvbandwidth": {"x": ' + "1" * 5000 + "}}",
        json.dumps(
            {
                "nvbandwidth": {
                    "testcases": [
                        {
                            "name": nvbandwidth.HOST_TO_DEVICE,
                            "status": "Passed",
                            "bandwidth_matrix": [["\u0661\u0662.\u0665"]],
                        }
                    ]
                }
            }
        ),
    ],
)
def test_nvbandwidth_raises_only_its_error(text):
    with pytest.raises(nvbandwidth.NvbandwidthError):
        nvbandwidth.parse_nvbandwidth_json(text)


@pytest.mark.parametrize(
    "text",
    [
        "GPU  0 Profile ID 14 Placements: {0,,2}:2\n",
        "GPU  0 Profile ID 14 Placements: {}:2\n",
        "GPU  " + "9" * 5000 + " Profile ID 14 Placements: {0}:2\n",
    ],
)
def test_mig_placements_raise_only_parse_error(text):
    with pytest.raises(ParseError):
        smi.parse_mig_lgipp(text)


@pytest.mark.parametrize(
    ("text", "reader"),
    [
        ("version = 2\nplugins = 1\n", containerd_config.nvidia_runtime_of),
        ('version = 2\n[plugins]\n"io.containerd.grpc.v1.cri" = 3\n', containerd_config.nvidia_runtime_of),
        (
            'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\nruntimes = "x"\n',
            containerd_config.nvidia_runtime_of,
        ),
        (
            'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\ncdi_spec_dirs = 5\n',
            containerd_config.cdi_settings,
        ),
        ("version = true\n", containerd_config.cdi_settings),
        ("a = " + "[" * 5000 + "]" * 5000 + "\n", containerd_config.cdi_settings),
    ],
)
def test_containerd_readers_raise_only_their_error(text, reader):
    with pytest.raises(containerd_config.ContainerdConfigError):
        reader(text)


def test_dcgm_metrics_with_a_huge_timestamp_raise_parse_error():
    """Found by bench/fuzz_parsers.py: OverflowError on a 400-digit timestamp or value."""
    with pytest.raises(ParseError, match="not Prometheus text format"):
        dcgm.parse_dcgm_metrics('DCGM_FI_DEV_SM_CLOCK{gpu="0"} 1 ' + "9" * 400 + "\n")
    with pytest.raises(ParseError, match="not a number"):
        dcgm.parse_dcgm_metrics('DCGM_FI_DEV_SM_CLOCK{gpu="0"} ' + "9" * 400 + "\n")


@pytest.mark.parametrize(
    "body",
    ["[" * 5000 + "]" * 5000, "cdiVersion: " + "9" * 5000 + "\nkind: nvidia.com/gpu\ndevices: []"],
)
def test_cdi_specs_nested_too_deep_or_with_huge_numbers_raise_spec_error(body):
    """The huge number was found by bench/fuzz_parsers.py (PyYAML's int() raised a bare ValueError)."""
    with pytest.raises(cdi.SpecError):
        cdi.parse_specs(f"{cdi.FILE_MARK}/etc/cdi/nvidia.yaml\n{body}\n")


def test_parsers_refuse_what_is_not_text():
    for parse in (smi.parse_list, smi.parse_query_xml, smi.parse_nvlink_report, smi.parse_mig_lgi):
        with pytest.raises(ParseError, match="expected the output as text"):
            parse(None)  # type: ignore[arg-type]


def test_dataclass_fixture_node_is_nvswitch(h100):
    """The checks above need the example's H100 node to have NVSwitch (nvlink applies)."""
    assert dataclasses.replace(h100).nvswitch
