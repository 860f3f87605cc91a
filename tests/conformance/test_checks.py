"""The pure host and gpu checks on real captured outputs (tests/fixtures) and on the real formats of the tools'
error messages: each check passes on a healthy capture and names the GPU and the cause on a broken one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from shims import DATA

from gpuready.conformance.checks import CannotCheck, Output, gpu, host
from gpuready.lab import faults, hardware
from gpuready.nvidia.smi import RemappedRows, SmiReport, parse_query_xml

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
XML = FIXTURES / "nvidia-smi-xml"


TRIMMED = "telegraf__a100-sxm4-v12.xml"  # trimmed upstream to one of its 4 GPUs


def xml(name: str) -> str:
    """A capture as nvidia-smi printed it; the trimmed one says it has the one GPU it lists."""
    text = (XML / name).read_text()
    return (
        text.replace("<attached_gpus>4</attached_gpus>", "<attached_gpus>1</attached_gpus>")
        if name == TRIMMED
        else text
    )


def missing_three() -> SmiReport:
    """The trimmed capture as it is: one GPU listed of 4 attached, 3 that nvidia-smi said it could not reach."""
    return parse_query_xml((XML / TRIMMED).read_text(), unlisted=3)


def ok(stdout: str) -> Output:
    return Output(0, stdout, "")


@pytest.fixture
def a100_mig(fleet):
    return fleet.nodes["gpu-infer-a100-01.prod.example.com"]


def spec_like(node, **changes):
    versions = {k: changes.pop(k) for k in ("driver", "toolkit") if k in changes}
    if versions:
        changes["versions"] = dataclasses.replace(node.versions, **versions)
    return dataclasses.replace(node, **changes)


# --- host ---------------------------------------------------------------------------------------------------------

NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
    "NVIDIA driver is installed and running.\n"
)
MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n"


@pytest.mark.parametrize("name", sorted(p.name for p in XML.glob("*.xml")))
def test_nvidia_smi_runs_on_every_real_report(name):
    assert host.nvidia_smi_runs(ok(xml(name))) == []


def test_nvidia_smi_failures_are_named():
    assert host.nvidia_smi_runs(Output(127, "", "sh: 1: nvidia-smi: not found\n")) == [
        "nvidia-smi not found (is the NVIDIA driver installed?)"
    ]
    assert host.nvidia_smi_runs(Output(9, NO_DRIVER, "")) == [
        "`nvidia-smi -q -x` failed (exit 9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
        "driver. Make sure that the latest NVIDIA driver is installed and running."
    ]
    assert host.nvidia_smi_runs(Output(6, "No devices were found\n", "")) == [
        "nvidia-smi finds no GPU (exit 6: No devices were found): every GPU fell off the bus or none is bound to "
        "the nvidia driver (see the kernel log)"
    ]
    truncated = xml("telegraf__tesla-t4.xml")[:3000]
    (problem,) = host.nvidia_smi_runs(ok(truncated))
    assert problem.startswith(
        "`nvidia-smi -q -x` printed an unreadable report: nvidia-smi -q -x: not well-formed XML"
    )
    with pytest.raises(CannotCheck, match="test_no_driver_library_mismatch reports it"):
        host.nvidia_smi_runs(Output(18, MISMATCH, ""))


def test_driver_version(a100_mig):
    report = host.smi_report(ok(xml("telegraf__a100-sxm4-v12.xml")))
    assert host.driver_version(spec_like(a100_mig, driver="535.54.03"), report) == []
    assert host.driver_version(a100_mig, report) == [
        "driver version is 535.54.03, the inventory pins 580.178.04 (nvidia_driver_version)"
    ]
    with pytest.raises(CannotCheck, match="nvidia-smi not found"):
        host.smi_report(Output(127, "", "nvidia-smi: command not found"))


def test_driver_library_mismatch():
    assert host.driver_library_mismatch(ok(xml("telegraf__a10g.xml"))) == []
    assert host.driver_library_mismatch(Output(18, MISMATCH, "")) == [
        "Failed to initialize NVML: Driver/library version mismatch: the loaded kernel module is not the installed "
        "driver's (reboot after the upgrade)"
    ]


def test_persistence_mode_on_real_reports():
    assert host.persistence_mode(host.smi_report(ok(xml("telegraf__rtx-3060-v12.xml")))) == []
    assert host.persistence_mode(host.smi_report(ok(xml("telegraf__a100-sxm4-v12.xml")))) == [
        "persistence mode is off on GPU 0 (is nvidia-persistenced running?)"
    ]


def unit(name: str, state: str = "active", enabled: bool | None = True) -> host.Unit:
    return host.Unit(name, state == "active", enabled, state)


def test_fabric_manager(h100, a100_mig):
    assert host.fabric_manager(h100, unit("nvidia-fabricmanager")) == []
    assert host.fabric_manager(h100, unit("nvidia-fabricmanager", "failed")) == [
        "Fabric Manager is failed (`systemctl is-active nvidia-fabricmanager`); on NVSwitch systems CUDA cannot "
        "start without it"
    ]
    assert host.fabric_manager(h100, unit("nvidia-fabricmanager", enabled=False)) == [
        "Fabric Manager is active but not enabled: it will not start after a reboot "
        "(`systemctl is-enabled nvidia-fabricmanager`)"
    ]
    with pytest.raises(CannotCheck, match="no NVSwitch"):
        host.fabric_manager(a100_mig, unit("nvidia-fabricmanager", "inactive"))


TOOLKIT = "NVIDIA Container Toolkit CLI version 1.20.0\ncommit: 1f8d6a1d0a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d\n"


def test_toolkit_version(h100):
    assert host.toolkit_version(h100, ok(TOOLKIT)) == []
    assert host.toolkit_version(h100, ok(TOOLKIT.replace("1.20.0", "1.17.8"))) == [
        "NVIDIA Container Toolkit is 1.17.8, the inventory pins 1.20.0 (nvidia_container_toolkit_version)"
    ]
    assert host.toolkit_version(h100, Output(127, "", "sh: nvidia-ctk: not found")) == [
        "nvidia-ctk not found (is the NVIDIA Container Toolkit installed?)"
    ]
    assert host.toolkit_version(h100, Output(1, "", "Incorrect Usage.")) == [
        "`nvidia-ctk --version` printed no version (exit 1): Incorrect Usage."
    ]


def dump(name: str) -> str:
    return (DATA / name).read_text()


def test_containerd_handler_on_real_dumps():
    assert host.containerd_nvidia_handler(ok(dump("containerd-dump-nvidia.toml"))) == []
    assert host.containerd_nvidia_handler(ok(dump("containerd-dump-debian-default.toml"))) == [
        "containerd has no 'nvidia' runtime handler (`containerd config dump`); pods with runtimeClassName: nvidia "
        "cannot start"
    ]


def test_containerd_handler_that_lost_runc_options_or_runs_the_wrong_binary():
    text = dump("containerd-dump-nvidia.toml")
    nvidia_options = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]'
    head, tail = text.split(nvidia_options)
    lost = head + nvidia_options + tail.replace("SystemdCgroup = true", "", 1)
    assert host.containerd_nvidia_handler(ok(lost)) == [
        "the 'nvidia' handler has SystemdCgroup = None but runc has True: runc's options were not kept"
    ]
    wrong = head + nvidia_options + tail.replace("/usr/bin/nvidia-container-runtime", "/usr/bin/runc", 1)
    assert host.containerd_nvidia_handler(ok(wrong)) == [
        "the 'nvidia' handler runs BinaryName '/usr/bin/runc', expected '/usr/bin/nvidia-container-runtime'"
    ]
    failed = Output(
        1, "", "containerd: failed to load TOML from /etc/containerd/config.toml: invalid character\n"
    )
    assert host.containerd_nvidia_handler(failed) == [
        "`containerd config dump` failed (exit 1): containerd: failed to load TOML from /etc/containerd/config.toml:"
        " invalid character"
    ]


def test_kubelet(h100):
    assert host.kubelet_active(h100, unit("kubelet")) == []
    assert host.kubelet_active(h100, unit("kubelet", "activating")) == [
        "kubelet is activating (`systemctl is-active kubelet`)"
    ]
    assert host.kubelet_active(h100, unit("kubelet", enabled=False)) == [
        "kubelet is active but not enabled: it will not start after a reboot (`systemctl is-enabled kubelet`)"
    ]
    no_systemd = host.Unit("kubelet", False, None, "sh: systemctl: not found", systemd=False)
    assert host.kubelet_active(h100, no_systemd) == [
        "cannot ask systemd: `systemctl is-active kubelet`: sh: systemctl: not found"
    ]
    not_joined = dataclasses.replace(h100, join=dataclasses.replace(h100.join, enabled=False))
    with pytest.raises(CannotCheck, match="kube_join = False"):
        host.kubelet_active(not_joined, unit("kubelet", "inactive"))


# --- gpu ----------------------------------------------------------------------------------------------------------


def report_of(name: str) -> SmiReport:
    return parse_query_xml(xml(name))


def with_gpus(report: SmiReport, **changes) -> SmiReport:
    return dataclasses.replace(report, gpus=tuple(dataclasses.replace(g, **changes) for g in report.gpus))


def test_gpus_match_spec(h100, fleet):
    t4 = spec_like(h100, gpu_model="Tesla T4", gpu_count=1, gpu_memory_mib=15360, nvswitch=False)
    assert gpu.gpus_match_spec(t4, report_of("telegraf__tesla-t4.xml"), []) == []
    # the capture is trimmed to one of its 4 GPUs: exactly what a node with GPUs missing looks like
    a100 = spec_like(h100, gpu_model="NVIDIA A100-SXM4-80GB", gpu_count=4, gpu_memory_mib=81920)
    assert gpu.gpus_match_spec(a100, missing_three(), []) == [
        "1 GPU(s) answer of 4 attached, the inventory says 4"
    ]
    assert gpu.gpus_match_spec(h100, report_of("telegraf__tesla-t4.xml"), []) == [
        "1 GPU(s) answer, the inventory says 8",
        "GPU 0 is Tesla T4, the inventory says NVIDIA H100 80GB HBM3",
    ]
    smaller = with_gpus(report_of("telegraf__tesla-t4.xml"), memory_total_mib=15000)
    assert gpu.gpus_match_spec(t4, smaller, []) == ["GPU 0 has 15000 MiB of memory, Tesla T4 has 15360 MiB"]


def test_lost_gpus_from_the_real_message():
    out = Output(15, "", "Unable to determine the device handle for GPU0000:2A:00.0: Unknown Error\n")
    assert gpu.lost_gpus(out) == ["GPU 0000:2A:00.0 (Unknown Error)"]


def test_ecc_and_memory_repairs():
    report = report_of("telegraf__a10g.xml")
    assert gpu.ecc_errors(report) == [] and gpu.memory_repairs(report) == []
    assert gpu.ecc_errors(with_gpus(report, ecc_uncorrectable_volatile=2)) == [
        "GPU 0: 2 uncorrectable ECC error(s) since the driver loaded"
    ]
    assert gpu.memory_repairs(with_gpus(report, remapped_rows=RemappedRows(0, 1, True, False))) == [
        "GPU 0: a row remapping is pending (reset the GPU to apply it)"
    ]
    assert gpu.memory_repairs(with_gpus(report, remapped_rows=RemappedRows(0, 512, False, True))) == [
        "GPU 0: row remapping failed (no spare rows left; the GPU needs repair)"
    ]
    assert gpu.memory_repairs(with_gpus(report_of("telegraf__tesla-t4.xml"), retired_pages_pending=True)) == [
        "GPU 0: a page retirement is pending (reset the GPU to retire the page)"
    ]


def test_performance_states_of_real_reports():
    assert gpu.performance_states(xml("telegraf__a100-sxm4-v12.xml")) == {0: 0}
    assert gpu.performance_states(xml("telegraf__rtx-3060-v12.xml")) == {0: 8}
    assert gpu.performance_states("not xml") == {}


def test_pcie_link_on_real_reports():
    def check(name):
        return gpu.pcie_link(report_of(name), gpu.performance_states(xml(name)))

    assert check("telegraf__a100-sxm4-v12.xml") == []
    # a busy (P0) T4 on an x8 link of an x16 card: half the bandwidth
    assert check("telegraf__tesla-t4.xml") == ["GPU 0: PCIe link trained at x8 (max x16)"]
    # idle (P8) GPUs train their links down to save power: not judged
    with pytest.raises(CannotCheck, match=r"GPU 0 at Gen1 \(max Gen4\) in P8: idle GPUs lower their link"):
        check("telegraf__rtx-3060-v12.xml")


H100_HW = hardware.make_hardware("h100-sxm-8", 0)
H100_REPORT = SmiReport(
    "580.178.04",
    "13.0",
    8,
    tuple(
        dataclasses.replace(
            report_of("telegraf__a10g.xml").gpus[0], index=g["index"], pci_bus_id=g["pci_bus_id"]
        )
        for g in H100_HW["gpus"]
    ),
)


def journal(*lines: str, rc: int = 0) -> Output:
    return Output(rc, "".join(line + "\n" for line in lines), "")


def test_xids_are_named_with_their_gpu_and_meaning():
    kernel = [
        "nvidia-nvswitch0: open (major=508)",
        *faults.journal_messages(H100_HW, "xid-79", 1),
        "NVRM: Xid (PCI:0000:9a:00): 13, pid=48213, name=python3, Graphics SM Warp Exception on (GPC 1, TPC 2, SM 0): "
        "Out Of Range Address",
        "NVRM: Xid (PCI:0000:9a:00): 13, pid=48213, name=python3, Graphics SM Warp Exception on (GPC 1, TPC 3, SM 1): "
        "Out Of Range Address",
    ]
    grep = journal(*[line for line in kernel if "NVRM: Xid" in line])  # the second query repeats them
    problems = gpu.xid_errors(H100_REPORT, [journal(*kernel), grep])
    expected = [
        "XID 13 on GPU 4 (PCI:0000:9a:00) since boot (2 times): graphics engine exception (usually an application's "
        "illegal memory access)",
        "XID 79 on GPU 1 (PCI:0000:2a:00) since boot: GPU has fallen off the bus (reboot; check power, PCIe and "
        "thermals)",
    ]
    assert [p.lower() for p in problems] == [e.lower() for e in expected]


def test_no_xids_and_journal_problems():
    clean = journal("nvidia-nvswitch0: open (major=508)")
    no_entries = journal("-- No entries --", rc=1)
    assert gpu.xid_errors(H100_REPORT, [clean, no_entries]) == []
    with pytest.raises(CannotCheck, match="neither journalctl nor dmesg found"):
        gpu.xid_errors(H100_REPORT, [Output(127, "", "journalctl: not found")] * 2)
    with pytest.raises(CannotCheck, match=r"cannot read the journal: No journal files were found\."):
        gpu.xid_errors(H100_REPORT, [Output(2, "", "No journal files were found.")] * 2)


def test_without_journalctl_the_ring_buffer_is_read():
    """A node with no systemd journal (a lent H200 VM had no journalctl): dmesg's lines, timestamps and all."""
    absent = [Output(127, "", "bash: line 1: journalctl: command not found")] * 2
    assert gpu.needs_ring_buffer(absent) and not gpu.needs_ring_buffer([journal("x"), journal("x")])
    ring = journal("[    0.596332] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04",
                   *(f"[ 1201.5] {line}" for line in faults.journal_messages(H100_HW, "xid-79", 1)))  # fmt: skip
    (problem,) = gpu.xid_errors(H100_REPORT, absent, ring)
    assert problem.startswith("XID 79 on GPU 1 (PCI:0000:2a:00) since boot: GPU has fallen off the bus"), (
        problem
    )
    assert gpu.xid_errors(H100_REPORT, absent, journal("[    0.5] nvidia: loading out-of-tree module")) == []
    with pytest.raises(
        CannotCheck, match="dmesg cannot read the kernel log: dmesg: read kernel buffer failed"
    ):
        gpu.xid_errors(
            H100_REPORT, absent, Output(1, "", "dmesg: read kernel buffer failed: Operation not permitted")
        )
    with pytest.raises(CannotCheck, match="neither journalctl nor dmesg found"):
        gpu.xid_errors(H100_REPORT, absent, Output(127, "", "dmesg: not found"))


def test_a_repeated_xid_counts_as_often_as_it_was_logged():
    line = "NVRM: Xid (PCI:0000:18:00): 94, pid=2201, name=trainer, Contained: SM (0x1). RST: No, D-RST: No"
    kernel = journal(f"[ 812.1] {line}", "other", f"[ 955.4] {line}")
    grep = journal(line, line)
    assert gpu.xid_errors(H100_REPORT, [kernel, grep]) == [
        "XID 94 on GPU 0 (PCI:0000:18:00) since boot (2 times): contained ECC error (the affected application was "
        "stopped; reset the GPU when idle)"
    ]


def test_a_journal_that_hides_kernel_messages_is_not_a_pass():
    hint = (
        "Hint: You are currently not seeing messages from other users and the system.\n"
        "      Users in groups 'adm', 'systemd-journal' can see all messages.\n"
    )
    with pytest.raises(CannotCheck, match="hides the kernel's messages from this user"):
        gpu.xid_errors(H100_REPORT, [Output(0, "", hint), Output(1, "-- No entries --\n", hint)])


def test_every_named_xid_has_a_meaning():
    assert sorted(gpu.XIDS) == [13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 154]


def test_clock_event_reasons():
    assert gpu.clock_event_reasons(report_of("telegraf__rtx-4000-sff-ada-v13.xml")) == []
    held = with_gpus(report_of("telegraf__a10g.xml"), clock_event_reasons_active=("gpu_idle", "hw_slowdown"))
    assert gpu.clock_event_reasons(held) == ["GPU 0: clocks held down by hw_slowdown"]


def test_compute_mode_on_real_reports_and_by_sharing(h100):
    """Every real capture says Default (nobody runs MPS there); an MPS pool needs EXCLUSIVE_PROCESS, which NVIDIA's
    MPS control daemon sets; PROHIBITED fails anywhere; a DRA node may be in either of the two."""
    from gpuready.spec.model import Sharing, SharingMode

    reports = {p.name: parse_query_xml(xml(p.name)) for p in XML.glob("*.xml")}
    modes = {g.compute_mode for r in reports.values() for g in r.gpus}
    assert modes == {"Default"}, modes
    a10g = report_of("telegraf__a10g.xml")
    assert gpu.compute_mode(h100, a10g) == []
    mps = spec_like(h100, sharing=Sharing(mode=SharingMode.MPS, replicas=2))
    bus = a10g.gpus[0].pci_bus_id
    assert gpu.compute_mode(mps, a10g) == [
        f'GPU 0 ({bus}): compute mode Default, expected Exclusive_Process (gpu_sharing = "mps": the MPS control '
        "daemon sets it when it starts MPS); no MPS control daemon runs MPS on it: its pods share it without MPS"
    ]
    exclusive = with_gpus(a10g, compute_mode="Exclusive_Process")
    assert gpu.compute_mode(mps, exclusive) == []
    assert gpu.compute_mode(h100, exclusive) == [
        f'GPU 0 ({bus}): compute mode Exclusive_Process, expected Default (gpu_sharing = "none"); one process '
        "at a time can use it"
    ]
    prohibited = with_gpus(a10g, compute_mode="Prohibited")
    assert gpu.compute_mode(h100, prohibited)[0].endswith("no process can create a CUDA context on it")
    dra = spec_like(h100, knobs={**h100.knobs, "gpu_allocation": "dra"})
    assert gpu.compute_mode(dra, exclusive) == gpu.compute_mode(dra, a10g) == []
    assert len(gpu.compute_mode(dra, prohibited)) == 1
    assert gpu.compute_mode(mps, with_gpus(a10g, compute_mode=None)) == []  # not reported: nothing to judge


def nvlink_text(name: str) -> str:
    return (FIXTURES / "nvidia-smi-text" / name).read_text()


def test_nvlink_on_real_status(h100):
    eight = SmiReport("535.183.01", None, 8, H100_REPORT.gpus)
    assert gpu.nvlink(h100, eight, ok(nvlink_text("gpud__nvidia-smi.nvlink.status.a100"))) == []
    one = SmiReport("535.183.01", None, 1, H100_REPORT.gpus[:1])
    assert gpu.nvlink(h100, one, ok(nvlink_text("azurehpc-health-checks__bad_nvlink_status.txt"))) == [
        "GPU 6: NVLink down (NVML: Unable to retrieve NVLink information as all links are inActive)"
    ]
    pending = with_gpus(one, fabric_state="In Progress", fabric_status=None)
    assert gpu.nvlink(h100, pending, ok(nvlink_text("gpud__nvidia-smi.nvlink.status.a100")))[0] == (
        "GPU 0: fabric registration is In Progress (is Fabric Manager running?)"
    )


def test_mig_layout_against_real_listings(a100_mig):
    lgi = ok((FIXTURES / "nvidia-smi-mig" / "openforbc__a100-pcie-40gb_mig-lgi.txt").read_text())
    base = report_of("telegraf__a100-sxm4-v12.xml").gpus[0]  # MIG enabled, 4 MIG devices
    pcie = spec_like(a100_mig, gpu_model="NVIDIA A100-PCIE-40GB", gpu_count=1)
    layout = dataclasses.replace(pcie.sharing, mig_layout=(("3g.20gb", "3g.20gb"),))
    node = dataclasses.replace(pcie, sharing=layout)
    report = SmiReport("535.54.03", None, 1, (base,))
    assert gpu.mig_layout(node, report, lgi) == []
    other = dataclasses.replace(
        node, sharing=dataclasses.replace(layout, mig_layout=(("3g.20gb", "2g.10gb"),))
    )
    assert gpu.mig_layout(other, report, lgi) == [
        "GPU 0: GPU instances ['3g.20gb', '3g.20gb'], the inventory wants ['2g.10gb', '3g.20gb'] (missing 2g.10gb; "
        "unexpected 3g.20gb)"
    ]
    disabled = SmiReport(
        "535.54.03",
        None,
        1,
        (dataclasses.replace(base, mig_mode_current="Disabled", mig_mode_pending="Enabled"),),
    )
    assert gpu.mig_layout(node, disabled, ok("No MIG-enabled devices found.\n")) == [
        "GPU 0: MIG mode is Disabled (enabled, pending a GPU reset or reboot), the inventory wants MIG"
    ]


def test_vector_add_outputs(h100):
    passed = "".join(
        f"CUDA device {i} (NVIDIA H100 80GB HBM3): vectorAdd of 50000 elements: Test PASSED\n"
        for i in range(8)
    )
    assert gpu.vector_add(h100, ok(passed)) == []
    assert gpu.vector_add(h100, ok(passed.split("\n", 1)[1])) == [
        "vectorAdd ran on 7 CUDA device(s), the inventory says 8 GPUs"
    ]
    bad = (
        "CUDA device 3: vectorAdd: Test FAILED: cuLaunchKernel: CUDA error 719 (unspecified launch failure)\n"
    )
    assert gpu.vector_add(h100, Output(1, bad, "")) == [bad.strip()]
    with pytest.raises(CannotCheck, match=r"no libcuda\.so\.1"):
        gpu.vector_add(
            h100, Output(3, "", "no libcuda.so.1 on this machine (no NVIDIA driver): vectorAdd cannot run")
        )


def test_toolkit_security_floor():
    assert host.toolkit_security(ok(TOOLKIT)) == []  # 1.20.0
    (problem,) = host.toolkit_security(ok(TOOLKIT.replace("1.20.0", "1.17.3")))
    assert problem.startswith("NVIDIA Container Toolkit 1.17.3 is affected by ")
    assert "CVE-2025-23266" in problem and "CVE-2026-24260" in problem and "(fixed in 1.19.1)" in problem
    assert "(nvidia_container_toolkit_version)" in problem and "a_id/5659" in problem
    with pytest.raises(CannotCheck):
        host.toolkit_security(Output(127, "", "sh: nvidia-ctk: not found"))


def test_driver_security_floor_on_a_real_report():
    # driver 535.54.03 (2023): below every R535 fix since
    report = host.smi_report(ok(xml("telegraf__a100-sxm4-v12.xml")))
    (problem,) = host.driver_security(report)
    assert problem.startswith("NVIDIA driver 535.54.03 is affected by ") and "CVE-2024-0074" in problem
    fixed = host.smi_report(ok(xml("telegraf__a100-sxm4-v12.xml").replace("535.54.03", "580.178.04")))
    assert host.driver_security(fixed) == []


# --- each GPU named once: "GPU 3" by index, "GPU 0000:2A:00.0" by bus id (a GPU nvidia-smi lost) ------------------
# nvidia-smi's real message (exit 15) for a GPU whose handle the driver lost
LOST = "Unable to determine the device handle for GPU0000:2A:00.0: Unknown Error\n"


def test_a_lost_gpu_is_named_once_by_its_bus_id(h100):
    # the capture is trimmed to one of its 4 GPUs: what a node whose other GPUs fell off the bus reports
    a100 = dataclasses.replace(h100, gpu_model="NVIDIA A100-SXM4-80GB", gpu_count=4, gpu_memory_mib=81920)
    report = missing_three()
    lost = gpu.lost_gpus(Output(15, "", LOST))
    problems = gpu.gpus_match_spec(a100, report, lost)
    assert problems == [
        "1 GPU(s) answer of 4 attached, the inventory says 4 "
        "(GPU 0000:2A:00.0 (Unknown Error): fallen off the bus?)"
    ]
    assert not any("GPU GPU" in problem for problem in problems)


def test_several_lost_gpus_are_each_named_once(h100):
    a100 = dataclasses.replace(h100, gpu_model="NVIDIA A100-SXM4-80GB", gpu_count=4, gpu_memory_mib=81920)
    report = missing_three()
    stderr = LOST + "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost\n"
    problems = gpu.gpus_match_spec(a100, report, gpu.lost_gpus(Output(15, "", stderr)))
    assert problems[0].endswith(
        "(GPU 0000:2A:00.0 (Unknown Error); GPU 0000:3B:00.0 (GPU is lost): fallen off the bus?)"
    )
