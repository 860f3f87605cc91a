"""``nvidia-smi -q`` text of drivers 590, 595 and 610 (tests/fixtures/SOURCES.md, ``nvidia_gpu_exporter__*``).

Driver 610 changed the text query in three ways the reader had to learn (the hand-made snippets below
each mirror a line of a real 610 capture):

* ``Driver Version`` and ``CUDA Version`` carry a note after the value, ``[Deprecated; will be removed in
  CUDA 14.0. Use KMD Version instead]``;
* the versions are printed again under new names, ``KMD Version`` and ``CUDA UMD Version``;
* a key longer than the padding touches its colon: ``Memory Max Operating T.Limit Temp Specification: 0 C``.

No ``nvidia-smi -q -x`` capture of these machines is public (the captures record the text query only), so
the values here are checked against the text alone.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuready.nvidia.errors import ParseError
from gpuready.nvidia.smi import GpuInfo, MigDevice, RemappedRows, SmiReport, parse_query_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TEXT = FIXTURES / "nvidia-smi-text"
BAR = "#" * 80
MASKED_UUID = "GPU-00000000-0000-0000-0000-000000000000"
NO_REMAP = RemappedRows(correctable=0, uncorrectable=0, pending=False, failure=False)

H100_IDLE = "nvidia_gpu_exporter__nvidia-h100-80gb-hbm3__590.48.01__idle.txt"
H100_LOAD = "nvidia_gpu_exporter__nvidia-h100-80gb-hbm3__590.48.01__load.txt"
H100_MIG_IDLE = "nvidia_gpu_exporter__nvidia-h100-mig__590.48.01__idle.txt"
H100_MIG_LOAD = "nvidia_gpu_exporter__nvidia-h100-mig__590.48.01__load.txt"
L40S_IDLE = "nvidia_gpu_exporter__nvidia-l40s__595.80__idle.txt"
L40S_LOAD = "nvidia_gpu_exporter__nvidia-l40s__595.80__load.txt"
H200_610 = "nvidia_gpu_exporter__nvidia-h200__610.43.02__idle.txt"
H200_MIG_610 = "nvidia_gpu_exporter__nvidia-h200-mig__610.43.02__idle.txt"
RTX2080S_610 = "nvidia_gpu_exporter__nvidia-geforce-rtx-2080-super__610.57.04__idle.txt"
DRIVER_610 = (H200_610, H200_MIG_610, RTX2080S_610)
ALL = (H100_IDLE, H100_LOAD, H100_MIG_IDLE, H100_MIG_LOAD, L40S_IDLE, L40S_LOAD, *DRIVER_610)


def parse(name: str) -> SmiReport:
    return parse_query_text((TEXT / name).read_text())


# --------------------------------------------------------------------------------------------------
# Provenance: the 590/595 fixtures are the `-q` sections of the captures in tests/fixtures/captures
# --------------------------------------------------------------------------------------------------

CAPTURE_OF = {
    H100_IDLE: ("nvidia_gpu_exporter__capture__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt", "idle"),
    H100_LOAD: ("nvidia_gpu_exporter__capture__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt", "load"),
    H100_MIG_IDLE: ("nvidia_gpu_exporter__capture__linux-x86_64__nvidia-h100-mig__590.48.01.txt", "idle"),
    H100_MIG_LOAD: ("nvidia_gpu_exporter__capture__linux-x86_64__nvidia-h100-mig__590.48.01.txt", "load"),
    L40S_IDLE: ("nvidia_gpu_exporter__capture__linux-x86_64__nvidia-l40s__595.80.txt", "idle"),
    L40S_LOAD: ("nvidia_gpu_exporter__capture__linux-x86_64__nvidia-l40s__595.80.txt", "load"),
}


@pytest.mark.parametrize("name", sorted(CAPTURE_OF))
def test_fixture_is_the_query_section_of_its_capture_byte_for_byte(name: str) -> None:
    capture, phase = CAPTURE_OF[name]
    data = (FIXTURES / "captures" / capture).read_bytes()
    # collect.sh writes "\n\n" BAR, "# <phase> :: query (-q)", "# $ nvidia-smi -q", BAR, then the output.
    heading = f"\n\n{BAR}\n# {phase} :: query (-q)\n# $ nvidia-smi -q\n{BAR}\n".encode()
    start = data.index(heading) + len(heading)
    end = data.index(f"\n\n{BAR}\n".encode(), start)
    assert (TEXT / name).read_bytes() == data[start:end]


# --------------------------------------------------------------------------------------------------
# Every fixture: the values read off the file by eye
# --------------------------------------------------------------------------------------------------

# name: (driver, CUDA, attached GPUs, bus id, product name, FB total MiB, FB used MiB, persistence,
#        MIG mode current, ECC mode current, uncorrectable ECC volatile, aggregate, GPU temp C, avg power W)
SUMMARY = {
    H100_IDLE: (
        "590.48.01", "13.1", 1, "00000000:00:09.0", "NVIDIA H100 80GB HBM3",
        81559, 0, True, "Disabled", "Enabled", 0, 0, 41, 69.85,
    ),
    H100_LOAD: (
        "590.48.01", "13.1", 1, "00000000:00:09.0", "NVIDIA H100 80GB HBM3",
        81559, 19818, True, "Disabled", "Enabled", 0, 0, 59, 629.45,
    ),
    H100_MIG_IDLE: (
        "590.48.01", "13.1", 1, "00000000:00:09.0", "NVIDIA H100 80GB HBM3",
        81559, 59, True, "Enabled", "Enabled", 0, 0, 42, 71.27,
    ),
    H100_MIG_LOAD: (
        "590.48.01", "13.1", 1, "00000000:00:09.0", "NVIDIA H100 80GB HBM3",
        81559, 11125, True, "Enabled", "Enabled", 0, 0, 53, 432.21,
    ),
    L40S_IDLE: (
        "595.80", "13.2", 1, "00000000:01:00.0", "NVIDIA L40S",
        46068, 0, False, None, "Enabled", 0, 0, 64, 183.28,
    ),
    L40S_LOAD: (
        "595.80", "13.2", 1, "00000000:01:00.0", "NVIDIA L40S",
        46068, 1235, False, None, "Enabled", 0, 0, 54, 110.24,
    ),
    H200_610: (
        "610.43.02", "13.3", 1, "00000000:83:00.0", "NVIDIA H200",
        143771, 0, True, "Disabled", "Enabled", 0, 0, 38, 83.32,
    ),
    H200_MIG_610: (
        "610.43.02", "13.3", 1, "00000000:83:00.0", "NVIDIA H200",
        143771, 44, True, "Enabled", "Enabled", 0, 0, 40, 130.28,
    ),
    # GeForce: no ECC (every counter N/A), no MIG, "Average Power Draw : N/A" (only the instantaneous
    # reading, 38.89 W, is printed), so those are None.
    RTX2080S_610: (
        "610.57.04", "13.3", 1, "00000000:0C:00.0", "NVIDIA GeForce RTX 2080 SUPER",
        8192, 211, False, None, None, None, None, 33, None,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", ALL)
def test_query_text_reads_the_values_printed_in_each_capture(name: str) -> None:
    report = parse(name)
    (gpu,) = report.gpus
    assert (
        report.driver_version,
        report.cuda_version,
        report.attached_gpus,
        gpu.pci_bus_id,
        gpu.name,
        gpu.memory_total_mib,
        gpu.memory_used_mib,
        gpu.persistence_mode,
        gpu.mig_mode_current,
        gpu.ecc_mode_current,
        gpu.ecc_uncorrectable_volatile,
        gpu.ecc_uncorrectable_aggregate,
        gpu.temperature_c,
        gpu.power_draw_w,
    ) == SUMMARY[name]
    assert gpu.uuid == MASKED_UUID  # the collector masks UUIDs


# The four MIG devices of the 590 H100 capture (3g.40gb, 2g.20gb, 2x 1g.10gb), idle and under load.
H100_MIG_DEVICES = (
    MigDevice(index=0, gpu_instance_id=2, compute_instance_id=0, memory_total_mib=40448, sm_count=60),
    MigDevice(index=1, gpu_instance_id=3, compute_instance_id=0, memory_total_mib=20096, sm_count=32),
    MigDevice(index=2, gpu_instance_id=9, compute_instance_id=0, memory_total_mib=9984, sm_count=16),
    MigDevice(index=3, gpu_instance_id=10, compute_instance_id=0, memory_total_mib=9984, sm_count=16),
)


@pytest.mark.parametrize(
    ("name", "devices"),
    [
        (H100_MIG_IDLE, H100_MIG_DEVICES),
        (H100_MIG_LOAD, H100_MIG_DEVICES),
        (
            H200_MIG_610,
            (
                MigDevice(
                    index=0, gpu_instance_id=2, compute_instance_id=0, memory_total_mib=71424, sm_count=60
                ),
            ),
        ),
        (H100_IDLE, ()),
        (H200_610, ()),
        (RTX2080S_610, ()),
    ],
)
def test_query_text_reads_mig_devices(name: str, devices: tuple[MigDevice, ...]) -> None:
    (gpu,) = parse(name).gpus
    assert gpu.mig_devices == devices
    assert gpu.mig_mode_pending == gpu.mig_mode_current


def test_query_text_reads_every_field_of_the_610_h200() -> None:
    report = parse(H200_610)
    assert (report.driver_version, report.cuda_version, report.attached_gpus) == ("610.43.02", "13.3", 1)
    assert report.gpus == (
        GpuInfo(
            index=0,
            pci_bus_id="00000000:83:00.0",
            name="NVIDIA H200",
            uuid=MASKED_UUID,
            serial="0000000000000",
            vbios="96.00.A5.00.03",
            memory_total_mib=143771,
            memory_used_mib=0,
            memory_free_mib=143149,
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
            temperature_c=38,
            power_draw_w=83.32,
            fabric_state="Completed",
            fabric_status="Success",
            compute_mode="Default",
        ),
    )


def test_query_text_reads_every_field_of_the_610_h200_with_mig() -> None:
    (gpu,) = parse(H200_MIG_610).gpus
    assert gpu == GpuInfo(
        index=0,
        pci_bus_id="00000000:83:00.0",
        name="NVIDIA H200",
        uuid=MASKED_UUID,
        serial="0000000000000",
        vbios="96.00.A5.00.03",
        memory_total_mib=143771,
        memory_used_mib=44,
        memory_free_mib=143105,
        persistence_mode=True,
        mig_mode_current="Enabled",
        mig_mode_pending="Enabled",
        mig_devices=(
            MigDevice(index=0, gpu_instance_id=2, compute_instance_id=0, memory_total_mib=71424, sm_count=60),
        ),
        ecc_mode_current="Enabled",
        ecc_mode_pending="Enabled",
        ecc_uncorrectable_volatile=0,
        ecc_uncorrectable_aggregate=0,
        retired_pages_single_bit=None,
        retired_pages_double_bit=None,
        retired_pages_pending=None,
        remapped_rows=None,  # "Remapped Rows : N/A" in MIG mode
        pcie_link_gen_current=5,
        pcie_link_gen_max=5,
        pcie_link_width_current=16,
        pcie_link_width_max=16,
        clock_event_reasons_active=(),
        temperature_c=40,
        power_draw_w=130.28,
        fabric_state="Completed",
        fabric_status="Success",
        compute_mode="Default",
    )


def test_query_text_reads_every_field_of_the_610_geforce() -> None:
    (gpu,) = parse(RTX2080S_610).gpus
    assert gpu == GpuInfo(
        index=0,
        pci_bus_id="00000000:0C:00.0",
        name="NVIDIA GeForce RTX 2080 SUPER",
        uuid=MASKED_UUID,
        serial=None,
        vbios="90.04.7A.40.73",
        memory_total_mib=8192,
        memory_used_mib=211,
        memory_free_mib=7582,
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
        pcie_link_gen_current=1,
        pcie_link_gen_max=3,
        pcie_link_width_current=16,
        pcie_link_width_max=16,
        clock_event_reasons_active=("gpu_idle",),
        temperature_c=33,
        power_draw_w=None,
        fabric_state=None,
        fabric_status=None,
        compute_mode="Default",
    )


@pytest.mark.parametrize("name", DRIVER_610)
def test_610_capture_shows_the_new_format(name: str) -> None:
    """Guards the fixtures themselves: each holds the lines the reader was changed for."""
    text = (TEXT / name).read_text()
    assert re.search(r"^Driver Version +: 610\.\d+\.\d+ \[Deprecated; .*\]$", text, re.MULTILINE)
    assert re.search(r"^CUDA Version +: 13\.3 \[Deprecated; .*\]$", text, re.MULTILINE)
    assert re.search(r"^KMD Version +: 610\.\d+\.\d+$", text, re.MULTILINE)
    assert re.search(r"^CUDA UMD Version +: 13\.3$", text, re.MULTILINE)
    if name != RTX2080S_610:  # the GeForce prints no memory temperature limit
        assert "        Memory Max Operating T.Limit Temp Specification: 0 C\n" in text


@pytest.mark.parametrize("name", DRIVER_610)
def test_610_capture_cut_short_is_still_truncation(name: str) -> None:
    text = (TEXT / name).read_text()
    lines = text.splitlines(keepends=True)
    with pytest.raises(ParseError, match=r"nvidia-smi -q: .*truncated"):
        parse_query_text("".join(lines[: int(len(lines) * 0.9)]))
    with pytest.raises(ParseError, match=r"nvidia-smi -q: .*truncated"):
        parse_query_text(text[: text.index("Average Power Draw")])


def test_610_capture_cut_before_the_colon_of_a_long_key_is_truncation() -> None:
    text = (TEXT / H200_610).read_text()
    cut = text[: text.index("Specification: 0 C") + len("Specification")]
    with pytest.raises(
        ParseError, match=re.escape("'Memory Max Operating T.Limit Temp Specification' has neither a value")
    ):
        parse_query_text(cut)


# --------------------------------------------------------------------------------------------------
# The 610 rules on hand-made snippets
# --------------------------------------------------------------------------------------------------


def _snippet(
    header: str, temperature: str = "        GPU Current Temp                               : 38 C\n"
) -> str:
    """A minimal full ``-q`` (the fields a full query must show) in the 610 layout, one GPU."""
    return (
        "\n==============NVSMI LOG==============\n\n"
        "Timestamp                                              : Tue Sep  1 20:48:13 2026\n"
        f"{header}"
        "\nAttached GPUs                                          : 1\n"
        "GPU 00000000:83:00.0\n"
        "    Product Name                                       : NVIDIA H200\n"
        f"    GPU UUID                                           : {MASKED_UUID}\n"
        "    FB Memory Usage\n"
        "        Total                                          : 143771 MiB\n"
        "        Used                                           : 0 MiB\n"
        "        Free                                           : 143149 MiB\n"
        "    Temperature\n"
        f"{temperature}"
        "    Processes                                          : None\n"
    )


def test_deprecation_note_after_a_value_is_not_part_of_it() -> None:
    # Mirrors lines 5-6 of nvidia_gpu_exporter__nvidia-h200__610.43.02__idle.txt:
    # "Driver Version   : 610.43.02 [Deprecated; will be removed in CUDA 14.0. Use KMD Version instead]".
    # Here without the KMD Version line, so the old names are the only source.
    report = parse_query_text(
        _snippet(
            "Driver Version                                         : 610.43.02 [Deprecated; will be removed"
            " in CUDA 14.0. Use KMD Version instead]\n"
            "CUDA Version                                           : 13.3 [Deprecated; will be removed in"
            " CUDA 14.0. Use CUDA UMD Version instead]\n"
        )
    )
    assert (report.driver_version, report.cuda_version) == ("610.43.02", "13.3")


def test_kmd_version_alone_is_the_driver_version() -> None:
    # Mirrors lines 7-8 of nvidia_gpu_exporter__nvidia-h200__610.43.02__idle.txt ("KMD Version : 610.43.02",
    # "CUDA UMD Version : 13.3"), as printed once the deprecated names are gone ("will be removed in CUDA 14.0").
    report = parse_query_text(
        _snippet(
            "KMD Version                                            : 610.43.02\n"
            "CUDA UMD Version                                       : 13.3\n"
        )
    )
    assert (report.driver_version, report.cuda_version) == ("610.43.02", "13.3")


def test_kmd_version_is_read_before_driver_version() -> None:
    # Both names, as 610 prints them (lines 5-8 of the H200 610 capture); the new name wins.
    report = parse_query_text(
        _snippet(
            "Driver Version                                         : 610.43.02 [Deprecated; will be removed"
            " in CUDA 14.0. Use KMD Version instead]\n"
            "CUDA Version                                           : 13.3 [Deprecated; will be removed in"
            " CUDA 14.0. Use CUDA UMD Version instead]\n"
            "KMD Version                                            : 610.43.03\n"
            "CUDA UMD Version                                       : 13.4\n"
        )
    )
    assert (report.driver_version, report.cuda_version) == ("610.43.03", "13.4")


def test_no_driver_version_under_either_name_is_an_error() -> None:
    with pytest.raises(ParseError, match=re.escape("no 'Driver Version' line (nor 'KMD Version'")):
        parse_query_text(_snippet("CUDA UMD Version                                       : 13.3\n"))


def test_key_touching_its_colon_is_a_key_and_a_value() -> None:
    # Mirrors line 198 of nvidia_gpu_exporter__nvidia-h200__610.43.02__idle.txt, where the key is longer than
    # the padding: "        Memory Max Operating T.Limit Temp Specification: 0 C". Before driver 610 this
    # reader took such a line for a section title with nothing under it and refused the whole output.
    text = _snippet(
        "KMD Version                                            : 610.43.02\n",
        "        GPU Current Temp                               : 38 C\n"
        "        Memory Max Operating T.Limit Temp Specification: 0 C\n",
    )
    assert parse_query_text(text).gpus[0].temperature_c == 38
    # The same rule for a field the reader uses: the value is read, not taken for a title.
    touching = text.replace(
        "        GPU Current Temp                               : 38 C\n", "        GPU Current Temp: 38 C\n"
    )
    assert parse_query_text(touching).gpus[0].temperature_c == 38


def test_colon_inside_a_section_title_does_not_split_it() -> None:
    # "GPU 00000000:83:00.0" (line 11 of the H200 610 capture) has colons but no ": ": it stays the GPU title.
    report = parse_query_text(
        _snippet("KMD Version                                            : 610.43.02\n")
    )
    assert [gpu.pci_bus_id for gpu in report.gpus] == ["00000000:83:00.0"]
