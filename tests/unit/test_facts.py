"""The deploy's facts: command strings, and processing of real captured output."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from gpuready.deploy.facts.apt import HeldPackages
from gpuready.deploy.facts.containerd import ContainerdConfigText
from gpuready.deploy.facts.host import MISSING
from gpuready.deploy.facts.kubeadm import KubeletJoined
from gpuready.deploy.facts.nvidia import MigInstances, NvidiaSmi

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def lines(path: str) -> list[str]:
    return (FIXTURES / path).read_text().splitlines()


def test_containerd_config_text_roundtrips_and_reports_missing():
    fact = ContainerdConfigText()
    assert fact.command("/etc/containerd/config.toml") == (
        f"test -f /etc/containerd/config.toml && cat /etc/containerd/config.toml || echo {MISSING}"
    )
    assert fact.process([MISSING]) is None
    assert fact.process(["version = 2", "", "[plugins]"]) == "version = 2\n\n[plugins]\n"


def test_held_packages():
    assert HeldPackages().process(["kubelet", "nvidia-driver", ""]) == {"kubelet", "nvidia-driver"}
    assert HeldPackages().process([]) == set()


def test_nvidia_smi_on_a_real_a100_capture():
    # the capture was trimmed upstream to one of its 4 GPUs: say so, or the report reads as cut short
    capture = [
        line.replace(">4</attached_gpus>", ">1</attached_gpus>")
        for line in lines("nvidia-smi-xml/telegraf__a100-sxm4-v12.xml")
    ]
    state = NvidiaSmi().process(capture)
    assert state.installed and state.error is None
    assert state.report.driver_version == "535.54.03"
    assert state.report.gpus[0].name == "NVIDIA A100-SXM4-80GB"
    assert len(state.report.gpus[0].mig_devices) == 4


def test_nvidia_smi_not_installed_and_nvml_mismatch():
    assert NvidiaSmi().process(["__gpuready_no_nvidia_smi__"]).installed is False
    state = NvidiaSmi().process(
        ["Failed to initialize NVML: Driver/library version mismatch", "NVML library version: 580.95"]
    )
    assert state.installed and state.report is None
    assert state.error.startswith("Failed to initialize NVML: Driver/library version mismatch")


def test_mig_instances_on_real_captures():
    out = lines("nvidia-smi-mig/openforbc__a100-pcie-40gb_mig-lgi.txt")
    out += ["__gpuready_lci__", *lines("nvidia-smi-mig/openforbc__a100-pcie-40gb_mig-lci.txt")]
    state = MigInstances().process(out)
    assert state.profiles_on(0) == ["3g.20gb", "3g.20gb"]
    assert [gi.instance_id for gi in state.gpu_instances] == [1, 2]
    assert state.compute_instances and all(ci.gpu == 0 for ci in state.compute_instances)


def test_mig_instances_none():
    state = MigInstances().process(
        ["No GPU instances found: Not Found", "__gpuready_lci__", "No MIG-enabled devices found."]
    )
    assert state.gpu_instances == () and state.compute_instances == ()
    assert state.profiles_on(0) == []


def test_kubelet_joined(tmp_path):
    conf = tmp_path / "kubelet.conf"
    conf.write_text(
        "apiVersion: v1\nclusters:\n- cluster:\n    server: https://10.0.0.1:6443\n  name: default\n"
    )
    command = KubeletJoined().command().replace("/etc/kubernetes/kubelet.conf", str(conf))
    out = subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert KubeletJoined().process(out) == "https://10.0.0.1:6443"
    conf.unlink()
    out = subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert KubeletJoined().process(out) is None


def test_swap_fact_and_swap_off_sed_on_real_files(tmp_path):
    from gpuready.deploy.facts.host import Swap

    swaps = tmp_path / "swaps"
    swaps.write_text("Filename\tType\tSize\tUsed\tPriority\n/swapfile   file\t1048572\t0\t-2\n")
    fstab = tmp_path / "fstab"
    fstab.write_text("UUID=abc / ext4 defaults 0 1\n/swapfile none swap sw 0 0\n# /old none swap sw 0 0\n")
    command = Swap().command().replace("/proc/swaps", str(swaps)).replace("/etc/fstab", str(fstab))
    out = subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert Swap().process(out) == {"active": ["/swapfile"], "fstab": ["/swapfile none swap sw 0 0"]}

    case = json.loads((FIXTURES.parent / "operations" / "host.swap_off" / "fstab_only.json").read_text())
    sed = case["commands"][0].replace("/etc/fstab", str(fstab))
    subprocess.run(["sh", "-c", sed], check=True)
    assert fstab.read_text().splitlines()[1] == "# /swapfile none swap sw 0 0  # swap disabled by gpuready"
    out = subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert Swap().process(out)["fstab"] == []


def test_boot_time_is_when_pid_1_started_by_this_clock():
    """Run here: the command's answer is this machine's PID 1 start, which `ps` reports the same way."""
    import calendar
    import time

    from gpuready.deploy.facts.host import BootTime

    fact = BootTime()
    out = subprocess.run(["sh", "-c", fact.command()], capture_output=True, text=True, check=True).stdout
    booted = fact.process(out.splitlines())
    assert booted is not None and booted <= time.time()
    ps = subprocess.run(["ps", "-o", "lstart=", "-p", "1"], capture_output=True, text=True, check=True,
                        env={"LC_ALL": "C", "TZ": "UTC"}).stdout.strip()  # fmt: skip
    assert abs(booted - calendar.timegm(time.strptime(ps, "%a %b %d %H:%M:%S %Y"))) <= 1, ps
    assert fact.process([]) is None and fact.process(["sh: 1: getconf: not found"]) is None
