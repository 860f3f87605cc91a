"""The emulated NVIDIA tools answer like the real ones: every profile parses with the project's parsers into
that profile's GPUs, the XML has the element paths of real v12/v13 captures, MIG tables match real captures
byte for byte, MIG mode changes wait for a reboot.

The tools run as the lab hosts run them: the static tools' ELF (gpuready/lab/silicon/tools) under each tool's
name, with the hardware and driver state files in a temp dir.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from emulated import Machine
from static_tools import cap_minor, static_tools

from gpuready.lab import faults, hardware
from gpuready.lab.emulator import nvemu
from gpuready.nvidia import catalogue, smi

FIXTURES = Path(__file__).parents[1] / "fixtures"


class Host(Machine):
    """A lab host whose tool is nvidia-smi: ``smi``/``ok`` run it, ``reboot`` gives the host a new boot id."""

    def smi(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return self.run("nvidia-smi", *args, **env)

    def ok(self, *args: str, **env: str) -> str:
        result = self.smi(*args, **env)
        assert result.returncode == 0, f"{args}: rc={result.returncode}\n{result.stdout}\n{result.stderr}"
        return result.stdout

    def reboot(self, boot_id: str) -> None:
        self.env["GPUREADY_LAB_BOOT_ID"] = boot_id


def xml_paths(text: str) -> set[str]:
    paths: set[str] = set()

    def walk(element: ET.Element, prefix: str) -> None:
        path = f"{prefix}/{element.tag}"
        paths.add(path)
        for child in element:
            walk(child, path)

    walk(ET.fromstring(text), "")
    return paths


def fixture_paths(*names: str) -> set[str]:
    out: set[str] = set()
    for name in names:
        out |= xml_paths((FIXTURES / "nvidia-smi-xml" / name).read_text())
    return out


@pytest.mark.parametrize("profile", sorted(hardware.PROFILES))
def test_query_xml_parses_to_profile_gpus(tmp_path: Path, profile: str) -> None:
    host = Host(tmp_path, profile)
    report = smi.parse_query_xml(host.ok("-q", "-x"))
    prof = hardware.PROFILES[profile]
    model = catalogue.lookup_model(prof.model)
    assert report.driver_version == "580.178.04"
    assert report.cuda_version == "13.0"
    assert report.attached_gpus == prof.gpu_count
    assert [g.name for g in report.gpus] == [model.name] * prof.gpu_count
    assert [g.uuid for g in report.gpus] == [g["uuid"] for g in host.hw["gpus"]]
    assert [g.pci_bus_id for g in report.gpus] == [g["pci_bus_id"] for g in host.hw["gpus"]]
    assert all(g.memory_total_mib == model.memory_mib for g in report.gpus)
    assert all(g.pcie_link_gen_current == model.max_pcie_gen for g in report.gpus)
    assert all(g.pcie_link_width_current == model.max_pcie_width for g in report.gpus)
    assert all(g.ecc_uncorrectable_volatile == 0 for g in report.gpus)
    assert all(g.mig_mode_current == ("Disabled" if model.mig_capable else None) for g in report.gpus)


@pytest.mark.parametrize("profile", sorted(hardware.PROFILES))
def test_query_text_parses_to_the_same_gpus_as_the_xml(tmp_path: Path, profile: str) -> None:
    host = Host(tmp_path, profile)
    if hardware.PROFILES[profile].model == "NVIDIA A100-SXM4-80GB":
        host.ok("-mig", "1")
        host.reboot("boot-2")
        host.ok("mig", "-i", "0", "-cgi", "9,14,19,19", "-C")
    text = smi.parse_query_text(host.ok("-q"))
    xml = smi.parse_query_xml(host.ok("-q", "-x"))
    assert text.gpus == xml.gpus
    assert (text.driver_version, text.cuda_version, text.attached_gpus) == (
        xml.driver_version,
        xml.cuda_version,
        xml.attached_gpus,
    )


def test_query_display_filter(tmp_path: Path) -> None:
    out = Host(tmp_path, "t4-1").ok("-q", "-d", "PAGE_RETIREMENT")
    assert out.splitlines()[-5:] == [
        "    Retired Pages",
        "        Single Bit ECC                                 : 0",
        "        Double Bit ECC                                 : 0",
        "        Pending Page Blacklist                         : No",
        "",
    ]


def _relevant(paths: set[str]) -> set[str]:
    """Paths every datacenter GPU has; consumer-only or process-specific ones are left out."""
    skip = (
        "supported_clocks",
        "process_info",
        "/gpu_temp_max_threshold",
        "/gpu_temp_slow_threshold",
        "/gpu_temp_max_gpu_threshold",
        "/gpu_temp_max_mem_threshold",
    )
    return {p for p in paths if not any(s in p for s in skip)}


MIG_DEVICE_PATHS = {p for p in fixture_paths("telegraf__a100-sxm4-v12.xml") if "/mig_device" in p}


def test_xml_v13_has_the_element_paths_of_real_v13_captures(tmp_path: Path) -> None:
    host = Host(tmp_path, "h100-sxm-8", driver="595.58.03")  # the captures' driver branch (R595)
    out = host.ok("-q", "-x")
    assert '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">' in out
    real = fixture_paths("telegraf__rtx-4000-sff-ada-v13.xml", "telegraf__rtx-3080-v13.xml")
    emulated = xml_paths(out)
    assert _relevant(real) - emulated == set()
    assert emulated - real == set()


def test_xml_of_a_580_driver_has_the_paths_of_the_real_h200_capture(tmp_path: Path) -> None:
    """R580 as a lent H200 printed it (tests/fixtures/device/): no EDPp element, which R590 added."""
    out = Host(tmp_path, "h200-1", driver="580.159.04").ok("-q", "-x")
    real = xml_paths((FIXTURES / "device" / "h200__580.159.04" / "nvidia-smi-q-x.xml").read_text())
    emulated = xml_paths(out)
    assert _relevant(real) - emulated == set()
    assert emulated - real == set()


def test_xml_v12_for_a_570_driver_has_the_paths_of_the_real_570_capture(tmp_path: Path) -> None:
    host = Host(tmp_path, "a100-80gb-4", driver="570.195.03")
    out = host.ok("-q", "-x")
    assert '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">' in out
    real = fixture_paths("telegraf__rtx-3060-v12.xml")
    emulated = xml_paths(out)
    assert _relevant(real) - emulated == set()
    # The 570 capture is a GeForce (remapped rows N/A); a datacenter GPU lists its rows like v13 does.
    assert {p for p in emulated - real if "/remapped_rows/" not in p} == set()


def test_mig_device_xml_paths_match_the_real_a100_capture(tmp_path: Path) -> None:
    host = Host(tmp_path, "a100-80gb-4")
    host.ok("-i", "0", "-mig", "1")
    host.reboot("boot-2")
    host.ok("mig", "-i", "0", "-cgi", "15,15,15,15", "-C")
    out = host.ok("-q", "-x", "-i", "0")
    emulated = {p for p in xml_paths(out) if "/mig_device" in p}
    assert emulated == MIG_DEVICE_PATHS
    report = smi.parse_query_xml(out, unlisted=3)  # -i 0: one GPU of 4
    assert [(d.gpu_instance_id, d.memory_total_mib, d.sm_count) for d in report.gpus[0].mig_devices] == [
        (3, 19968, 14),
        (4, 19968, 14),
        (5, 19968, 14),
        (6, 19968, 14),
    ]


CSV_FIELDS = [
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "driver_version",
    "memory.total",
    "memory.used",
    "memory.free",
    "persistence_mode",
    "mig.mode.current",
    "mig.mode.pending",
    "temperature.gpu",
    "power.draw",
    "utilization.gpu",
    "ecc.errors.uncorrected.volatile.total",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "clocks_event_reasons.active",
    "power.limit",
]


@pytest.mark.parametrize("profile", sorted(hardware.PROFILES))
def test_query_gpu_csv_parses_to_profile_gpus(tmp_path: Path, profile: str) -> None:
    host = Host(tmp_path, profile)
    out = host.ok(f"--query-gpu={','.join(CSV_FIELDS)}", "--format=csv")
    rows = smi.parse_query_gpu_csv(out, CSV_FIELDS)
    model = catalogue.lookup_model(hardware.PROFILES[profile].model)
    assert [r["uuid"] for r in rows] == [g["uuid"] for g in host.hw["gpus"]]
    assert {r["memory.total"] for r in rows} == {model.memory_mib}
    assert {r["pcie.link.gen.max"] for r in rows} == {model.max_pcie_gen}
    assert {r["ecc.errors.uncorrected.volatile.total"] for r in rows} == {0}
    bare = host.ok(f"--query-gpu={','.join(CSV_FIELDS)}", "--format=csv,noheader,nounits")
    assert smi.parse_query_gpu_csv(bare, CSV_FIELDS) == rows


def test_csv_header_and_units_are_spelled_like_real_nvidia_smi(tmp_path: Path) -> None:
    host = Host(tmp_path, "h100-sxm-8")
    out = host.ok(
        "-i", "0", "--query-gpu=memory.total,power.draw,utilization.gpu,temperature.gpu,name", "--format=csv"
    )
    header, row = out.splitlines()
    assert header == "memory.total [MiB], power.draw [W], utilization.gpu [%], temperature.gpu, name"
    assert row == "81559 MiB, 69.85 W, 0 %, 41, NVIDIA H100 80GB HBM3"
    assert host.ok("-i", "0", "--query-gpu=memory.total", "--format=csv,noheader,nounits") == "81559\n"
    aliased = host.ok("-i", "0", "--query-gpu=gpu_name,gpu_bus_id,vbios_version", "--format=csv")
    assert (
        aliased
        == "name, pci.bus_id, vbios_version\nNVIDIA H100 80GB HBM3, 00000000:18:00.0, 96.00.A5.00.01\n"
    )


def test_unknown_csv_field_is_refused_like_the_real_tool(tmp_path: Path) -> None:
    result = Host(tmp_path, "t4-1").smi("--query-gpu=index,bogus", "--format=csv")
    assert result.returncode == 2
    assert result.stdout.startswith('Field "bogus" is not a valid field to query.')


@pytest.mark.parametrize("profile", sorted(hardware.PROFILES))
def test_list_parses_to_profile_gpus(tmp_path: Path, profile: str) -> None:
    host = Host(tmp_path, profile)
    listed = smi.parse_list(host.ok("-L"))
    assert [(g.index, g.name, g.uuid) for g in listed] == [
        (g["index"], g["name"], g["uuid"]) for g in host.hw["gpus"]
    ]


@pytest.mark.parametrize(
    ("profile", "links"), [("h100-sxm-8", 18), ("a100-80gb-4", 12), ("l40s-2", 0), ("t4-1", 0)]
)
def test_nvlink_status_parses(tmp_path: Path, profile: str, links: int) -> None:
    host = Host(tmp_path, profile)
    status = smi.parse_nvlink_status(host.ok("nvlink", "-s"))
    assert sorted(status) == list(range(hardware.PROFILES[profile].gpu_count))
    assert {len(v) for v in status.values()} == {links}


def test_nvlink_status_format_matches_real_h100(tmp_path: Path) -> None:
    out = Host(tmp_path, "h100-sxm-8").ok("nvlink", "-s", "-i", "0").splitlines()
    assert out[1:3] == ["\t Link 0: 26.562 GB/s", "\t Link 1: 26.562 GB/s"]
    assert len(out) == 19


def test_default_table_columns_line_up_like_the_real_table(tmp_path: Path) -> None:
    out = Host(tmp_path, "h100-sxm-8").ok()
    lines = out.splitlines()
    assert (
        lines[2]
        == "| NVIDIA-SMI 580.178.04             Driver Version: 580.178.04     CUDA Version: 13.0     |"
    )
    assert lines[8].startswith("|   0  NVIDIA H100 80GB HBM3         Off  |   00000000:18:00.0 Off |")
    assert (
        lines[9]
        == "| N/A   41C    P0             69W /  700W |       0MiB /  81559MiB |      0%      Default |"
    )
    assert {len(line) for line in lines[1:-1] if line} == {91}


def test_version(tmp_path: Path) -> None:
    out = Host(tmp_path, "t4-1", driver="570.195.03").ok("--version")
    assert out == (
        "NVIDIA-SMI version  : 570.195.03\nNVML version        : 570.195\n"
        "DRIVER version      : 570.195.03\nCUDA Version        : 12.8\n"
    )


def test_topo_matrix_shows_nvswitch_links(tmp_path: Path) -> None:
    out = Host(tmp_path, "h100-sxm-8").ok("topo", "-m")
    rows = [line.split("\t") for line in out.splitlines()[1:9]]
    assert rows[0][:3] == ["GPU0", " X ", "NV18"]
    assert all(row[0] == f"GPU{i}" for i, row in enumerate(rows))


# ---- MIG -----------------------------------------------------------------------------------------------
def test_mig_mode_is_pending_until_reboot(tmp_path: Path) -> None:
    host = Host(tmp_path, "a100-80gb-4")
    out = host.ok("-i", "0", "-mig", "1")
    assert out == (
        "Warning: MIG mode is in pending enable state for GPU 00000000:07:00.0:Not Supported\n"
        "Reboot the system or try nvidia-smi --gpu-reset to make MIG mode effective on GPU 00000000:07:00.0\n"
        "All done.\n"
    )
    fields = ["index", "mig.mode.current", "mig.mode.pending"]
    rows = smi.parse_query_gpu_csv(host.ok("--query-gpu=" + ",".join(fields), "--format=csv"), fields)
    assert [(r["mig.mode.current"], r["mig.mode.pending"]) for r in rows[:2]] == [
        ("Disabled", "Enabled"),
        ("Disabled", "Disabled"),
    ]
    listing = host.smi("mig", "-lgi")
    assert (listing.returncode, listing.stdout) == (6, "No MIG-enabled devices found.\n")
    host.reboot("boot-2")
    rows = smi.parse_query_gpu_csv(host.ok("--query-gpu=" + ",".join(fields), "--format=csv"), fields)
    assert (rows[0]["mig.mode.current"], rows[1]["mig.mode.current"]) == ("Enabled", "Disabled")
    assert host.smi("mig", "-lgi").stdout == "No GPU instances found: Not Found\n"


def test_mig_on_a_gpu_without_mig(tmp_path: Path) -> None:
    host = Host(tmp_path, "l4-1")
    result = host.smi("-mig", "1")
    assert result.returncode == 3
    assert result.stdout.startswith("Unable to enable MIG Mode for GPU 00000000:00:03.0: Not Supported\n")
    assert host.smi("mig", "-lgip").stdout == "No MIG-enabled devices found.\n"


@pytest.fixture
def a100_mig(tmp_path: Path) -> Host:
    host = Host(tmp_path, "a100-80gb-4")
    host.ok("-i", "0", "-mig", "1")
    host.reboot("boot-2")
    return host


def test_mig_layout_created_with_cgi_is_listed_by_lgi_lci_and_L(a100_mig: Host) -> None:
    host = a100_mig
    out = host.ok("mig", "-i", "0", "-cgi", "9,14,19,19", "-C")
    assert out.splitlines()[:2] == [
        "Successfully created GPU instance ID  2 on GPU  0 using profile MIG 3g.40gb (ID  9)",
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  2 using profile MIG 3g.40gb (ID  2)",
    ]
    gis = smi.parse_mig_lgi(host.ok("mig", "-lgi"))
    assert sorted((g.gpu, g.name, g.profile_id) for g in gis) == [
        (0, "1g.10gb", 19),
        (0, "1g.10gb", 19),
        (0, "2g.20gb", 14),
        (0, "3g.40gb", 9),
    ]
    # No two instances share a memory slice, and every one sits at a placement the profile allows.
    profiles = {p.profile_id: p for p in catalogue.mig_profiles("NVIDIA A100-SXM4-80GB").values()}
    slots = [s for g in gis for s in range(g.placement_start, g.placement_start + g.placement_size)]
    assert len(slots) == len(set(slots))
    assert all(g.placement_start in profiles[g.profile_id].placements for g in gis)
    cis = smi.parse_mig_lci(host.ok("mig", "-lci"))
    assert sorted(c.gpu_instance_id for c in cis) == sorted(g.instance_id for g in gis)
    listed = smi.parse_list(host.ok("-L"))
    assert [d.profile for d in listed[0].mig_devices] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert listed[1].mig_devices == ()
    assert len({d.uuid for d in listed[0].mig_devices}) == 4
    assert all(d.uuid.startswith("MIG-") for d in listed[0].mig_devices)
    # A reboot destroys the instances (they are not persistent), MIG mode stays.
    host.reboot("boot-3")
    assert host.smi("mig", "-lgi").stdout == "No GPU instances found: Not Found\n"


def test_in_a_container_the_tools_see_only_its_device_nodes(a100_mig: Host) -> None:
    """GPUREADY_LAB_CONTAINER_DEVICES stands in for the device nodes a container was given: NVML finds those GPUs,
    numbered from 0, and the MIG devices whose GPU and compute instance capabilities it has; no MIG change."""
    host = a100_mig
    host.ok("mig", "-i", "0", "-cgi", "9,14", "-C", "-i", "0")
    full = smi.parse_list(host.ok("-L"))
    gis = sorted(g.instance_id for g in smi.parse_mig_lgi(host.ok("mig", "-lgi")))
    second = [
        f"/dev/nvidia-caps/nvidia-cap{m}"
        for m in (cap_minor(host.env, 0, gis[1]), cap_minor(host.env, 0, gis[1], 0))
    ]
    # the second MIG device of GPU 0 and the whole GPU 2; GPU 2's XID fault follows it to its new index
    container = {nvemu.CONTAINER_DEVICES: ",".join(["/dev/nvidia0", *second, "/dev/nvidia2"])}
    host.hw = faults.apply_fault(host.hw, "xid-48", 2)
    hardware.write_hardware(host.hw_path, host.hw)
    seen = host.ok("-L", **container)
    assert seen == (
        f"GPU 0: {full[0].name} (UUID: {full[0].uuid})\n"
        f"  MIG {full[0].mig_devices[1].profile:<11} Device  0: (UUID: {full[0].mig_devices[1].uuid})\n"
        f"GPU 1: {full[2].name} (UUID: {full[2].uuid})\n"
    )
    query = ["--query-gpu=index,uuid,ecc.errors.uncorrected.volatile.total", "--format=csv,noheader"]
    assert host.ok(*query, **container) == f"0, {full[0].uuid}, 0\n1, {full[2].uuid}, 1\n"
    assert host.smi("-L", **{nvemu.CONTAINER_DEVICES: ""}).stdout == "No devices were found\n"
    # a container has no MIG configuration capability: the driver refuses it any change
    refused = host.smi("mig", "-dci", "-i", "0", **container)
    assert (refused.returncode, refused.stdout) == (
        4,
        "Unable to change MIG instances: Insufficient Permissions\n",
    )
    assert len(smi.parse_list(host.ok("-L"))[0].mig_devices) == 2


def test_mig_no_room_and_destroy(a100_mig: Host) -> None:
    host = a100_mig
    host.ok("mig", "-i", "0", "-cgi", "0", "-C")
    full = host.smi("mig", "-i", "0", "-cgi", "19")
    assert full.returncode != 0
    assert full.stdout == (
        "Unable to create a GPU instance on GPU  0 using profile 19: Insufficient Resources\n"
        "Failed to create GPU instances: Insufficient Resources\n"
    )
    busy = host.smi("mig", "-dgi")
    assert busy.returncode != 0 and "In use by another client" in busy.stdout
    assert (
        host.ok("mig", "-dci")
        == "Successfully destroyed compute instance ID  0 from GPU  0 GPU instance ID  0\n"
    )
    assert host.ok("mig", "-dgi") == "Successfully destroyed GPU instance ID  0 from GPU  0\n"
    disable = host.ok("-i", "0", "-mig", "0")
    assert "pending disable state" in disable


def test_lgip_lists_the_catalogue_profiles(a100_mig: Host) -> None:
    rows = smi.parse_mig_lgip(a100_mig.ok("mig", "-lgip"))
    table = catalogue.mig_profiles("NVIDIA A100-SXM4-80GB")
    assert [(r.name, r.profile_id, r.instances_total, r.sm_count) for r in rows] == [
        (p.name, p.profile_id, p.max_instances, p.sm_count) for p in table.values()
    ]
    assert all(r.instances_free == r.instances_total for r in rows)


def _catalogue_host(tmp_path: Path, name: str) -> Host:
    """A machine with one GPU of this catalogue model (its MIG profiles and slices), in MIG mode."""
    host = Host(tmp_path, "a100-80gb-4")
    hw = host.hw
    model = catalogue.lookup_model(name)
    table = []
    for prof in catalogue.mig_profiles(model.name).values():
        entry = {k: getattr(prof, k) for k in prof.__dataclass_fields__}
        entry["placements"] = list(prof.placements)
        table.append(entry)
    compute, memory = catalogue.mig_slices(model.name)
    hw["gpus"] = hw["gpus"][:1]
    hw["gpus"][0].update(
        name=model.name,
        memory_mib=model.memory_mib,
        mig_profiles=table,
        mig_compute_slices=compute,
        mig_memory_slices=memory,
    )
    hardware.write_hardware(host.hw_path, hw)
    host.ok("-mig", "1")
    host.reboot("boot-2")
    return host


def test_mig_tables_match_real_a100_captures_byte_for_byte(tmp_path: Path) -> None:
    """An A100-PCIE-40GB, the GPU of the real -lgip/-lgi/-lci captures."""
    host = _catalogue_host(tmp_path, "NVIDIA A100-PCIE-40GB")
    mig_fixtures = FIXTURES / "nvidia-smi-mig"
    lgip = host.ok("mig", "-lgip")
    # The capture lists the profiles its driver knew; newer catalogues add 1g.10gb (id 15).
    real_lgip = (mig_fixtures / "openforbc__a100-pcie-40gb_mig-lgip.txt").read_text()
    blocks = lgip.split("+-----------------------------------------------------------------------------+\n")
    without_15 = "+-----------------------------------------------------------------------------+\n".join(
        b for b in blocks if "MIG 1g.10gb " not in b
    )
    assert without_15 == real_lgip
    real_lgipp = (mig_fixtures / "openforbc__a100-pcie-40gb_mig-lgipp.txt").read_text()
    assert [
        ln for ln in host.ok("mig", "-lgipp").splitlines() if "ID 15" not in ln
    ] == real_lgipp.splitlines()
    host.ok("mig", "-cgi", "9,9")
    assert host.ok("mig", "-lgi") == (mig_fixtures / "openforbc__a100-pcie-40gb_mig-lgi.txt").read_text()
    lcip = (mig_fixtures / "openforbc__a100-pcie-40gb_mig-lcip-gi2.txt").read_text()
    assert host.ok("mig", "-lcip", "-gi", "2") == lcip
    host.ok("mig", "-cci", "-gi", "1")
    host.ok("mig", "-cci", "0,0,0", "-gi", "2")
    assert host.ok("mig", "-lci") == (mig_fixtures / "openforbc__a100-pcie-40gb_mig-lci.txt").read_text()
    assert (
        host.ok("mig", "-lci", "-gi", "1")
        == (mig_fixtures / "openforbc__a100-pcie-40gb_mig-lci-gi1.txt").read_text()
    )


def test_persistence_mode_set_and_lost_on_reboot(tmp_path: Path) -> None:
    host = Host(tmp_path, "t4-1")
    assert host.ok("-pm", "1") == "Enabled Legacy persistence mode for GPU 00000000:00:1E.0.\nAll done.\n"
    assert host.ok("--query-gpu=persistence_mode", "--format=csv,noheader") == "Enabled\n"
    host.reboot("boot-2")
    assert host.ok("--query-gpu=persistence_mode", "--format=csv,noheader") == "Disabled\n"


def test_compute_mode_and_timeslice_as_nvidias_dra_driver_sets_them(tmp_path: Path) -> None:
    """NVIDIA's DRA driver runs ``nvidia-smi -i UUID -c MODE`` and ``compute-policy -i UUID --set-timeslice N``
    when it prepares and unprepares a claim (v0.4.1 cmd/gpu-kubelet-plugin/nvlib.go); a failure there keeps the
    claim's pod from ever finishing."""
    host = Host(tmp_path, "t4-1")
    uuid = host.ok("--query-gpu=uuid", "--format=csv,noheader").strip()
    assert host.ok("-i", uuid, "-c", "EXCLUSIVE_PROCESS") == (
        "Set compute mode to EXCLUSIVE_PROCESS for GPU 00000000:00:1E.0.\nAll done.\n"
    )
    assert host.ok("--query-gpu=compute_mode", "--format=csv,noheader") == "Exclusive_Process\n"
    assert host.ok("-i", uuid, "-c", "DEFAULT").startswith("Set compute mode to DEFAULT")
    assert host.ok("-i", uuid, "-c", "0").startswith("Compute mode is already set to DEFAULT")
    assert host.ok("compute-policy", "-i", uuid, "--set-timeslice", "2") == (
        "Set timeslice to Medium for GPU 00000000:00:1E.0.\n"
    )
    # every change goes through the one writer of the state (the static tools'): a later one keeps the timeslice
    host.ok("-pm", "1")
    state = json.loads(Path(host.env["GPUREADY_LAB_STATE"]).read_text())
    assert (state["gpus"][uuid]["timeslice"], state["gpus"][uuid]["persistence"]) == (2, True)
    bad = host.smi("-i", uuid, "-c", "SHARED")
    assert bad.returncode == 2 and 'Invalid value "SHARED" for option -c' in bad.stdout, bad


def test_persistenced_daemon_turns_persistence_mode_on(tmp_path: Path) -> None:
    host = Host(tmp_path, "l40s-2")
    proc = subprocess.Popen(
        [static_tools(), "nvidia-persistenced", "--foreground", "--verbose"], env=host.env
    )
    try:
        pid_file = Path(host.env["GPUREADY_LAB_PERSISTENCED_PID"])
        deadline = time.monotonic() + 20
        while not (pid_file.exists() and pid_file.read_text().strip() == str(proc.pid)):
            assert proc.poll() is None, "nvidia-persistenced exited early"
            assert time.monotonic() < deadline, "nvidia-persistenced wrote no pid file"
            time.sleep(0.02)  # polling for the pid file, with a deadline
        assert pid_file.read_text().strip() == str(proc.pid)
        assert host.ok("--query-gpu=persistence_mode", "--format=csv,noheader") == "Enabled\nEnabled\n"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert proc.returncode == 0
    assert not pid_file.exists()
    assert host.ok("--query-gpu=persistence_mode", "--format=csv,noheader") == "Disabled\nDisabled\n"


def test_driver_upgrade_without_reboot_is_a_version_mismatch(tmp_path: Path) -> None:
    host = Host(tmp_path, "t4-1", driver="570.195.03")
    host.ok("-L")  # the 570 module is loaded in this boot
    result = host.smi("-L", GPUREADY_LAB_DRIVER_VERSION="580.178.04")
    assert (result.returncode, result.stdout) == (
        18,
        "Failed to initialize NVML: Driver/library version mismatch\n",
    )
    host.reboot("boot-2")
    assert host.smi("-L", GPUREADY_LAB_DRIVER_VERSION="580.178.04").returncode == 0


# ---- toolkit ---------------------------------------------------------------------------------------------
def test_container_cli_version(tmp_path: Path) -> None:
    """nvidia-container-cli is the one toolkit tool still emulated (nvidia-ctk and the runtime are NVIDIA's own:
    tests/unit/test_nvidia_tools.py): the static tools' (gpuready/lab/silicon/tools/container_cli.go)."""
    host = Host(tmp_path, "l40s-2")
    version = host.run("nvidia-container-cli", "--version", GPUREADY_LAB_TOOLKIT_VERSION="1.17.3").stdout
    assert version.splitlines()[:2] == ["cli-version: 1.17.3", "lib-version: 1.17.3"]


def test_container_cli_info_and_configure(tmp_path: Path) -> None:
    host = Host(tmp_path, "t4-1")
    info = host.run("nvidia-container-cli", "info")
    assert info.returncode == 0, info.stderr
    assert info.stdout.splitlines()[:2] == ["NVRM version:   580.178.04", "CUDA version:   13.0"]
    assert f"GPU UUID:       {host.hw['gpus'][0]['uuid']}" in info.stdout
    assert "Bus Location:   00000000:00:1E.0" in info.stdout
    # what the real nvidia-container-runtime-hook runs in legacy mode (global options before the command)
    hook = ("--load-kmods", "--ldcache=/etc/ld.so.cache", "configure", "--ldconfig=@/sbin/ldconfig")
    uuid = host.hw["gpus"][0]["uuid"]
    for devices in ("all", "0", uuid):
        done = host.run("nvidia-container-cli", *hook, f"--device={devices}", "--compute", "--pid=1", "/r")
        assert (done.returncode, done.stderr) == (0, ""), devices
    unknown = host.run("nvidia-container-cli", *hook, "--device=0,7", "--utility", "--pid=1", "/r")
    assert (unknown.returncode, unknown.stderr) == (
        1,
        "nvidia-container-cli: device error: 7: unknown device\n",
    )


def test_container_cli_without_driver_fails_like_the_real_one(tmp_path: Path) -> None:
    """No libnvidia-ml1 (no /usr/lib/nvidia-emu/driver-version on this test host) and no driver version named by
    the lab: the library is missing (machine.LibraryInstalled)."""
    if Path("/usr/lib/nvidia-emu/driver-version").exists():
        pytest.skip("this host has the lab's driver installed")
    host = Host(tmp_path, "t4-1")
    del host.env["GPUREADY_LAB_DRIVER_VERSION"]
    result = host.run("nvidia-container-cli", "info")
    assert result.returncode == 1
    assert result.stderr == (
        "nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: "
        "cannot open shared object file: no such file or directory\n"
    )


@pytest.mark.parametrize("model", ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA A30"])
def test_every_layout_the_catalogue_fits_can_be_created_in_its_order(tmp_path: Path, model: str) -> None:
    """The deploy creates fit_layout's order with one -cgi; the emulated driver must place all of it."""
    import itertools

    host = _catalogue_host(tmp_path, model)
    static_smi = [static_tools(), "nvidia-smi"]

    def smi(*args: str, boot: int) -> subprocess.CompletedProcess[str]:
        env = {
            **host.env,
            "GPUREADY_LAB_BOOT_ID": f"layout-{boot}",
        }  # each layout on a fresh boot: no instances
        return subprocess.run([*static_smi, *args], env=env, capture_output=True, text=True, timeout=30)

    fitting = 0
    for n in range(1, 8):
        for combo in itertools.combinations_with_replacement(sorted(catalogue.mig_profiles(model)), n):
            fit = catalogue.fit_layout(model, list(combo))
            if fit is None:
                continue
            fitting += 1
            names = [name for name, _start in fit]
            created = smi("mig", "-i", "0", "-cgi", ",".join(names), boot=fitting)
            assert created.returncode == 0, (
                f"{model}: {names} fits but the driver could not place it: {created}"
            )
    assert fitting > 15


def test_no_machine_file_means_no_driver(tmp_path: Path) -> None:
    host = Host(tmp_path, "t4-1")
    host.hw_path.unlink()
    result = host.smi("-L")
    assert result.returncode == 9
    assert result.stdout.startswith(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    )


def pid_file_locked(path: Path) -> bool:
    """The daemon holds its pid file's lock: what a GPU container, which sees the file but not the pid, reads."""
    with path.open() as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
    return False


def stop_daemon(pid: int, pid_file: Path) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while pid_file.exists() or Path(f"/proc/{pid}").exists():  # the daemon removes its pid file as it stops
        assert time.monotonic() < deadline, f"daemon {pid} did not stop on SIGTERM"
        time.sleep(0.02)  # polling for the daemon's exit, with a deadline


def test_persistenced_forks_and_writes_its_pid_file_before_the_starter_exits(tmp_path: Path) -> None:
    host = Host(tmp_path, "t4-1")
    started = host.run("nvidia-persistenced", "--verbose")
    assert (started.returncode, started.stdout, started.stderr) == (0, "", "")
    pid_file = Path(host.env["GPUREADY_LAB_PERSISTENCED_PID"])
    pid = int(pid_file.read_text())
    try:
        assert Path(f"/proc/{pid}").exists() and pid_file_locked(pid_file)
        assert os.getsid(pid) == pid  # its own session: it outlives the starter's
        assert host.ok("--query-gpu=persistence_mode", "--format=csv,noheader") == "Enabled\n"
    finally:
        stop_daemon(pid, pid_file)
    assert host.ok("--query-gpu=persistence_mode", "--format=csv,noheader") == "Disabled\n"


def test_fabricmanager_forks_logs_and_completes_the_fabric(tmp_path: Path) -> None:
    host = Host(tmp_path, "h100-sxm-8")
    log = tmp_path / "log" / "fabricmanager.log"
    cfg = tmp_path / "fm.cfg"
    cfg.write_text(f"# FM\nLOG_LEVEL=4\nLOG_FILE_NAME = {log}\n")
    assert host.ok("--query-gpu=fabric.state", "--format=csv,noheader") == "In Progress\n" * 8
    started = host.run("nv-fabricmanager", "-c", str(cfg))
    assert (started.returncode, started.stdout, started.stderr) == (0, "", "")
    pid_file = Path(host.env["GPUREADY_LAB_FABRICMANAGER_PID"])
    pid = int(pid_file.read_text())
    try:
        assert pid_file_locked(pid_file)
        deadline = time.monotonic() + 20
        while "Fabric state: Completed" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)  # polling for the daemon's log, with a deadline
        assert host.ok("--query-gpu=fabric.state", "--format=csv,noheader") == "Completed\n" * 8
    finally:
        stop_daemon(pid, pid_file)
    lines = [
        re.sub(r"^\[\w{3} \d\d \d{4} \d\d:\d\d:\d\d\] ", "", line) for line in log.read_text().splitlines()
    ]
    assert [line.replace(f"[tid {pid}]", "[tid D]") for line in lines[3:]] == [
        "[INFO] [tid D] Connected to 4 NVSwitch devices and 8 GPUs",
        "[INFO] [tid D] Successfully configured all the available NVSwitches to route GPU NVLink traffic.",
        "[INFO] [tid D] NVLink training completed successfully. Fabric state: Completed",
        "[INFO] [tid D] Fabric Manager is exiting",
    ]
    assert [line.split("] ", 2)[2] for line in lines[:3]] == [
        "Fabric Manager version 580.178.04 is running with the following configuration options",
        f"LOG_FILE_NAME = {log}",
        "LOG_LEVEL = 4",
    ]
    (tmp_path / "l4").mkdir()
    no_switch = Host(tmp_path / "l4", "l4-1").run("nv-fabricmanager", "-c", str(cfg))
    assert (no_switch.returncode, no_switch.stderr) == (
        1,
        "Fabric Manager failed to start: no NVSwitch devices found.\n",
    )


# ---- the hardware file ------------------------------------------------------------------------------------
def test_make_hardware_is_deterministic_and_unique_per_node() -> None:
    assert hardware.make_hardware("h100-sxm-8", 3) == hardware.make_hardware("h100-sxm-8", 3)
    uuids = [
        g["uuid"] for p in hardware.PROFILES for n in range(4) for g in hardware.make_hardware(p, n)["gpus"]
    ]
    serials = [
        g["serial"] for p in hardware.PROFILES for n in range(4) for g in hardware.make_hardware(p, n)["gpus"]
    ]
    assert len(set(uuids)) == len(uuids) and len(set(serials)) == len(serials)
    assert all(
        re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", u) for u in uuids
    )
    assert all(re.fullmatch(r"\d{13}", s) for s in serials)


@pytest.mark.parametrize("profile", sorted(hardware.PROFILES))
def test_profile_gpus_come_from_the_catalogue(profile: str) -> None:
    hw = hardware.make_hardware(profile, 0)
    prof = hardware.PROFILES[profile]
    model = catalogue.lookup_model(prof.model)
    assert hw["faults"] == [] and hw["profile"] == profile and hw["system"]["nvswitch"] is prof.nvswitch
    assert len(hw["gpus"]) == prof.gpu_count
    for index, gpu in enumerate(hw["gpus"]):
        assert gpu["index"] == index
        assert re.fullmatch(r"00000000:[0-9A-F]{2}:[0-9A-F]{2}\.0", gpu["pci_bus_id"])
        assert (gpu["name"], gpu["memory_mib"], gpu["nvlink_links"], gpu["mig_capable"]) == (
            model.name,
            model.memory_mib,
            0 if prof.passthrough else model.nvlink_links,  # a VM's passed-through GPU shows no NVLink
            model.mig_capable,
        )
        assert "0x" + gpu["pci_device_id"] == model.pci_device_id
    assert len({g["pci_bus_id"] for g in hw["gpus"]}) == prof.gpu_count
    if model.mig_capable:
        names = [p["name"] for p in hw["gpus"][0]["mig_profiles"]]
        assert names == list(catalogue.mig_profiles(model.name))
    else:
        assert hw["gpus"][0]["mig_profiles"] == []


def test_profiles_named_by_the_issue() -> None:
    assert {"h100-sxm-8", "a100-80gb-4", "l4-1", "l40s-2", "t4-1"} <= set(hardware.PROFILES)
    h100 = hardware.make_hardware("h100-sxm-8", 0)
    assert [g["name"] for g in h100["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 8 and h100["system"]["nvswitch"]
    assert h100["gpus"][0]["pci_bus_id"] == "00000000:18:00.0"
    a100 = hardware.make_hardware("a100-80gb-4", 0)
    assert [g["name"] for g in a100["gpus"]] == ["NVIDIA A100-SXM4-80GB"] * 4 and a100["gpus"][0][
        "mig_capable"
    ]


def test_write_and_read_hardware(tmp_path: Path) -> None:
    hw = hardware.make_hardware("l4-1", 2)
    path = tmp_path / "machine" / "hardware.json"
    hardware.write_hardware(path, hw)
    assert hardware.read_hardware(path) == hw
    assert [p.name for p in path.parent.iterdir()] == ["hardware.json"]  # no temp file left behind
    assert path.stat().st_mode & 0o777 == 0o644
    with pytest.raises(ValueError, match="unknown lab hardware profile 'z100'"):
        hardware.make_hardware("z100", 0)
    path.write_text('{"schema": 99}')
    with pytest.raises(ValueError, match="schema 99"):
        hardware.read_hardware(path)
    assert hardware.HOST_MACHINE_DIR == "/opt/gpuready-lab/machine"
