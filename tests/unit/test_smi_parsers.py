"""nvidia-smi readers against real captures (tests/fixtures/SOURCES.md) with exact expected values."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuready.nvidia.errors import ParseError
from gpuready.nvidia.smi import (
    ComputeInstanceProfileRow,
    ComputeInstanceRow,
    GpuInfo,
    GpuInstancePlacements,
    GpuInstanceProfileRow,
    GpuInstanceRow,
    ListedGpu,
    ListedMigDevice,
    MigDevice,
    NvLink,
    NvLinkGpu,
    RemappedRows,
    parse_list,
    parse_mig_lci,
    parse_mig_lcip,
    parse_mig_lgi,
    parse_mig_lgip,
    parse_mig_lgipp,
    parse_nvlink_report,
    parse_nvlink_status,
    parse_query_gpu_csv,
    parse_query_text,
    parse_query_xml,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BAR = "#" * 80
H100 = "nvidia_gpu_exporter__capture__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
H100_MIG = "nvidia_gpu_exporter__capture__linux-x86_64__nvidia-h100-mig__590.48.01.txt"
L40S = "nvidia_gpu_exporter__capture__linux-x86_64__nvidia-l40s__595.80.txt"
CAPTURES = (H100, H100_MIG, L40S)
MASKED_UUID = "GPU-00000000-0000-0000-0000-000000000000"
GARBAGE = "\x00\xff\xfe garbage \x1b[31m{}<>\n\x07\x08"


def read(relative: str) -> str:
    return (FIXTURES / relative).read_text()


def capture_section(name: str, title: str) -> tuple[str, str]:
    """(command line, body) of the ``# <title>`` section of a ``####``-separated capture."""
    lines = read(f"captures/{name}").split("\n")
    for i, line in enumerate(lines):
        if line == f"# {title}" and lines[i - 1] == BAR:
            header_end = lines.index(BAR, i)
            command = next((row[4:] for row in lines[i:header_end] if row.startswith("# $ ")), "")
            body_end = lines.index(BAR, header_end + 1) if BAR in lines[header_end + 1 :] else len(lines)
            return command, "\n".join(lines[header_end + 1 : body_end])
    raise AssertionError(f"no section {title!r} in {name}")


def cut_mid_line(text: str) -> str:
    """The first half of ``text``, ending in the middle of a line (what a dropped SSH session leaves)."""
    middle = len(text) // 2
    start = text.rfind("\n", 0, middle) + 1
    end = text.find("\n", middle)
    end = len(text) if end == -1 else end
    while end - start < 4:  # a short line: move on to the next longer one
        start = end + 1
        end = text.find("\n", start)
    return text[: start + (end - start) // 2]


def cut_at_line(text: str, keep_fraction: float = 0.5) -> str:
    """The first lines of ``text``, ending cleanly at a line boundary."""
    lines = text.splitlines(keepends=True)
    return "".join(lines[: int(len(lines) * keep_fraction)])


# --------------------------------------------------------------------------------------------------
# nvidia-smi -q -x
# --------------------------------------------------------------------------------------------------

NO_REMAP = RemappedRows(correctable=0, uncorrectable=0, pending=False, failure=False)


def _a100_mig(index: int, gi: int) -> MigDevice:
    return MigDevice(
        index=index, gpu_instance_id=gi, compute_instance_id=0, memory_total_mib=19968, sm_count=14
    )


XML_EXPECTED = {
    "telegraf__a100-sxm4-v12.xml": (
        ("535.54.03", "12.2", 4),
        GpuInfo(
            index=0,
            pci_bus_id="00000000:01:00.0",
            name="NVIDIA A100-SXM4-80GB",
            uuid="GPU-513536b6-7d19-9063-b049-1e69664bb298",
            serial="1650522003820",
            vbios="92.00.36.00.02",
            memory_total_mib=81920,
            memory_used_mib=50,
            memory_free_mib=80999,
            persistence_mode=False,
            mig_mode_current="Enabled",
            mig_mode_pending="Enabled",
            mig_devices=(_a100_mig(0, 3), _a100_mig(1, 4), _a100_mig(2, 5), _a100_mig(3, 6)),
            ecc_mode_current="Enabled",
            ecc_mode_pending="Enabled",
            ecc_uncorrectable_volatile=0,
            ecc_uncorrectable_aggregate=0,
            retired_pages_single_bit=None,
            retired_pages_double_bit=None,
            retired_pages_pending=None,
            remapped_rows=None,
            pcie_link_gen_current=4,
            pcie_link_gen_max=4,
            pcie_link_width_current=16,
            pcie_link_width_max=16,
            clock_event_reasons_active=(),
            temperature_c=27,
            power_draw_w=67.03,
            fabric_state=None,
            fabric_status=None,
            compute_mode="Default",
        ),
    ),
    "telegraf__a10g.xml": (
        ("515.105.01", "11.7", 1),
        GpuInfo(
            index=0,
            pci_bus_id="00000000:00:1E.0",
            name="NVIDIA A10G",
            uuid="GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94",
            serial="0000000000000",
            vbios="94.02.75.00.01",
            memory_total_mib=23028,
            memory_used_mib=22,
            memory_free_mib=22569,
            persistence_mode=False,
            mig_mode_current=None,
            mig_mode_pending=None,
            mig_devices=(),
            ecc_mode_current="Enabled",
            ecc_mode_pending="Enabled",
            ecc_uncorrectable_volatile=0,
            ecc_uncorrectable_aggregate=0,
            retired_pages_single_bit=None,
            retired_pages_double_bit=None,
            retired_pages_pending=None,
            remapped_rows=NO_REMAP,
            pcie_link_gen_current=1,
            pcie_link_gen_max=4,
            pcie_link_width_current=8,
            pcie_link_width_max=16,
            clock_event_reasons_active=("gpu_idle",),
            temperature_c=17,
            power_draw_w=25.58,
            fabric_state=None,
            fabric_status=None,
            compute_mode="Default",
        ),
    ),
    "telegraf__quadro-p2000-v12.xml": (
        ("525.125.06", "12.0", 1),
        GpuInfo(
            index=0,
            pci_bus_id="00000000:17:00.0",
            name="Quadro P2000",
            uuid="GPU-396caaed-39ca-3199-2e68-717cdb786ec6",
            serial="0322218049033",
            vbios="86.06.3F.00.30",
            memory_total_mib=5120,
            memory_used_mib=1,
            memory_free_mib=5051,
            persistence_mode=True,
            mig_mode_current=None,
            mig_mode_pending=None,
            mig_devices=(),
            ecc_mode_current=None,
            ecc_mode_pending=None,
            ecc_uncorrectable_volatile=None,
            ecc_uncorrectable_aggregate=None,
            retired_pages_single_bit=None,
            retired_pages_double_bit=None,
            retired_pages_pending=None,
            remapped_rows=None,
            pcie_link_gen_current=1,
            pcie_link_gen_max=3,
            pcie_link_width_current=8,
            pcie_link_width_max=16,
            clock_event_reasons_active=("gpu_idle",),
            temperature_c=34,
            power_draw_w=4.61,
            fabric_state=None,
            fabric_status=None,
            compute_mode="Default",
        ),
    ),
    "telegraf__rtx-3060-v12.xml": (
        ("570.124.04", "12.8", 1),
        GpuInfo(
            index=0,
            pci_bus_id="00000000:2D:00.0",
            name="NVIDIA GeForce RTX 3060",
            uuid="GPU-d6889ff6-2523-9142-ca3c-1ca3f396a625",
            serial=None,
            vbios="94.04.71.00.69",
            memory_total_mib=12288,
            memory_used_mib=116,
            memory_free_mib=11806,
            persistence_mode=True,
            mig_mode_current=None,
            mig_mode_pending=None,
            mig_devices=(),
            ecc_mode_current=None,
            ecc_mode_pending=None,
            ecc_uncorrectable_volatile=None,
            ecc_uncorrectable_aggregate=None,
            retired_pages_single_bit=None,
            retired_pages_double_bit=None,
            retired_pages_pending=None,
            remapped_rows=None,
            pcie_link_gen_current=1,
            pcie_link_gen_max=4,
            pcie_link_width_current=16,
            pcie_link_width_max=16,
            clock_event_reasons_active=("gpu_idle",),
            temperature_c=42,
            power_draw_w=11.6,
            fabric_state=None,
            fabric_status=None,
            compute_mode="Default",
        ),
    ),
    "telegraf__rtx-3080-v13.xml": (
        ("595.58.03", "13.2", 1),
        GpuInfo(
            index=0,
            pci_bus_id="00000000:0C:00.0",
            name="NVIDIA GeForce RTX 3080",
            uuid="GPU-19d6d965-2acc-f646-00f8-4c76979aabb4",
            serial="REDACTED",
            vbios="94.02.71.40.72",
            memory_total_mib=10240,
            memory_used_mib=9184,
            memory_free_mib=660,
            persistence_mode=False,
            mig_mode_current=None,
            mig_mode_pending=None,
            mig_devices=(),
            ecc_mode_current=None,
            ecc_mode_pending=None,
            ecc_uncorrectable_volatile=None,
            ecc_uncorrectable_aggregate=None,
            retired_pages_single_bit=None,
            retired_pages_double_bit=None,
            retired_pages_pending=None,
            remapped_rows=None,
            pcie_link_gen_current=4,
            pcie_link_gen_max=4,
            pcie_link_width_current=16,
            pcie_link_width_max=16,
            clock_event_reasons_active=(),
            temperature_c=27,
            power_draw_w=139.62,
            fabric_state=None,
            fabric_status=None,
            compute_mode="Default",
        ),
    ),
    "telegraf__rtx-4000-sff-ada-v13.xml": (
        ("595.84", "13.2", 1),
        GpuInfo(
            index=0,
            pci_bus_id="00000000:06:00.0",
            name="NVIDIA RTX 4000 SFF Ada Generation",
            uuid="GPU-37037c3f-65c8-ec4d-24a9-420204ad8026",
            serial="REDACTED",
            vbios="95.04.53.00.01",
            memory_total_mib=20475,
            memory_used_mib=3534,
            memory_free_mib=16482,
            persistence_mode=True,
            mig_mode_current=None,
            mig_mode_pending=None,
            mig_devices=(),
            ecc_mode_current="Disabled",
            ecc_mode_pending="Disabled",
            ecc_uncorrectable_volatile=None,
            ecc_uncorrectable_aggregate=None,
            retired_pages_single_bit=None,
            retired_pages_double_bit=None,
            retired_pages_pending=None,
            remapped_rows=NO_REMAP,
            pcie_link_gen_current=1,
            pcie_link_gen_max=4,
            pcie_link_width_current=16,
            pcie_link_width_max=16,
            clock_event_reasons_active=("gpu_idle",),
            temperature_c=38,
            power_draw_w=8.81,
            fabric_state=None,
            fabric_status=None,
            compute_mode="Default",
        ),
    ),
    "telegraf__tesla-t4.xml": (
        ("515.105.01", "11.7", 1),
        GpuInfo(
            index=0,
            pci_bus_id="00000000:00:1E.0",
            name="Tesla T4",
            uuid="GPU-d37e67a5-91dd-3774-a5cb-99096249601a",
            serial="0000000000000",
            vbios="90.04.84.00.06",
            memory_total_mib=15360,
            memory_used_mib=1032,
            memory_free_mib=13939,
            persistence_mode=False,
            mig_mode_current=None,
            mig_mode_pending=None,
            mig_devices=(),
            ecc_mode_current="Enabled",
            ecc_mode_pending="Enabled",
            ecc_uncorrectable_volatile=0,
            ecc_uncorrectable_aggregate=0,
            retired_pages_single_bit=0,
            retired_pages_double_bit=0,
            retired_pages_pending=False,
            remapped_rows=None,
            pcie_link_gen_current=3,
            pcie_link_gen_max=3,
            pcie_link_width_current=8,
            pcie_link_width_max=16,
            clock_event_reasons_active=(),
            temperature_c=40,
            power_draw_w=26.78,
            fabric_state=None,
            fabric_status=None,
            compute_mode="Default",
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(XML_EXPECTED))
def test_query_xml_reads_every_field_of_each_capture(name: str) -> None:
    (driver, cuda, attached), gpu = XML_EXPECTED[name]
    # the A100 capture was trimmed upstream to one of its 4 GPUs: read it as a query of GPU 0 alone (-i 0)
    report = parse_query_xml(read(f"nvidia-smi-xml/{name}"), unlisted=attached - 1)
    assert (report.driver_version, report.cuda_version, report.attached_gpus) == (driver, cuda, attached)
    assert report.gpus == (gpu,)


def test_query_xml_sums_dram_and_sram_uncorrectable_counts() -> None:
    text = read("nvidia-smi-xml/telegraf__a100-sxm4-v12.xml")
    volatile = "<dram_uncorrectable>0</dram_uncorrectable>"
    assert text.count(volatile) == 2  # volatile, then aggregate
    text = text.replace(volatile, "<dram_uncorrectable>2</dram_uncorrectable>", 1)
    text = text.replace(
        "<sram_uncorrectable>0</sram_uncorrectable>\n                <dram_correctable>",
        "<sram_uncorrectable>5</sram_uncorrectable>\n                <dram_correctable>",
        1,
    )
    gpu = parse_query_xml(text, unlisted=3).gpus[0]  # one of the trimmed capture's 4 GPUs
    assert (gpu.ecc_uncorrectable_volatile, gpu.ecc_uncorrectable_aggregate) == (7, 0)


def test_query_xml_reads_old_double_bit_counters() -> None:
    """Pascal-era DTDs nest the uncorrectable count as <double_bit><total>."""
    text = read("nvidia-smi-xml/telegraf__quadro-p2000-v12.xml")
    pattern = re.compile(r"(<double_bit>.*?<total>)N/A(</total>)", re.S)
    volatile, aggregate = text.split("<aggregate>")
    volatile = pattern.sub(r"\g<1>3\g<2>", volatile, count=1)
    aggregate = pattern.sub(r"\g<1>11\g<2>", aggregate, count=1)
    text = f"{volatile}<aggregate>{aggregate}"
    gpu = parse_query_xml(text).gpus[0]
    assert (gpu.ecc_uncorrectable_volatile, gpu.ecc_uncorrectable_aggregate) == (3, 11)


def test_query_xml_reads_active_throttle_reasons_and_pending_retirement() -> None:
    text = read("nvidia-smi-xml/telegraf__tesla-t4.xml")
    text = text.replace(
        "<clocks_throttle_reason_hw_slowdown>Not Active<", "<clocks_throttle_reason_hw_slowdown>Active<"
    )
    text = text.replace("<pending_retirement>No<", "<pending_retirement>Yes<")
    gpu = parse_query_xml(text).gpus[0]
    assert gpu.clock_event_reasons_active == ("hw_slowdown",)
    assert gpu.retired_pages_pending is True


def test_query_xml_reads_fabric_state_when_reported() -> None:
    text = read("nvidia-smi-xml/telegraf__a100-sxm4-v12.xml")
    text = text.replace("<state>N/A</state>", "<state>In Progress</state>")
    assert parse_query_xml(text, unlisted=3).gpus[0].fabric_state == "In Progress"


@pytest.mark.parametrize(
    ("element", "message"),
    [
        ("uuid", "nvidia-smi -q -x: <gpu> #0 has no <uuid> element"),
        ("product_name", "nvidia-smi -q -x: <gpu> #0 has no <product_name> element"),
    ],
)
def test_query_xml_names_a_missing_required_element(element: str, message: str) -> None:
    text = re.sub(rf"\s*<{element}>[^<]*</{element}>", "", read("nvidia-smi-xml/telegraf__tesla-t4.xml"))
    with pytest.raises(ParseError, match=re.escape(message)):
        parse_query_xml(text)


def test_query_xml_names_the_field_holding_an_unexpected_value() -> None:
    text = read("nvidia-smi-xml/telegraf__tesla-t4.xml").replace(
        "<gpu_temp>40 C<", "<gpu_temp>Unknown Error<"
    )
    with pytest.raises(ParseError, match=r"<gpu> #0 <temperature/gpu_temp>: expected a number in C"):
        parse_query_xml(text)


def test_query_xml_names_the_field_holding_an_unexpected_flag() -> None:
    text = read("nvidia-smi-xml/telegraf__a10g.xml").replace(
        "<remapped_row_pending>No<", "<remapped_row_pending>Maybe<"
    )
    with pytest.raises(
        ParseError,
        match=re.escape("<gpu> #0 <remapped_rows/remapped_row_pending>: expected 'Yes' or 'No', got 'Maybe'"),
    ):
        parse_query_xml(text)


@pytest.mark.parametrize("name", sorted(XML_EXPECTED))
def test_query_xml_rejects_a_capture_cut_in_half(name: str) -> None:
    with pytest.raises(ParseError, match="not well-formed XML"):
        parse_query_xml(cut_mid_line(read(f"nvidia-smi-xml/{name}")))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty output"),
        ("   \n", "empty output"),
        (GARBAGE, "not well-formed XML"),
        ("<html><body>502 Bad Gateway</body></html>", "root element is <html>"),
        ("<nvidia_smi_log><attached_gpus>1</attached_gpus></nvidia_smi_log>", "no <driver_version>"),
        (
            "<nvidia_smi_log><driver_version>1</driver_version><attached_gpus>2</attached_gpus></nvidia_smi_log>",
            "attached GPUs says 2 but no GPU is listed",
        ),
    ],
)
def test_query_xml_rejects_garbage(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=re.escape(message)):
        parse_query_xml(text)


# --------------------------------------------------------------------------------------------------
# nvidia-smi -q (text)
# --------------------------------------------------------------------------------------------------

GPUD_H100_UUIDS = (
    "GPU-566e6f65-c38e-b12f-4824-6944218668b9",
    "GPU-9930d717-21dd-7692-054e-3d0a2bae76b5",
    "GPU-973565ff-45cf-12ea-4e91-33386720f7bb",
    "GPU-6b932a61-abfd-5ea1-b26a-7dea7f2fa601",
    "GPU-726d356b-f548-bbfd-c81e-b9c68f2f1587",
    "GPU-06db64f6-6181-5a90-cf95-5ce52a58c4e5",
    "GPU-a5271aa6-4cdb-28c7-0ef5-5da271d0caae",
    "GPU-7e78e6c8-c71c-66c7-9ded-f8836cecab32",
)


def test_query_text_reads_8x_h100_with_fabric_manager() -> None:
    report = parse_query_text(read("nvidia-smi-text/gpud__nvidia-smi-query.535.183.01.out.0.valid"))
    assert (report.driver_version, report.cuda_version, report.attached_gpus) == ("535.183.01", "12.2", 8)
    gpus = report.gpus
    assert tuple(gpu.uuid for gpu in gpus) == GPUD_H100_UUIDS
    assert [gpu.pci_bus_id for gpu in gpus] == [
        f"00000000:{bus}:00.0" for bus in ("53", "64", "75", "86", "97", "A8", "B9", "CA")
    ]
    assert [gpu.index for gpu in gpus] == list(range(8))
    assert {gpu.name for gpu in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert [gpu.temperature_c for gpu in gpus] == [36, 37, 39, 39, 38, 36, 37, 35]
    assert [gpu.power_draw_w for gpu in gpus] == [71.97, 68.88, 118.01, 72.91, 71.68, 71.69, 69.44, 74.76]
    assert [gpu.memory_used_mib for gpu in gpus] == [0, 0, 9221, 0, 0, 0, 0, 0]
    assert {(gpu.fabric_state, gpu.fabric_status) for gpu in gpus} == {("Completed", "Success")}
    assert gpus[2].clock_event_reasons_active == (
        "sw_power_cap",
        "hw_power_brake_slowdown",
        "sw_thermal_slowdown",
    )
    assert gpus[0] == GpuInfo(
        index=0,
        pci_bus_id="00000000:53:00.0",
        name="NVIDIA H100 80GB HBM3",
        uuid="GPU-566e6f65-c38e-b12f-4824-6944218668b9",
        serial="1655022005478",
        vbios="96.00.74.00.01",
        memory_total_mib=81559,
        memory_used_mib=0,
        memory_free_mib=81007,
        persistence_mode=True,
        mig_mode_current="Disabled",
        mig_mode_pending="Disabled",
        mig_devices=(),
        ecc_mode_current="Enabled",
        ecc_mode_pending="Enabled",
        ecc_uncorrectable_volatile=0,
        ecc_uncorrectable_aggregate=0,
        retired_pages_single_bit=None,
        retired_pages_double_bit=None,
        retired_pages_pending=None,
        remapped_rows=NO_REMAP,
        pcie_link_gen_current=5,
        pcie_link_gen_max=5,
        pcie_link_width_current=16,
        pcie_link_width_max=16,
        clock_event_reasons_active=("gpu_idle",),
        temperature_c=36,
        power_draw_w=71.97,
        fabric_state="Completed",
        fabric_status="Success",
        compute_mode="Default",
    )


def test_query_text_reads_a10_with_pending_row_remap() -> None:
    report = parse_query_text(read("nvidia-smi-text/gpud__nvidia-smi-query.535.129.03.out.0.valid.a10"))
    assert (report.driver_version, report.cuda_version, report.attached_gpus) == ("535.129.03", "12.2", 1)
    assert report.gpus == (
        GpuInfo(
            index=0,
            pci_bus_id="00000000:07:00.0",
            name="NVIDIA A10",
            uuid="GPU-73d12ef7-f589-f867-4259-c7090ab44736",
            serial="1324521052681",
            vbios="94.02.5C.00.04",
            memory_total_mib=23028,
            memory_used_mib=4,
            memory_free_mib=22511,
            persistence_mode=True,
            mig_mode_current=None,
            mig_mode_pending=None,
            mig_devices=(),
            ecc_mode_current="Enabled",
            ecc_mode_pending="Enabled",
            ecc_uncorrectable_volatile=0,
            ecc_uncorrectable_aggregate=0,
            retired_pages_single_bit=None,
            retired_pages_double_bit=None,
            retired_pages_pending=None,
            remapped_rows=RemappedRows(correctable=0, uncorrectable=4, pending=True, failure=False),
            pcie_link_gen_current=4,
            pcie_link_gen_max=4,
            pcie_link_width_current=16,
            pcie_link_width_max=16,
            clock_event_reasons_active=("gpu_idle",),
            temperature_c=33,
            power_draw_w=43.89,
            fabric_state=None,
            fabric_status=None,
            compute_mode="Default",
        ),
    )


def test_query_text_reads_page_retirement_only_output_when_filtered() -> None:
    text = read("nvidia-smi-text/azurehpc-health-checks__orig_nvsmi8_output.txt")
    report = parse_query_text(text, filtered=True)
    assert (report.driver_version, report.cuda_version, report.attached_gpus) == ("535.86.10", "12.2", 8)
    assert [gpu.pci_bus_id for gpu in report.gpus] == [f"0000000{n}:00:00.0" for n in range(1, 9)]
    for gpu in report.gpus:
        assert (gpu.retired_pages_single_bit, gpu.retired_pages_double_bit, gpu.retired_pages_pending) == (
            0,
            0,
            False,
        )
        assert (gpu.name, gpu.uuid, gpu.memory_total_mib, gpu.remapped_rows) == (None, None, None, None)
    with pytest.raises(ParseError, match=r"GPU 00000001:00:00.0 \(#0\) has no 'Product Name' line"):
        parse_query_text(text)


def test_query_text_filtered_output_cut_at_a_line_boundary_is_truncation() -> None:
    text = read("nvidia-smi-text/azurehpc-health-checks__orig_nvsmi8_output.txt")
    cut = text[: text.index("        Pending Page Blacklist", text.index("GPU 00000008"))]
    with pytest.raises(
        ParseError, match=re.escape("GPU 00000008:00:00.0 lacks 'Retired Pages > Pending Page Blacklist'")
    ):
        parse_query_text(cut, filtered=True)


def _capture_gpu(mig_mode: str | None, **values: Any) -> GpuInfo:
    """The fields all three nvidia_gpu_exporter captures (one masked GPU each) share."""
    fields: dict[str, Any] = {
        "index": 0,
        "uuid": MASKED_UUID,
        "serial": "0000000000000",
        "mig_mode_current": mig_mode,
        "mig_mode_pending": mig_mode,
        "mig_devices": (),
        "ecc_mode_current": "Enabled",
        "ecc_mode_pending": "Enabled",
        "ecc_uncorrectable_volatile": 0,
        "ecc_uncorrectable_aggregate": 0,
        "retired_pages_single_bit": None,
        "retired_pages_double_bit": None,
        "retired_pages_pending": None,
        "pcie_link_width_current": 16,
        "pcie_link_width_max": 16,
        "compute_mode": "Default",
    }
    fields.update(values)
    return GpuInfo(**fields)


H100_MIG_DEVICES = (
    MigDevice(index=0, gpu_instance_id=2, compute_instance_id=0, memory_total_mib=40448, sm_count=60),
    MigDevice(index=1, gpu_instance_id=3, compute_instance_id=0, memory_total_mib=20096, sm_count=32),
    MigDevice(index=2, gpu_instance_id=9, compute_instance_id=0, memory_total_mib=9984, sm_count=16),
    MigDevice(index=3, gpu_instance_id=10, compute_instance_id=0, memory_total_mib=9984, sm_count=16),
)
H100_COMMON = {
    "pci_bus_id": "00000000:00:09.0",
    "name": "NVIDIA H100 80GB HBM3",
    "vbios": "96.00.A5.00.01",
    "memory_total_mib": 81559,
    "persistence_mode": True,
    "pcie_link_gen_current": 5,
    "pcie_link_gen_max": 5,
    "fabric_state": "Completed",
    "fabric_status": "Success",
}
L40S_COMMON = {
    "pci_bus_id": "00000000:01:00.0",
    "name": "NVIDIA L40S",
    "vbios": "95.02.66.00.02",
    "memory_total_mib": 46068,
    "persistence_mode": False,
    "remapped_rows": NO_REMAP,
    "pcie_link_gen_current": 4,
    "pcie_link_gen_max": 4,
    "fabric_state": None,
    "fabric_status": None,
}
CAPTURE_QUERY_EXPECTED = {
    (H100, "idle"): (
        "590.48.01",
        "13.1",
        _capture_gpu(
            "Disabled",
            **H100_COMMON,
            remapped_rows=NO_REMAP,
            memory_used_mib=0,
            memory_free_mib=81081,
            clock_event_reasons_active=("gpu_idle",),
            temperature_c=41,
            power_draw_w=69.85,
        ),
    ),
    (H100, "load"): (
        "590.48.01",
        "13.1",
        _capture_gpu(
            "Disabled",
            **H100_COMMON,
            remapped_rows=NO_REMAP,
            memory_used_mib=19818,
            memory_free_mib=61263,
            clock_event_reasons_active=(),
            temperature_c=59,
            power_draw_w=629.45,
        ),
    ),
    (H100_MIG, "idle"): (
        "590.48.01",
        "13.1",
        _capture_gpu(
            "Enabled",
            **H100_COMMON,
            remapped_rows=None,
            mig_devices=H100_MIG_DEVICES,
            memory_used_mib=59,
            memory_free_mib=81022,
            clock_event_reasons_active=("gpu_idle",),
            temperature_c=42,
            power_draw_w=71.27,
        ),
    ),
    (H100_MIG, "load"): (
        "590.48.01",
        "13.1",
        _capture_gpu(
            "Enabled",
            **H100_COMMON,
            remapped_rows=None,
            mig_devices=H100_MIG_DEVICES,
            memory_used_mib=11125,
            memory_free_mib=69956,
            clock_event_reasons_active=(),
            temperature_c=53,
            power_draw_w=432.21,
        ),
    ),
    (L40S, "idle"): (
        "595.80",
        "13.2",
        _capture_gpu(
            None,
            **L40S_COMMON,
            memory_used_mib=0,
            memory_free_mib=45460,
            clock_event_reasons_active=(),
            temperature_c=64,
            power_draw_w=183.28,
        ),
    ),
    (L40S, "load"): (
        "595.80",
        "13.2",
        _capture_gpu(
            None,
            **L40S_COMMON,
            memory_used_mib=1235,
            memory_free_mib=44225,
            clock_event_reasons_active=(),
            temperature_c=54,
            power_draw_w=110.24,
        ),
    ),
}


@pytest.mark.parametrize(("name", "phase"), sorted(CAPTURE_QUERY_EXPECTED))
def test_query_text_reads_each_capture_section(name: str, phase: str) -> None:
    driver, cuda, gpu = CAPTURE_QUERY_EXPECTED[(name, phase)]
    _, body = capture_section(name, f"{phase} :: query (-q)")
    report = parse_query_text(body)
    assert (report.driver_version, report.cuda_version, report.attached_gpus) == (driver, cuda, 1)
    assert report.gpus == (gpu,)


@pytest.mark.parametrize(
    "relative",
    [
        "nvidia-smi-text/gpud__nvidia-smi-query.535.183.01.out.0.valid",
        "nvidia-smi-text/gpud__nvidia-smi-query.535.129.03.out.0.valid.a10",
        "nvidia-smi-text/azurehpc-health-checks__orig_nvsmi8_output.txt",
    ],
)
def test_query_text_rejects_a_capture_cut_in_half(relative: str) -> None:
    with pytest.raises(ParseError, match="nvidia-smi -q: "):
        parse_query_text(cut_mid_line(read(relative)), filtered="azurehpc" in relative)


@pytest.mark.parametrize("name", CAPTURES)
def test_query_text_full_query_cut_at_a_line_boundary_is_truncation(name: str) -> None:
    _, body = capture_section(name, "idle :: query (-q)")
    with pytest.raises(ParseError, match=r"nvidia-smi -q: .*truncated"):
        parse_query_text(cut_at_line(body, 0.9))
    with pytest.raises(ParseError, match="has no 'Processes' field, the last one nvidia-smi prints"):
        parse_query_text(body[: body.index("    Processes ")])


def test_query_text_names_a_missing_uuid() -> None:
    text = read("nvidia-smi-text/gpud__nvidia-smi-query.535.183.01.out.0.valid")
    text = text.replace(
        "    GPU UUID                              : GPU-9930d717-21dd-7692-054e-3d0a2bae76b5\n", ""
    )
    with pytest.raises(
        ParseError, match=r"nvidia-smi -q: GPU 00000000:64:00.0 \(#1\) has no 'GPU UUID' line"
    ):
        parse_query_text(text)


def test_query_text_names_the_field_holding_an_unexpected_value() -> None:
    text = read("nvidia-smi-text/gpud__nvidia-smi-query.535.129.03.out.0.valid.a10")
    text = text.replace("Current                   : 16x", "Current                   : x16")
    with pytest.raises(
        ParseError,
        match=re.escape(
            "(#0) 'PCI > GPU Link Info > Link Width > Current': expected a number in x, got 'x16'"
        ),
    ):
        parse_query_text(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty output"),
        (GARBAGE, "does not start with the"),
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", "banner"),
        ("==============NVSMI LOG==============\n\nTimestamp : now\n", "no 'Driver Version' line"),
    ],
)
def test_query_text_rejects_garbage(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=re.escape(message)):
        parse_query_text(text)


# --------------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu CSV
# --------------------------------------------------------------------------------------------------

CSV_EXPECTED = {
    (H100, "idle"): {"memory.used": 0, "power.draw": 69.85, "temperature.gpu": 41, "utilization.gpu": 0},
    (H100, "load"): {
        "memory.used": 19818,
        "power.draw": 631.95,
        "temperature.gpu": 59,
        "utilization.gpu": 100,
    },
    (H100_MIG, "idle"): {
        "memory.used": 59,
        "power.draw": 71.15,
        "temperature.gpu": 42,
        "utilization.gpu": None,
    },
    (H100_MIG, "load"): {
        "memory.used": 11125,
        "power.draw": 433.78,
        "temperature.gpu": 53,
        "utilization.gpu": None,
    },
    (L40S, "idle"): {"memory.used": 0, "power.draw": 144.97, "temperature.gpu": 63, "utilization.gpu": 100},
    (L40S, "load"): {"memory.used": 1235, "power.draw": 110.23, "temperature.gpu": 54, "utilization.gpu": 9},
}
CSV_COMMON = {
    H100: {
        "driver_version": "590.48.01",
        "name": "NVIDIA H100 80GB HBM3",
        "pci.bus_id": "00000000:00:09.0",
        "memory.total": 81559,
        "pcie.link.gen.max": 5,
        "compute_cap": "9.0",
        "edpp_multiplier": 100.0,
        "fabric.state": "Completed",
    },
    L40S: {
        "driver_version": "595.80",
        "name": "NVIDIA L40S",
        "pci.bus_id": "00000000:01:00.0",
        "memory.total": 46068,
        "pcie.link.gen.max": 4,
        "compute_cap": "8.9",
        "edpp_multiplier": None,
        "fabric.state": None,
    },
}
CSV_COMMON[H100_MIG] = CSV_COMMON[H100]


def _csv_section(name: str, phase: str) -> tuple[list[str], str]:
    command, body = capture_section(name, f"{phase} :: query-gpu (csv, what the exporter parses)")
    match = re.search(r"--query-gpu=(\S+)", command)
    assert match is not None, command
    fields = match.group(1).split(",")
    return fields, body


@pytest.mark.parametrize(("name", "phase"), sorted(CSV_EXPECTED))
def test_query_gpu_csv_reads_each_capture_section(name: str, phase: str) -> None:
    fields, body = _csv_section(name, phase)
    (row,) = parse_query_gpu_csv(body, fields)
    assert list(row) == fields
    expected = {
        **CSV_COMMON[name],
        **CSV_EXPECTED[(name, phase)],
        "count": 1,
        "index": 0,
        "uuid": MASKED_UUID,
        "serial": "0000000000000",  # an identifier: leading zeros kept, not an int
        "inforom.oem": "2.1",  # a version, not a float
        "ecc.mode.current": "Enabled",
        "ecc.errors.uncorrected.volatile.total": 0,
        "pcie.link.width.max": 16,
        "fan.speed": None,  # [N/A]
        "hostname": None,  # [N/A]
        "platform.chassis_serial_number": None,  # empty
        "mig.mode.current": "Enabled" if name == H100_MIG else ("Disabled" if name == H100 else None),
    }
    assert {key: row[key] for key in expected} == expected


def test_query_gpu_csv_strips_every_unit_the_header_names() -> None:
    fields, body = _csv_section(L40S, "load")
    row = parse_query_gpu_csv(body, fields)[0]
    assert row["clocks_event_reasons_counters.sw_power_cap"] == 204642816  # "204642816 us"
    assert row["clocks.max.graphics"] == 2520  # "2520 MHz"
    assert row["power.limit"] == 350.0  # "350.00 W"
    assert row["clocks_event_reasons.active"] == "0x0000000000000000"  # hex bit mask stays text


@pytest.mark.parametrize(("name", "phase"), sorted(CSV_EXPECTED))
def test_query_gpu_csv_agrees_with_the_text_query_of_the_same_capture(name: str, phase: str) -> None:
    fields, body = _csv_section(name, phase)
    row = parse_query_gpu_csv(body, fields)[0]
    gpu = parse_query_text(capture_section(name, f"{phase} :: query (-q)")[1]).gpus[0]
    assert (row["uuid"], row["pci.bus_id"], row["name"], row["memory.total"]) == (
        gpu.uuid,
        gpu.pci_bus_id,
        gpu.name,
        gpu.memory_total_mib,
    )
    assert (row["pcie.link.gen.max"], row["pcie.link.width.max"], row["mig.mode.current"]) == (
        gpu.pcie_link_gen_max,
        gpu.pcie_link_width_max,
        gpu.mig_mode_current,
    )


def test_query_gpu_csv_without_header_or_units() -> None:
    fields = [
        "index",
        "gpu_name",
        "memory.total",
        "utilization.gpu",
        "power.draw",
        "ecc.errors.uncorrected.volatile.total",
    ]
    text = "0, Tesla T4, 15360, 7, 26.78, 0\n1, Tesla T4, 15360, [Not Supported], [N/A], [GPU is lost]\n"
    assert parse_query_gpu_csv(text, fields) == [
        dict(zip(fields, [0, "Tesla T4", 15360, 7, 26.78, 0], strict=True)),
        dict(zip(fields, [1, "Tesla T4", 15360, None, None, "[GPU is lost]"], strict=True)),
    ]


def test_query_gpu_csv_strips_known_units_without_header() -> None:
    fields = ["memory.used", "fan.speed", "power.draw", "clocks.sm", "serial"]
    assert parse_query_gpu_csv("1032 MiB, 30 %, 250.00 W, 1410 MHz, 0324217060350\n", fields) == [
        {
            "memory.used": 1032,
            "fan.speed": 30,
            "power.draw": 250.0,
            "clocks.sm": 1410,
            "serial": "0324217060350",
        }
    ]


def test_query_gpu_csv_accepts_aliases_in_the_header() -> None:
    text = (
        "name, pci.bus_id, clocks_event_reasons.active\nNVIDIA A10G, 00000000:00:1E.0, 0x0000000000000001\n"
    )
    assert parse_query_gpu_csv(text, ["gpu_name", "gpu_bus_id", "clocks_throttle_reasons.active"]) == [
        {
            "gpu_name": "NVIDIA A10G",
            "gpu_bus_id": "00000000:00:1E.0",
            "clocks_throttle_reasons.active": "0x0000000000000001",
        }
    ]


def test_query_gpu_csv_rejects_a_header_in_another_order() -> None:
    text = "memory.total [MiB], name\n15360 MiB, Tesla T4\n"
    with pytest.raises(
        ParseError,
        match=re.escape("header names memory.total, name but the query asked for name, memory.total"),
    ):
        parse_query_gpu_csv(text, ["name", "memory.total"])


@pytest.mark.parametrize(("name", "phase"), sorted(CSV_EXPECTED))
def test_query_gpu_csv_rejects_a_capture_cut_in_half(name: str, phase: str) -> None:
    fields, body = _csv_section(name, phase)
    with pytest.raises(ParseError, match="nvidia-smi --query-gpu: "):
        parse_query_gpu_csv(cut_mid_line(body), fields)


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "empty output"), (GARBAGE, "values for 2 fields"), ("name, uuid\n", "a header but no GPU lines")],
)
def test_query_gpu_csv_rejects_garbage(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=re.escape(message)):
        parse_query_gpu_csv(text, ["name", "uuid"])


# --------------------------------------------------------------------------------------------------
# nvidia-smi -L
# --------------------------------------------------------------------------------------------------


def test_list_reads_8_gpus_with_7_mig_devices_each() -> None:
    gpus = parse_list(read("nvidia-smi-mig/nvidia_gpu_exporter__list_gpus.txt"))
    assert [gpu.index for gpu in gpus] == list(range(8))
    assert {gpu.name for gpu in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert gpus[0].uuid == "GPU-63d1e50a-b952-d15c-0740-12bc14859142"
    assert gpus[7].uuid == "GPU-882ebfab-da98-c41e-357c-47272c0d560d"
    for gpu in gpus:
        assert [(device.index, device.profile) for device in gpu.mig_devices] == [
            (i, "1g.10gb") for i in range(7)
        ]
    assert gpus[0].mig_devices[0] == ListedMigDevice(0, "1g.10gb", "MIG-4d0efb7d-0970-51d9-b761-0686be6b8af3")
    assert gpus[7].mig_devices[6] == ListedMigDevice(6, "1g.10gb", "MIG-bc03b921-4d24-573e-9d4b-1cdc47b1f4b4")
    assert len({device.uuid for gpu in gpus for device in gpu.mig_devices}) == 56


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (H100, [ListedGpu(0, "NVIDIA H100 80GB HBM3", MASKED_UUID)]),
        (L40S, [ListedGpu(0, "NVIDIA L40S", MASKED_UUID)]),
        (
            H100_MIG,
            [
                ListedGpu(
                    0,
                    "NVIDIA H100 80GB HBM3",
                    MASKED_UUID,
                    (
                        ListedMigDevice(0, "3g.40gb", "MIG-00000000-0000-0000-0000-000000000000"),
                        ListedMigDevice(1, "2g.20gb", "MIG-00000001-0000-0000-0000-000000000001"),
                        ListedMigDevice(2, "1g.10gb", "MIG-00000002-0000-0000-0000-000000000002"),
                        ListedMigDevice(3, "1g.10gb", "MIG-00000003-0000-0000-0000-000000000003"),
                    ),
                )
            ],
        ),
    ],
)
def test_list_reads_each_capture_section(name: str, expected: list[ListedGpu]) -> None:
    assert parse_list(capture_section(name, "capabilities :: list (-L)")[1]) == expected


@pytest.mark.parametrize("text", ["", GARBAGE, "No devices were found\n"])
def test_list_rejects_garbage(text: str) -> None:
    with pytest.raises(ParseError, match="nvidia-smi -L: "):
        parse_list(text)


def test_list_rejects_output_cut_in_half() -> None:
    with pytest.raises(ParseError, match="neither a GPU nor a MIG device line"):
        parse_list(cut_mid_line(read("nvidia-smi-mig/nvidia_gpu_exporter__list_gpus.txt")))


# --------------------------------------------------------------------------------------------------
# nvidia-smi mig -lgip / -lgi / -lci / -lcip / -lgipp
# --------------------------------------------------------------------------------------------------

A100_40GB_LGIP = [
    GpuInstanceProfileRow(0, "1g.5gb", 19, 7, 7, 4.75, False, sm_count=14, ce=1, enc=0, dec=0, ofa=0, jpg=0),
    GpuInstanceProfileRow(
        0, "1g.5gb+me", 20, 1, 1, 4.75, False, sm_count=14, ce=1, enc=0, dec=1, ofa=1, jpg=1
    ),
    GpuInstanceProfileRow(0, "2g.10gb", 14, 3, 3, 9.75, False, sm_count=28, ce=2, enc=0, dec=1, ofa=0, jpg=0),
    GpuInstanceProfileRow(0, "3g.20gb", 9, 2, 2, 19.62, False, sm_count=42, ce=3, enc=0, dec=2, ofa=0, jpg=0),
    GpuInstanceProfileRow(0, "4g.20gb", 5, 1, 1, 19.62, False, sm_count=56, ce=4, enc=0, dec=2, ofa=0, jpg=0),
    GpuInstanceProfileRow(0, "7g.40gb", 0, 1, 1, 39.5, False, sm_count=98, ce=7, enc=0, dec=5, ofa=1, jpg=1),
]
H100_80GB_LGIP_GPU = [
    ("1g.10gb", 19, 7, 7, 9.75, 16, 1, 0, 1, 0, 1),
    ("1g.10gb+me", 20, 1, 1, 9.75, 16, 1, 0, 1, 1, 1),
    ("1g.20gb", 15, 4, 4, 19.62, 26, 1, 0, 1, 0, 1),
    ("2g.20gb", 14, 3, 3, 19.62, 32, 2, 0, 2, 0, 2),
    ("3g.40gb", 9, 2, 2, 39.5, 60, 3, 0, 3, 0, 3),
    ("4g.40gb", 5, 1, 1, 39.5, 64, 4, 0, 4, 0, 4),
    ("7g.80gb", 0, 1, 1, 79.25, 132, 8, 0, 7, 1, 7),
]


def test_mig_lgip_reads_a100_40gb_profiles() -> None:
    assert parse_mig_lgip(read("nvidia-smi-mig/openforbc__a100-pcie-40gb_mig-lgip.txt")) == A100_40GB_LGIP


def test_mig_lgip_reads_4x_h100_profiles() -> None:
    rows = parse_mig_lgip(read("nvidia-smi-mig/stackhpc-slurm-appliance__4x-h100-sxm5-80gb_mig-lgip.txt"))
    expected = [
        GpuInstanceProfileRow(gpu, name, pid, free, total, mem, False, sm, ce, enc, dec, ofa, jpg)
        for gpu in range(4)
        for (name, pid, free, total, mem, sm, ce, enc, dec, ofa, jpg) in H100_80GB_LGIP_GPU
    ]
    assert rows == expected


def test_mig_lgi_lci_lcip_lgipp_read_the_a100_session() -> None:
    assert parse_mig_lgi(read("nvidia-smi-mig/openforbc__a100-pcie-40gb_mig-lgi.txt")) == [
        GpuInstanceRow(
            gpu=0, name="3g.20gb", profile_id=9, instance_id=1, placement_start=0, placement_size=4
        ),
        GpuInstanceRow(
            gpu=0, name="3g.20gb", profile_id=9, instance_id=2, placement_start=4, placement_size=4
        ),
    ]
    whole_gi1 = ComputeInstanceRow(0, 1, "3g.20gb", 2, 0, 0, 3)
    assert parse_mig_lci(read("nvidia-smi-mig/openforbc__a100-pcie-40gb_mig-lci-gi1.txt")) == [whole_gi1]
    assert parse_mig_lci(read("nvidia-smi-mig/openforbc__a100-pcie-40gb_mig-lci.txt")) == [
        whole_gi1,
        ComputeInstanceRow(0, 2, "1c.3g.20gb", 0, 0, 0, 1),
        ComputeInstanceRow(0, 2, "1c.3g.20gb", 0, 1, 1, 1),
        ComputeInstanceRow(0, 2, "1c.3g.20gb", 0, 2, 2, 1),
    ]
    assert parse_mig_lcip(read("nvidia-smi-mig/openforbc__a100-pcie-40gb_mig-lcip-gi2.txt")) == [
        ComputeInstanceProfileRow(
            0, 2, "1c.3g.20gb", 0, False, 3, 3, sm_count=14, dec=2, enc=0, ofa=0, ce=3, jpg=0
        ),
        ComputeInstanceProfileRow(
            0, 2, "2c.3g.20gb", 1, False, 1, 1, sm_count=28, dec=2, enc=0, ofa=0, ce=3, jpg=0
        ),
        ComputeInstanceProfileRow(
            0, 2, "3g.20gb", 2, True, 1, 1, sm_count=42, dec=2, enc=0, ofa=0, ce=3, jpg=0
        ),
    ]
    assert parse_mig_lgipp(read("nvidia-smi-mig/openforbc__a100-pcie-40gb_mig-lgipp.txt")) == [
        GpuInstancePlacements(0, 19, (0, 1, 2, 3, 4, 5, 6), 1),
        GpuInstancePlacements(0, 20, (0, 1, 2, 3, 4, 5, 6), 1),
        GpuInstancePlacements(0, 14, (0, 2, 4), 2),
        GpuInstancePlacements(0, 9, (0, 4), 4),
        GpuInstancePlacements(0, 5, (0,), 4),
        GpuInstancePlacements(0, 0, (0,), 8),
    ]


def test_mig_lgi_with_no_instances_is_an_empty_list() -> None:
    text = read("nvidia-smi-mig/openforbc__a100-pcie-40gb_mig-lgi.txt").splitlines()
    empty = [*text[:5], "|  No GPU instances found                                |", text[-1]]
    assert parse_mig_lgi("\n".join(empty)) == []


Reader = Callable[[str], object]
MIG_READERS: list[tuple[Reader, str]] = [
    (parse_mig_lgip, "openforbc__a100-pcie-40gb_mig-lgip.txt"),
    (parse_mig_lgip, "stackhpc-slurm-appliance__4x-h100-sxm5-80gb_mig-lgip.txt"),
    (parse_mig_lgi, "openforbc__a100-pcie-40gb_mig-lgi.txt"),
    (parse_mig_lci, "openforbc__a100-pcie-40gb_mig-lci.txt"),
    (parse_mig_lci, "openforbc__a100-pcie-40gb_mig-lci-gi1.txt"),
    (parse_mig_lcip, "openforbc__a100-pcie-40gb_mig-lcip-gi2.txt"),
    (parse_mig_lgipp, "openforbc__a100-pcie-40gb_mig-lgipp.txt"),
]


@pytest.mark.parametrize(("reader", "name"), MIG_READERS)
def test_mig_readers_reject_output_cut_in_half(reader: Reader, name: str) -> None:
    with pytest.raises(ParseError, match="nvidia-smi mig -l"):
        reader(cut_mid_line(read(f"nvidia-smi-mig/{name}")))


@pytest.mark.parametrize(("reader", "name"), MIG_READERS[:-1])
def test_mig_tables_cut_at_a_line_boundary_are_truncation(reader: Reader, name: str) -> None:
    lines = read(f"nvidia-smi-mig/{name}").splitlines()
    with pytest.raises(ParseError, match="not closed by a"):
        reader("\n".join(lines[:-1]))


@pytest.mark.parametrize(("reader", "_name"), MIG_READERS)
@pytest.mark.parametrize("text", ["", GARBAGE])
def test_mig_readers_reject_garbage(reader: Reader, _name: str, text: str) -> None:
    with pytest.raises(ParseError, match="nvidia-smi mig -l"):
        reader(text)


def test_mig_lgip_rejects_a_garbled_cell() -> None:
    text = read("nvidia-smi-mig/openforbc__a100-pcie-40gb_mig-lgip.txt").replace("4.75 ", "4,75 ", 1)
    with pytest.raises(ParseError, match="memory '4,75' is not a number"):
        parse_mig_lgip(text)


# --------------------------------------------------------------------------------------------------
# nvidia-smi nvlink -s
# --------------------------------------------------------------------------------------------------


def test_nvlink_status_reads_the_good_and_bad_azure_files() -> None:
    good = parse_nvlink_status(read("nvidia-smi-text/azurehpc-health-checks__good_nvlink_status.txt"))
    assert good == {7: [NvLink(link, 25.0) for link in range(12)]}
    bad_text = read("nvidia-smi-text/azurehpc-health-checks__bad_nvlink_status.txt")
    assert parse_nvlink_status(bad_text) == {6: []}
    assert parse_nvlink_report(bad_text) == [
        NvLinkGpu(
            6,
            "NVIDIA A100-SXM4-80GB",
            "GPU-9667d95e-6d22-0c22-1f57-c481f13e7c44",
            (),
            ("NVML: Unable to retrieve NVLink information as all links are inActive",),
        )
    ]


def test_nvlink_status_reads_8x_a100() -> None:
    gpus = parse_nvlink_report(read("nvidia-smi-text/gpud__nvidia-smi.nvlink.status.a100"))
    assert [gpu.index for gpu in gpus] == list(range(8))
    assert gpus[0].uuid == "GPU-5269b708-678a-b1a8-60f0-c90406537486"
    assert all(gpu.links == tuple(NvLink(link, 25.0) for link in range(12)) for gpu in gpus)
    assert all(gpu.messages == () for gpu in gpus)


@pytest.mark.parametrize(
    ("name", "links", "messages"),
    [
        (H100, tuple(NvLink(link, 26.562) for link in range(18)), ()),
        (H100_MIG, (), ("Nvlink queries are not supported for Devices in MIG mode",)),
        (L40S, (), ("Device does not have or support Nvlink",)),
    ],
)
def test_nvlink_report_reads_each_capture_section(name: str, links: tuple, messages: tuple) -> None:
    gpus = parse_nvlink_report(capture_section(name, "capabilities :: nvlink -s")[1])
    assert [(gpu.index, gpu.uuid, gpu.links, gpu.messages) for gpu in gpus] == [
        (0, MASKED_UUID, links, messages)
    ]


def test_nvlink_status_reads_inactive_links_as_none() -> None:
    text = read("nvidia-smi-text/azurehpc-health-checks__good_nvlink_status.txt")
    text = text.replace("Link 3: 25 GB/s", "Link 3: <inactive>")
    assert parse_nvlink_status(text)[7][2:5] == [NvLink(2, 25.0), NvLink(3, None), NvLink(4, 25.0)]


@pytest.mark.parametrize(
    "relative",
    [
        "nvidia-smi-text/gpud__nvidia-smi.nvlink.status.a100",
        "nvidia-smi-text/azurehpc-health-checks__good_nvlink_status.txt",
    ],
)
def test_nvlink_status_rejects_output_cut_in_half(relative: str) -> None:
    with pytest.raises(ParseError, match="nvidia-smi nvlink -s: "):
        parse_nvlink_status(cut_mid_line(read(relative)))


def test_nvlink_status_cut_at_a_line_boundary_is_truncation() -> None:
    text = read("nvidia-smi-text/gpud__nvidia-smi.nvlink.status.a100")
    with pytest.raises(ParseError, match="GPU 4 lists 6 links, another NVIDIA A100-SXM4-80GB lists 12"):
        parse_nvlink_status(text[: text.index("Link 6:", text.index("GPU 4:"))])


@pytest.mark.parametrize(
    "text", ["", GARBAGE, "Failed to initialize NVML: Driver/library version mismatch\n"]
)
def test_nvlink_status_rejects_garbage(text: str) -> None:
    with pytest.raises(ParseError, match="nvidia-smi nvlink -s: "):
        parse_nvlink_status(text)
