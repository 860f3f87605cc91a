"""The MIG boot unit (#29): GPU and compute instances do not survive a reboot, so the node deploy installs a oneshot
unit that creates the inventory's layout again before the kubelet starts.

The script is run here with the lab's emulated nvidia-smi on its PATH (the same tool a lab host has), across an
emulated reboot (a new boot id: MIG mode kept, instances gone, as on a real GPU).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from emulated import Machine
from pyinfra.context import ctx_host, ctx_state
from static_tools import static_tools
from test_mig_and_join_operations import mig_state, run, smi_state
from test_operations import FakeHost

from gpuready.deploy.operations import mig
from gpuready.nvidia import mig_layout

MODEL = "NVIDIA A100-SXM4-80GB"
# GPU 1 whole; the order asked is not one the driver can place greedily (the deploy reorders it, so must the boot)
LAYOUT: tuple[tuple[str, ...] | None, ...] = (
    ("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"),
    None,
    ("7g.80gb",),
    ("1g.10gb",) * 7,
)
MIG_GPUS = (0, 2, 3)


def unit_directives(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_the_unit_is_a_oneshot_before_the_kubelet_wanted_at_boot():
    unit = unit_directives(mig_layout.boot_unit())
    assert unit["Type"] == "oneshot"
    assert (
        unit["ExecStart"] == f"/bin/sh {mig_layout.SCRIPT_PATH}"
    )  # no gpuready, no network: sh and nvidia-smi
    assert unit["WantedBy"] == "multi-user.target"
    assert {"kubelet.service", "nvidia-cdi-refresh.service"} <= set(unit["Before"].split())
    # upstream's nvidia-mig-manager.service order: after the daemons that must hold the GPUs first
    assert set(unit["After"].split()) == {"nvidia-persistenced.service", "nvidia-fabricmanager.service"}
    assert (
        unit["RemainAfterExit"] == "yes"
    )  # active once it ran in this boot: the deploy's rerun changes nothing
    assert mig_layout.UNIT_PATH.endswith("/" + mig_layout.UNIT)


def test_the_script_runs_the_deploys_own_commands():
    """One piece of logic: each GPU's line is what the layout operation runs on a GPU without instances."""
    script = mig_layout.boot_script(MODEL, LAYOUT)
    facts = {"NvidiaSmi": smi_state([("Enabled", "Enabled")] * 4), "MigInstances": mig_state({})}
    commands, _ = run(mig.layout, facts, per_gpu=LAYOUT)
    assert commands == [line.split(" ", 2)[2] for line in script.splitlines() if line.startswith("layout ")]
    assert "layout 0 nvidia-smi mig -i 0 -cgi 3g.40gb,2g.20gb,1g.10gb,1g.10gb -C" in script.splitlines()
    assert not any(
        line.startswith("layout 1 ") for line in script.splitlines()
    )  # the whole GPU is left alone
    assert (
        "nvidia-smi -i" not in script and "-dgi" not in script and "-dci" not in script
    )  # no mode, no destroy


class Node(Machine):
    """An emulated A100 x4 host whose PATH has the emulated nvidia-smi, as a lab host's has."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, "a100-80gb-4")
        assert [gpu["name"] for gpu in self.hw["gpus"]] == [MODEL] * 4
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        tool = bin_dir / "nvidia-smi"
        tool.symlink_to(static_tools())  # the static tools' nvidia-smi, by the name it is run as
        self.env["PATH"] = f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        self.script = tmp / "gpuready-mig-layout"
        self.script.write_text(mig_layout.boot_script(MODEL, LAYOUT))

    def sh(self, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sh", "-c", command], env=self.env, capture_output=True, text=True, timeout=60)

    def ok(self, command: str) -> str:
        result = self.sh(command)
        assert result.returncode == 0, f"{command}: rc={result.returncode}\n{result.stdout}\n{result.stderr}"
        return result.stdout

    def boot(self, boot_id: str) -> subprocess.CompletedProcess[str]:
        """A reboot, then the unit's ExecStart."""
        self.env["GPUREADY_LAB_BOOT_ID"] = boot_id
        return subprocess.run(
            ["/bin/sh", str(self.script)], env=self.env, capture_output=True, text=True, timeout=120
        )

    def mig_devices(self) -> list[str]:
        return [
            line.strip() for line in self.ok("nvidia-smi -L").splitlines() if line.strip().startswith("MIG")
        ]


@pytest.fixture
def node(tmp_path: Path) -> Node:
    """MIG mode on for the MIG GPUs (effective after a reboot) and the layout created as the deploy creates it."""
    node = Node(tmp_path)
    for index in MIG_GPUS:
        node.ok(f"nvidia-smi -i {index} -mig 1")
    node.env["GPUREADY_LAB_BOOT_ID"] = "boot-2"
    for index in MIG_GPUS:
        wanted = LAYOUT[index]
        assert wanted is not None
        node.ok(mig_layout.create_command(index, MODEL, wanted))
    return node


def test_a_reboot_loses_the_instances_and_the_boot_script_brings_the_same_ones_back(node: Node):
    deployed = node.mig_devices()
    assert len(deployed) == 4 + 1 + 7
    boot = node.boot("boot-3")
    assert boot.returncode == 0, boot.stdout + boot.stderr
    assert node.mig_devices() == deployed  # the same MIG devices, UUIDs included
    created = [line for line in boot.stdout.splitlines() if re.match(r"GPU \d: nvidia-smi mig", line)]
    assert [line.split(":")[0] for line in created] == ["GPU 0", "GPU 2", "GPU 3"]
    # a reboot alone (no unit) leaves MIG mode on and no instance: what the unit is for
    node.env["GPUREADY_LAB_BOOT_ID"] = "boot-4"
    assert node.mig_devices() == []
    modes = node.ok("nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader").split()
    assert modes == ["Enabled", "Disabled", "Enabled", "Enabled"]


def test_the_script_leaves_a_gpu_with_instances_alone(node: Node):
    node.boot("boot-3")
    first = node.mig_devices()
    again = subprocess.run(
        ["/bin/sh", str(node.script)], env=node.env, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [f"GPU {i}: has GPU instances, left as they are" for i in MIG_GPUS]
    assert node.mig_devices() == first
    # a GPU someone laid out by hand in this boot keeps that layout; the deploy decides about it, not a boot
    node.ok("nvidia-smi mig -i 2 -dci && nvidia-smi mig -i 2 -dgi && nvidia-smi mig -i 2 -cgi 3g.40gb -C")
    assert subprocess.run(["/bin/sh", str(node.script)], env=node.env, timeout=60).returncode == 0
    assert "MIG 3g.40gb" in "\n".join(node.mig_devices())


def test_a_gpu_it_cannot_lay_out_fails_the_unit_and_the_others_are_still_laid_out(node: Node):
    # MIG off from the next boot on GPU 2 (its instances destroyed first, as the driver asks)
    node.ok("nvidia-smi mig -i 2 -dci && nvidia-smi mig -i 2 -dgi && nvidia-smi -i 2 -mig 0")
    boot = node.boot("boot-3")
    assert boot.returncode == 1
    assert "GPU 2: the MIG layout was not created" in boot.stderr
    devices = node.mig_devices()
    assert len(devices) == 4 + 7  # GPUs 0 and 3


def test_a_node_that_no_longer_asks_for_mig_loses_the_unit():
    files = {mig_layout.UNIT_PATH: {"sha1": "0" * 40}, mig_layout.SCRIPT_PATH: {"sha1": "1" * 40}}

    def facts(enabled: str, present: dict) -> dict:
        return {"UnitState": {"active": "active", "enabled": enabled}, "FileDigest": present}

    host_facts = facts("enabled", files)
    commands, _ = run_with_paths(mig.boot_unit_absent, host_facts)
    assert commands == [
        f"systemctl disable --now {mig_layout.UNIT}",
        f"rm -f {mig_layout.UNIT_PATH} {mig_layout.SCRIPT_PATH}",
        "systemctl daemon-reload",
    ]
    commands, noops = run_with_paths(mig.boot_unit_absent, facts("not-found", {}))
    assert commands == [] and noops == [f"no {mig_layout.UNIT}"]


def run_with_paths(op, facts: dict):
    """run() with FileDigest answered per path."""
    host = FakeHost({})

    def get_fact(cls, *args, **kwargs):
        value = facts[cls.__name__]
        return value.get(kwargs["path"]) if cls.__name__ == "FileDigest" else value

    host.get_fact = get_fact
    with ctx_state.use(SimpleNamespace(config=SimpleNamespace(DIFF=False))), ctx_host.use(host):
        commands = list(op._inner())
    return commands, host.noops


def test_the_rescan_command_hups_exactly_the_plugin_and_gfd_programs() -> None:
    """What the deploy runs after a layout change: SIGHUP to each process whose argv[0] is the device plugin or
    GFD (by path or bare name); a longer name, a later argument and the shell running the command itself are left
    alone. Stand-ins are Python processes named so (exec -a) that sleep, which SIGHUP ends."""

    def started(argv0: str, *args: str) -> subprocess.Popen[bytes]:
        sleep = [sys.executable, "-c", "import time; time.sleep(60)", *args]
        return subprocess.Popen(["bash", "-c", 'exec -a "$0" "$@"', argv0, *sleep])

    hupped = [started(mig_layout.DEVICE_PLUGIN_PROGRAM), started(f"/usr/bin/{mig_layout.GFD_PROGRAM}")]
    spared = [
        started(f"{mig_layout.DEVICE_PLUGIN_PROGRAM}-x"),
        started("config-manager", mig_layout.GFD_PROGRAM),
    ]
    try:
        done = subprocess.run(
            ["sh", "-c", mig_layout.rescan_command()], capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
        assert [p.wait(timeout=10) for p in hupped] == [-1, -1]  # -1: ended by signal 1
        assert [p.poll() for p in spared] == [None, None]
    finally:
        for process in hupped + spared:
            process.kill()
            process.wait()
    # with none of them running it is a no-op that succeeds (a node whose add-ons are not deployed yet)
    assert subprocess.run(["sh", "-c", mig_layout.rescan_command()], timeout=30).returncode == 0
