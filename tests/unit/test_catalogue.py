"""The catalogue against real NVIDIA tool output: every ``mig -lgip``/``-lgipp`` row, MIG device and GPU we have.

The captures are read with small local readers (not gpuready's parsers) so a parser bug cannot hide a
catalogue bug. They are looked up in ``tests/fixtures/`` first, then in the shared capture folder.
"""

from __future__ import annotations

import csv
import io
import itertools
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpuready.nvidia import catalogue
from gpuready.nvidia.catalogue import (
    MODELS,
    NotMigCapableError,
    UnknownMigProfileError,
    UnknownModelError,
    fit_layout,
    layout_problems,
    lookup_model,
    mig_profiles,
    mig_slices,
    placement_conflicts,
    product_label,
)

_FIXTURE_ROOTS = (Path(__file__).resolve().parents[1] / "fixtures", Path("/work/shared/fixtures"))


def fixture(relative: str) -> str:
    for root in _FIXTURE_ROOTS:
        path = root / relative
        if path.is_file():
            return path.read_text()
    pytest.skip(f"real capture {relative} not found under {', '.join(map(str, _FIXTURE_ROOTS))}")


A100_LGIP = "nvidia-smi-mig/openforbc__a100-pcie-40gb_mig-lgip.txt"
A100_LGIPP = "nvidia-smi-mig/openforbc__a100-pcie-40gb_mig-lgipp.txt"
A100_LCIP = "nvidia-smi-mig/openforbc__a100-pcie-40gb_mig-lcip-gi2.txt"
A100_LGI = "nvidia-smi-mig/openforbc__a100-pcie-40gb_mig-lgi.txt"
H100_LGIP = "nvidia-smi-mig/stackhpc-slurm-appliance__4x-h100-sxm5-80gb_mig-lgip.txt"
H100_MIG_CAPTURE = "captures/nvidia_gpu_exporter__capture__linux-x86_64__nvidia-h100-mig__590.48.01.txt"
H100_CAPTURE = "captures/nvidia_gpu_exporter__capture__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
L40S_CAPTURE = "captures/nvidia_gpu_exporter__capture__linux-x86_64__nvidia-l40s__595.80.txt"
A100_XML = "nvidia-smi-xml/telegraf__a100-sxm4-v12.xml"
T4_XML = "nvidia-smi-xml/telegraf__tesla-t4.xml"
H100_Q = "nvidia-smi-text/gpud__nvidia-smi-query.535.183.01.out.0.valid"
H200_DEVICE = "device/h200__580.159.04"  # scripts/device-check.sh on a lent H200 (tests/fixtures/SOURCES.md)


# --- local readers for the captures -----------------------------------------------------------------------

_LGIP_ROW = re.compile(
    r"^\|\s+(?P<gpu>\d+)\s+MIG (?P<name>\S+)\s+(?P<id>\d+)\s+(?P<free>\d+)/(?P<total>\d+)\s+"
    r"(?P<gib>\d+\.\d\d)\s+(?P<p2p>Yes|No)\s+(?P<sm>\d+)\s+(?P<dec>\d+)\s+(?P<enc>\d+)\s+\|$"
)
_LGIP_ROW2 = re.compile(r"^\|\s+(?P<ce>\d+)\s+(?P<jpeg>\d+)\s+(?P<ofa>\d+)\s+\|$")


def read_lgip(text: str) -> list[dict[str, str]]:
    """``nvidia-smi mig -lgip``: one dict per profile row (its two table lines merged)."""
    rows = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        first = _LGIP_ROW.match(line.strip())
        if first:
            second = _LGIP_ROW2.match(lines[i + 1].strip())
            assert second, f"profile row without its CE/JPEG/OFA line: {line!r}"
            rows.append(first.groupdict() | second.groupdict())
    return rows


def read_lgipp(text: str) -> list[tuple[int, tuple[int, ...], int]]:
    """``nvidia-smi mig -lgipp``: (profile id, start slots, size) per line."""
    found = re.findall(r"Profile ID\s+(\d+) Placements?\s*: \{([\d,]+)\}:(\d+)", text)
    return [(int(pid), tuple(int(s) for s in starts.split(",")), int(size)) for pid, starts, size in found]


def capture_section(text: str, title: str) -> str:
    """The body of one ``####``-delimited section of an nvidia_gpu_exporter capture."""
    parts = re.split(r"^#{20,}\n", text, flags=re.MULTILINE)
    for header, body in itertools.pairwise(parts):
        if f"# {title}\n" in header:
            return body
    raise AssertionError(f"no section {title!r}")


def query_gpu_row(text: str) -> dict[str, str]:
    header, row = capture_section(text, "idle :: query-gpu (csv, what the exporter parses)").splitlines()[:2]
    keys = [k.strip() for k in header.split(",")]
    values = [v.strip() for v in next(csv.reader(io.StringIO(row)))]
    return dict(zip(keys, values, strict=True))


# --- MIG tables against real -lgip / -lgipp ---------------------------------------------------------------


def assert_row_matches(row: dict[str, str], profile: catalogue.MigProfile) -> None:
    got = {
        "id": profile.profile_id,
        "total": profile.max_instances,
        "gib": f"{profile.memory_gib:.2f}",
        "p2p": "Yes" if profile.p2p else "No",
        "sm": profile.sm_count,
        "dec": profile.decoders,
        "enc": profile.encoders,
        "ce": profile.copy_engines,
        "jpeg": profile.jpeg,
        "ofa": profile.ofa,
    }
    want = {k: (row[k] if k in ("gib", "p2p") else int(row[k])) for k in got}
    assert got == want, f"{row['name']}: catalogue {got} != capture {want}"


@pytest.mark.parametrize("model", ["NVIDIA A100-PCIE-40GB", "NVIDIA A100-SXM4-40GB"])
def test_every_a100_40gb_lgip_row_matches(model: str) -> None:
    rows = read_lgip(fixture(A100_LGIP))
    assert [r["name"] for r in rows] == ["1g.5gb", "1g.5gb+me", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
    profiles = mig_profiles(model)
    for row in rows:
        assert_row_matches(row, profiles[row["name"]])


def test_every_h100_sxm_lgip_row_matches_on_all_four_gpus() -> None:
    rows = read_lgip(fixture(H100_LGIP))
    assert len(rows) == 28 and {r["gpu"] for r in rows} == {"0", "1", "2", "3"}
    profiles = mig_profiles("NVIDIA H100 80GB HBM3")
    for row in rows:
        assert_row_matches(row, profiles[row["name"]])
    assert list(profiles) == [r["name"] for r in rows if r["gpu"] == "0"]  # same set, same -lgip order


def test_every_h200_lgip_row_and_lgipp_placement_matches_the_real_h200() -> None:
    """The H200 table was NVIDIA's guide plus the H100 pattern until a lent H200 (580.159.04, MIG off) answered."""
    rows = read_lgip(fixture(f"{H200_DEVICE}/nvidia-smi-mig-lgip.txt"))
    profiles = mig_profiles("NVIDIA H200")
    assert list(profiles) == [r["name"] for r in rows]  # same set, same -lgip order
    for row in rows:
        assert_row_matches(row, profiles[row["name"]])
    placements = read_lgipp(fixture(f"{H200_DEVICE}/nvidia-smi-mig-lgipp.txt"))
    by_id = {p.profile_id: p for p in profiles.values()}
    assert len(placements) == len(by_id) == 7
    for pid, starts, size in placements:
        assert (by_id[pid].placements, by_id[pid].placement_size) == (starts, size), pid


def test_every_a100_lgipp_placement_matches() -> None:
    placements = read_lgipp(fixture(A100_LGIPP))
    assert len(placements) == 6
    by_id = {p.profile_id: p for p in mig_profiles("NVIDIA A100-PCIE-40GB").values()}
    for pid, starts, size in placements:
        assert (by_id[pid].placements, by_id[pid].placement_size) == (starts, size)


def test_a100_lgi_instances_are_a_valid_placement() -> None:
    found = re.findall(r"MIG (\S+)\s+\d+\s+\d+\s+(\d+):(\d+)", fixture(A100_LGI))
    placed = [(name, int(start)) for name, start, _size in found]
    assert placed == [("3g.20gb", 0), ("3g.20gb", 4)]
    assert placement_conflicts("NVIDIA A100-PCIE-40GB", placed) == []
    assert fit_layout("NVIDIA A100-PCIE-40GB", ["3g.20gb", "3g.20gb"]) == placed


def test_default_compute_instance_id_matches_lcip_star() -> None:
    starred = re.search(r"MIG (\S+)\s+(\d+)\*", fixture(A100_LCIP))
    assert starred is not None and starred.group(1) == "3g.20gb"
    profile = mig_profiles("NVIDIA A100-PCIE-40GB")["3g.20gb"]
    assert profile.compute_instance_profile_id == int(starred.group(2)) == 2


def test_h100_mig_devices_in_real_capture_match_profiles_and_fit() -> None:
    """The H100 capture runs 3g.40gb + 2g.20gb + 2x 1g.10gb; -L names them, -q gives each one's attributes."""
    text = fixture(H100_MIG_CAPTURE)
    names = re.findall(
        r"^\s+MIG (\S+)\s+Device\s+\d+:", capture_section(text, "capabilities :: list (-L)"), re.M
    )
    assert names == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    query = capture_section(text, "idle :: query (-q)")
    blocks = query.split("    MIG Device\n")[1:]
    assert len(blocks) == 4
    profiles = mig_profiles("NVIDIA H100 80GB HBM3")
    for name, block in zip(names, blocks, strict=True):

        def field(label: str, block: str = block) -> int:
            match = re.search(rf"{label}\s+:\s+(\d+)", block)
            assert match, label
            return int(match.group(1))

        p = profiles[name]
        assert field("Multiprocessor count") == p.sm_count
        assert field("Copy Engine count") == p.copy_engines
        assert field("Encoder count") == p.encoders
        assert field("Decoder count") == p.decoders
        assert field("OFA count") == p.ofa
        assert field("JPG count") == p.jpeg
        assert (
            int(re.search(r"Shared FB Memory Usage\n\s+Total\s+:\s+(\d+) MiB", block).group(1))
            == p.memory_mib
        )
    assert fit_layout("NVIDIA H100 80GB HBM3", names) is not None
    assert layout_problems("NVIDIA H100 80GB HBM3", names) == []


def test_a100_80gb_mig_devices_in_telegraf_xml_are_1g_20gb() -> None:
    gpu = ET.fromstring(fixture(A100_XML)).find("gpu")
    assert gpu is not None and gpu.findtext("product_name") == "NVIDIA A100-SXM4-80GB"
    devices = gpu.findall("mig_devices/mig_device")
    assert len(devices) == 4
    p = mig_profiles("NVIDIA A100-SXM4-80GB")["1g.20gb"]
    for device in devices:
        shared = device.find("device_attributes/shared")
        attributes = {child.tag: int(child.text) for child in shared}
        assert attributes == {
            "multiprocessor_count": p.sm_count,
            "copy_engine_count": p.copy_engines,
            "encoder_count": p.encoders,
            "decoder_count": p.decoders,
            "ofa_count": p.ofa,
            "jpg_count": p.jpeg,
        }
        assert device.findtext("fb_memory_usage/total") == f"{p.memory_mib} MiB"
    assert fit_layout("NVIDIA A100-SXM4-80GB", ["1g.20gb"] * 4) is not None


# Spot checks from public captures found with the code search (see mig.py's docstring for each source):
# (model, profile, id, Instances Total, GiB as -lgip prints it, SM, placements, placement size)
PUBLIC_ROWS = [
    ("NVIDIA A100-PCIE-40GB", "1g.10gb", 15, 4, "9.75", 14, (0, 2, 4, 6), 2),
    ("NVIDIA A100 80GB PCIe", "1g.10gb", 19, 7, "9.50", 14, (0, 1, 2, 3, 4, 5, 6), 1),
    ("NVIDIA A100 80GB PCIe", "7g.80gb", 0, 1, "79.00", 98, (0,), 8),
    ("NVIDIA A30", "1g.6gb+me", 21, 1, "5.81", 14, (0, 1, 2, 3), 1),
    ("NVIDIA A30", "2g.12gb+me", 6, 1, "11.69", 28, (0, 2), 2),
    ("NVIDIA A30", "4g.24gb", 0, 1, "23.44", 56, (0,), 4),
    ("NVIDIA H100 PCIe", "2g.20gb", 14, 3, "19.62", 30, (0, 2, 4), 2),
    ("NVIDIA H100 PCIe", "7g.80gb", 0, 1, "79.25", 114, (0,), 8),
    ("NVIDIA H100 NVL", "1g.24gb", 15, 4, "21.62", 26, (0, 2, 4, 6), 2),
    ("NVIDIA H100 NVL", "3g.47gb", 9, 2, "46.38", 60, (0, 4), 4),
    ("NVIDIA H100 NVL", "7g.94gb", 0, 1, "93.12", 132, (0,), 8),
    ("NVIDIA H200", "1g.18gb", 19, 7, "16.00", 16, (0, 1, 2, 3, 4, 5, 6), 1),
    ("NVIDIA H200", "2g.35gb", 14, 3, "32.50", 32, (0, 2, 4), 2),
    ("NVIDIA H200", "3g.71gb", 9, 2, "69.75", 60, (0, 4), 4),
    ("NVIDIA H200", "7g.141gb", 0, 1, "140.00", 132, (0,), 8),
]


@pytest.mark.parametrize(("model", "name", "pid", "total", "gib", "sms", "starts", "size"), PUBLIC_ROWS)
def test_public_capture_rows(
    model: str, name: str, pid: int, total: int, gib: str, sms: int, starts: tuple[int, ...], size: int
) -> None:
    p = mig_profiles(model)[name]
    assert (p.profile_id, p.max_instances, f"{p.memory_gib:.2f}", p.sm_count) == (pid, total, gib, sms)
    assert (p.placements, p.placement_size) == (starts, size)


EXPECTED_PROFILE_NAMES = {
    "NVIDIA A100-SXM4-40GB": ["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"],
    "NVIDIA A100-PCIE-40GB": ["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"],
    "NVIDIA A100-SXM4-80GB": ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "NVIDIA A100 80GB PCIe": ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "NVIDIA A30": ["1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"],
    "NVIDIA H100 80GB HBM3": ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "NVIDIA H100 PCIe": ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "NVIDIA H100 NVL": ["1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"],
    "NVIDIA H200": ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"],
    # NVIDIA's MIG user guide, "Supported MIG Profiles" (B200 and RTX PRO 6000 Blackwell tables); GB200 and B300
    # from NVIDIA mig-parted's config-default.yaml (see gpuready.nvidia.mig)
    "NVIDIA B200": ["1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"],
    "NVIDIA GB200": ["1g.23gb", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb"],
    "NVIDIA B300 SXM6 AC": ["1g.34gb", "1g.67gb", "2g.67gb", "3g.135gb", "4g.135gb", "7g.269gb"],
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": [
        "1g.24gb", "1g.24gb+me", "1g.24gb+gfx", "1g.24gb+me.all", "1g.24gb-me",
        "2g.48gb", "2g.48gb+gfx", "2g.48gb+me.all", "2g.48gb-me", "4g.96gb", "4g.96gb+gfx",
    ],
}  # fmt: skip


def test_profile_sets_per_model() -> None:
    assert {m.name for m in MODELS.values() if m.mig_capable} == set(EXPECTED_PROFILE_NAMES)
    for model, names in EXPECTED_PROFILE_NAMES.items():
        assert list(mig_profiles(model)) == names, model


@pytest.mark.parametrize("model", sorted(EXPECTED_PROFILE_NAMES))
def test_table_invariants(model: str) -> None:
    compute_total, memory_total = mig_slices(model)
    gpu = lookup_model(model)
    profiles = mig_profiles(model)
    for p in profiles.values():
        assert p.compute_slices == int(p.name.split("g.")[0])
        assert p.memory_slices == p.placement_size
        assert f"{p.memory_mib / 1024:.2f}" == f"{p.memory_gib:.2f}"
        assert 1 <= p.max_instances <= len(p.placements)
        assert all(0 <= s <= memory_total - p.placement_size for s in p.placements)
        assert p.compute_slices <= compute_total and p.sm_count <= gpu.sm_count
        assert p.memory_mib < gpu.memory_mib
        # mig-parted's all-<profile> configs: the maximum of every profile must fit on its own
        assert fit_layout(model, [p.name] * p.max_instances) is not None, p.name
        assert fit_layout(model, [p.name] * (p.max_instances + 1)) is None, p.name
    full = max(profiles.values(), key=lambda p: p.compute_slices)
    assert (full.compute_slices, full.memory_slices, full.max_instances) == (compute_total, memory_total, 1)


def test_resource_names() -> None:
    profiles = mig_profiles("NVIDIA H100 80GB HBM3")
    assert profiles["1g.10gb"].resource_name == "nvidia.com/mig-1g.10gb"
    assert profiles["1g.10gb+me"].resource_name == "nvidia.com/mig-1g.10gb.me"
    assert profiles["7g.80gb"].resource_name == "nvidia.com/mig-7g.80gb"
    assert profiles["1g.10gb+me"].media_extensions and not profiles["1g.10gb"].media_extensions


def test_mig_profiles_by_alias_and_for_non_mig_models() -> None:
    assert mig_profiles("h100-sxm") == mig_profiles("NVIDIA H100 80GB HBM3")
    assert mig_slices("A30") == (4, 4) and mig_slices("H200") == (7, 8)
    for name in ("Tesla T4", "NVIDIA L4", "NVIDIA L40S"):
        with pytest.raises(NotMigCapableError, match=f"{name} does not support MIG"):
            mig_profiles(name)
    with pytest.raises(UnknownModelError):
        mig_profiles("NVIDIA GB300")


# --- whole-GPU models against real captures ---------------------------------------------------------------


@pytest.mark.parametrize("capture", [H100_CAPTURE, H100_MIG_CAPTURE, L40S_CAPTURE])
def test_query_gpu_csv_matches_model(capture: str) -> None:
    row = query_gpu_row(fixture(capture))
    model = MODELS[row["name"]]
    assert row["pci.device_id"] == model.pci_device_id
    assert row["memory.total [MiB]"] == f"{model.memory_mib} MiB"
    assert row["compute_cap"] == "{}.{}".format(*model.compute_capability)
    assert row["power.default_limit [W]"] == f"{model.power_limit_w}.00 W"
    assert (row["pcie.link.gen.gpumax"], row["pcie.link.width.max"]) == (
        str(model.max_pcie_gen),
        str(model.max_pcie_width),
    )


def test_h100_nvidia_smi_q_matches_model() -> None:
    text = fixture(H100_Q)
    model = lookup_model(re.search(r"Product Name\s+: (.+)", text).group(1))
    assert model.name == "NVIDIA H100 80GB HBM3"
    assert re.search(r"Device Id\s+: (\S+)", text).group(1) == model.pci_device_id
    assert re.search(r"FB Memory Usage\n\s+Total\s+: (\d+) MiB", text).group(1) == str(model.memory_mib)
    assert re.search(r"Default Power Limit\s+: ([\d.]+) W", text).group(1) == f"{model.power_limit_w}.00"


@pytest.mark.parametrize(
    ("capture", "name", "power"), [(T4_XML, "Tesla T4", True), (A100_XML, "NVIDIA A100-SXM4-80GB", False)]
)
def test_nvidia_smi_xml_matches_model(capture: str, name: str, power: bool) -> None:
    gpu = ET.fromstring(fixture(capture)).find("gpu")
    model = MODELS[gpu.findtext("product_name")]
    assert model.name == name
    assert "0x" + gpu.findtext("pci/pci_device_id") == model.pci_device_id
    assert gpu.findtext("fb_memory_usage/total") == f"{model.memory_mib} MiB"
    assert gpu.findtext("pci/pci_gpu_link_info/pcie_gen/max_link_gen") == str(model.max_pcie_gen)
    assert gpu.findtext("pci/pci_gpu_link_info/link_widths/max_link_width") == f"{model.max_pcie_width}x"
    if power:  # the A100 capture is a 500 W HGX variant; the catalogue keeps the 400 W datasheet default
        limit = gpu.findtext("power_readings/default_power_limit") or gpu.findtext(
            "gpu_power_readings/default_power_limit"
        )
        assert limit == f"{model.power_limit_w}.00 W"


def test_required_models_present_with_exact_names() -> None:
    assert set(MODELS) == {
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA A100-PCIE-40GB",
        "NVIDIA A100 80GB PCIe",
        "NVIDIA A30",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H100 PCIe",
        "NVIDIA H100 NVL",
        "NVIDIA H200",
        "NVIDIA B200",
        "NVIDIA GB200",
        "NVIDIA B300 SXM6 AC",
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "NVIDIA L4",
        "NVIDIA L40S",
        "Tesla T4",
    }
    assert all(m.name == key for key, m in MODELS.items())
    families = {m.name: m.family for m in MODELS.values()}
    assert families["Tesla T4"] == "turing" and families["NVIDIA L4"] == "ada-lovelace"
    assert families["NVIDIA A30"] == "ampere" and families["NVIDIA H200"] == "hopper"
    assert {m.family for m in MODELS.values()} == {"turing", "ampere", "ada-lovelace", "hopper", "blackwell"}
    assert MODELS["NVIDIA H100 80GB HBM3"].nvlink_links == 18 and MODELS["NVIDIA L40S"].nvlink_links == 0


# --- names, aliases, labels -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spelling", "name"),
    [
        ("H100-SXM5-80GB", "NVIDIA H100 80GB HBM3"),
        ("h100-sxm", "NVIDIA H100 80GB HBM3"),
        ("nvidia h100 80gb hbm3", "NVIDIA H100 80GB HBM3"),
        ("NVIDIA-H100-80GB-HBM3", "NVIDIA H100 80GB HBM3"),  # the GFD product label
        ("h100_pcie", "NVIDIA H100 PCIe"),
        ("H100-NVL", "NVIDIA H100 NVL"),
        ("H200", "NVIDIA H200"),
        ("a100-sxm4-40gb", "NVIDIA A100-SXM4-40GB"),
        ("A100-80GB-PCIE", "NVIDIA A100 80GB PCIe"),
        ("A100-PCIE-40GB", "NVIDIA A100-PCIE-40GB"),
        ("A30", "NVIDIA A30"),
        ("t4", "Tesla T4"),
        ("Tesla-T4", "Tesla T4"),
        ("l40s", "NVIDIA L40S"),
        ("L4", "NVIDIA L4"),
    ],
)
def test_lookup_by_alias(spelling: str, name: str) -> None:
    assert lookup_model(spelling).name == name


def test_unknown_model_error_lists_known_names() -> None:
    with pytest.raises(UnknownModelError) as info:
        lookup_model("H100")  # ambiguous between SXM, PCIe and NVL, so deliberately not an alias
    assert isinstance(info.value, KeyError)
    message = str(info.value)
    assert message.startswith(
        "unknown GPU model 'H100'; known models (aliases): Tesla T4 (T4, Tesla-T4, NVIDIA-T4);"
    )
    assert all(name in message for name in MODELS)


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("Tesla T4", "Tesla-T4"),
        ("NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"),
        ("NVIDIA A100 80GB PCIe", "NVIDIA-A100-80GB-PCIe"),
        ("h100-sxm", "NVIDIA-H100-80GB-HBM3"),  # an alias labels as the GPU the driver reports
        ("NVIDIA GeForce RTX 4090", "NVIDIA-GeForce-RTX-4090"),  # unknown: sanitised as given
        ("Quadro RTX 6000/8000  (x)", "Quadro-RTX-60008000-x"),  # GFD drops '/', '(', ')' and repeated spaces
    ],
)
def test_product_label(name: str, label: str) -> None:
    assert product_label(name) == label


def test_product_label_for_mig_devices() -> None:
    assert product_label("NVIDIA A100-SXM4-40GB", "1g.5gb") == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    assert product_label("NVIDIA H100 80GB HBM3", "1g.10gb+me") == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gbme"


# --- fitting layouts --------------------------------------------------------------------------------------

GPUS_80GB = ["NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"]

FITS_80GB = [
    ["3g.40gb", "3g.40gb"],
    ["4g.40gb", "3g.40gb"],
    ["1g.10gb"] * 7,
    ["1g.10gb", "3g.40gb", "1g.10gb", "2g.20gb"],
    ["1g.20gb"] * 4,
    ["7g.80gb"],
    ["2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"],
    ["2g.20gb", "2g.20gb", "2g.20gb", "1g.20gb"],
    ["1g.10gb+me", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"],
    ["1g.20gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"],
    ["4g.40gb", "2g.20gb", "1g.10gb"],
    [],
]
DOES_NOT_FIT_80GB = [
    ["4g.40gb", "4g.40gb"],
    ["1g.10gb"] * 8,
    ["1g.20gb"] * 5,
    ["7g.80gb", "1g.10gb"],
    ["3g.40gb", "3g.40gb", "1g.10gb"],
    ["1g.10gb+me", "1g.10gb+me"],
    ["4g.40gb", "2g.20gb", "2g.20gb"],
]


def check_placement(model: str, profiles: list[str], placed: list[tuple[str, int]]) -> None:
    assert sorted(name for name, _ in placed) == sorted(profiles)
    assert placement_conflicts(model, placed) == []
    sizes = [mig_profiles(model)[name].placement_size for name, _ in placed]
    assert sizes == sorted(sizes, reverse=True)  # created largest first


@pytest.mark.parametrize("model", GPUS_80GB)
@pytest.mark.parametrize("profiles", FITS_80GB, ids=lambda p: "+".join(p) or "empty")
def test_fits_on_80gb_gpus(model: str, profiles: list[str]) -> None:
    placed = fit_layout(model, profiles)
    assert placed is not None
    check_placement(model, profiles, placed)
    assert layout_problems(model, profiles) == []


@pytest.mark.parametrize("model", GPUS_80GB)
@pytest.mark.parametrize("profiles", DOES_NOT_FIT_80GB, ids=lambda p: "+".join(p))
def test_does_not_fit_on_80gb_gpus(model: str, profiles: list[str]) -> None:
    assert fit_layout(model, profiles) is None
    assert layout_problems(model, profiles) != []


def test_fit_is_order_independent() -> None:
    layout = ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    results = {tuple(fit_layout("H100-SXM", list(p))) for p in itertools.permutations(layout)}
    assert results == {(("3g.40gb", 4), ("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3))}


@pytest.mark.parametrize(
    ("model", "profiles"),
    [
        ("NVIDIA A100-SXM4-40GB", ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]),  # mig-parted all-balanced
        ("NVIDIA A100-PCIE-40GB", ["1g.10gb"] * 4),
        ("NVIDIA A100-PCIE-40GB", ["4g.20gb", "3g.20gb"]),
        ("NVIDIA A30", ["1g.6gb", "1g.6gb", "2g.12gb"]),  # all-balanced
        ("NVIDIA A30", ["1g.6gb"] * 4),
        ("NVIDIA A30", ["2g.12gb+me", "1g.6gb", "1g.6gb"]),
        ("NVIDIA A30", ["1g.6gb+me", "1g.6gb", "2g.12gb"]),
        ("NVIDIA H100 NVL", ["1g.12gb", "1g.12gb", "2g.24gb", "3g.47gb"]),  # all-balanced
        ("NVIDIA H100 NVL", ["3g.47gb", "1g.24gb", "1g.12gb"]),  # the Azure guide's -cgi 9,15,19
        ("NVIDIA H200", ["1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"]),  # all-balanced
        ("NVIDIA H200", ["2g.35gb"] + ["1g.18gb"] * 5),  # a real H200's layout
    ],
)
def test_fits_on_other_gpus(model: str, profiles: list[str]) -> None:
    placed = fit_layout(model, profiles)
    assert placed is not None
    check_placement(model, profiles, placed)


def test_a30_fit_and_refusals() -> None:
    assert fit_layout("A30", ["2g.12gb", "1g.6gb", "1g.6gb"]) == [
        ("2g.12gb", 0),
        ("1g.6gb", 2),
        ("1g.6gb", 3),
    ]
    assert fit_layout("A30", ["4g.24gb", "1g.6gb"]) is None
    assert fit_layout("A30", ["1g.6gb"] * 5) is None
    assert fit_layout("A30", ["1g.6gb+me", "2g.12gb+me"]) is None  # one OFA/JPEG on the whole GPU


def test_fit_layout_errors() -> None:
    with pytest.raises(
        UnknownMigProfileError, match=r"unknown MIG profile '1g\.5gb' for NVIDIA H100 80GB HBM3"
    ):
        fit_layout("H100-SXM", ["1g.5gb"])
    with pytest.raises(NotMigCapableError):
        fit_layout("L40S", ["1g.10gb"])


# --- layout_problems messages -----------------------------------------------------------------------------

H100 = "NVIDIA H100 80GB HBM3"


def test_problem_unknown_profile_lists_model_profiles() -> None:
    assert layout_problems(H100, ["1g.5gb", "3g.40gb", "1g.5gb"]) == [
        "unknown MIG profile '1g.5gb' for NVIDIA H100 80GB HBM3; its profiles are: "
        "1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"
    ]


def test_problem_unknown_profile_suggests_canonical_spelling() -> None:
    problems = layout_problems("A30", ["MIG 1g.6gb", "1g.6gb.me"])
    assert problems == [
        "unknown MIG profile 'MIG 1g.6gb' for NVIDIA A30 (did you mean '1g.6gb'?); "
        "its profiles are: 1g.6gb, 1g.6gb+me, 2g.12gb, 2g.12gb+me, 4g.24gb",
        "unknown MIG profile '1g.6gb.me' for NVIDIA A30 (did you mean '1g.6gb+me'?); "
        "its profiles are: 1g.6gb, 1g.6gb+me, 2g.12gb, 2g.12gb+me, 4g.24gb",
    ]


def test_problem_over_per_profile_maximum_and_slices() -> None:
    assert layout_problems(H100, ["4g.40gb", "4g.40gb"]) == [
        "2 x 4g.40gb requested but NVIDIA H100 80GB HBM3 allows at most 1 4g.40gb instance",
        "the layout asks for 8 compute and 8 memory slices but NVIDIA H100 80GB HBM3 has 7 compute and 8 memory slices",
    ]
    assert layout_problems(H100, ["1g.20gb"] * 5) == [
        "5 x 1g.20gb requested but NVIDIA H100 80GB HBM3 allows at most 4 1g.20gb instances",
        "the layout asks for 5 compute and 10 memory slices but NVIDIA H100 80GB HBM3 has 7 compute and 8 memory slices",
    ]


def test_problem_slices_only() -> None:
    assert layout_problems(H100, ["3g.40gb", "3g.40gb", "1g.10gb"]) == [
        "the layout asks for 7 compute and 9 memory slices but NVIDIA H100 80GB HBM3 has 7 compute and 8 memory slices"
    ]
    assert layout_problems("A30", ["4g.24gb", "1g.6gb"]) == [
        "the layout asks for 5 compute and 5 memory slices but NVIDIA A30 has 4 compute and 4 memory slices"
    ]


def test_problem_media_engines() -> None:
    assert layout_problems("A30", ["1g.6gb+me", "2g.12gb+me"]) == [
        "the layout needs 2 JPEG decoders (1g.6gb+me, 2g.12gb+me) but NVIDIA A30 has 1 in all",
        "the layout needs 2 OFA units (1g.6gb+me, 2g.12gb+me) but NVIDIA A30 has 1 in all",
    ]


def test_problem_model_without_mig_or_unknown() -> None:
    assert layout_problems("NVIDIA L4", ["1g.10gb"]) == ["NVIDIA L4 does not support MIG"]
    assert layout_problems("GB300", ["1g.10gb"])[0].startswith("unknown GPU model 'GB300'")


def test_placement_conflicts() -> None:
    assert placement_conflicts(H100, [("7g.80gb", 0), ("1g.10gb", 3), ("1g.10gb", 5)]) == [
        "7g.80gb at slot 0 overlaps 1g.10gb at slot 3",
        "7g.80gb at slot 0 overlaps 1g.10gb at slot 5",
    ]
    assert placement_conflicts(H100, [("3g.40gb", 2)]) == [
        "3g.40gb cannot start at slot 2; valid starts are [0, 4]"
    ]
