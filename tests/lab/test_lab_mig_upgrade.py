"""A MIG node rebooted by the rolling upgrade comes back with its layout and passes (#29).

GPU and compute instances do not survive a reboot (MIG mode does, on the GPU; the lab's machine drops the instances
when the host's boot id changes, as a real driver does). The node deploy installs gpuready-mig-layout.service, a
oneshot that creates the inventory's layout again before the kubelet starts. Here: one A100 x4 host on sid (CDI mode,
as the session lab's A100), MIG on every GPU, deployed at driver 570 with the add-ons, then deploys/upgrade_driver.py
to the inventory's 580: cordon, drain, install, reboot, the host/gpu/node/workloads layers, uncordon.

Its own lab, on the first host number from 161 no running lab holds (the session lab uses 1-3, the upgrade fleet
101-104, the reboot and kernel-file labs 201 up).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Lab, lab_skip_reason
from pyinfra_runs import PyinfraRun, run_pyinfra
from test_lab_upgrade import OLD, UPGRADE, driver_on, summary

from gpuready import kube
from gpuready.deploy.upgrade import maintenance
from gpuready.lab import hosts
from gpuready.lab.state import LabPaths
from gpuready.nvidia import cdi, mig_layout
from gpuready.nvidia.smi import parse_list

pytestmark = pytest.mark.lab

PROFILE = "a100-80gb-4"
FIRST_FREE_SEARCH = range(161, 200)
REBOOT_WAIT_S = 120.0


def free_first_index() -> int:
    for index in FIRST_FREE_SEARCH:
        if not Path("/run/systemd/nspawn/propagate", f"gpu-node-{index}").exists():
            return index
    raise RuntimeError(f"every host number in {FIRST_FREE_SEARCH} is taken by a running lab")


def wait_for_new_boot(fleet: MigFleet, old_boot: str) -> None:
    deadline = time.monotonic() + REBOOT_WAIT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(subprocess.TimeoutExpired):
            result = fleet.lab.ssh(fleet.node, "cat /proc/sys/kernel/random/boot_id", check=False)
            if result.returncode == 0 and result.stdout.strip() not in ("", old_boot):
                return
        time.sleep(1)
    raise AssertionError(f"{fleet.node} did not come back from its reboot within {REBOOT_WAIT_S:.0f}s")


class MigFleet:
    def __init__(self, lab: Lab, first: PyinfraRun, second: PyinfraRun) -> None:
        self.lab, self.first, self.second = lab, first, second
        self.node = next(iter(lab.state["hosts"]))
        self.cluster = kube.connect(lab.state["apiserver"]["kubeconfig"])

    def ssh(self, command: str, check: bool = True) -> str:
        return self.lab.ssh(self.node, command, check=check).stdout

    def mig_devices(self) -> list[str]:
        return [
            line.strip() for line in self.ssh("nvidia-smi -L").splitlines() if line.strip().startswith("MIG")
        ]

    def boot_id(self) -> str:
        return self.ssh("cat /proc/sys/kernel/random/boot_id").strip()


@pytest.fixture(scope="module")
def mig_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MigFleet]:
    if reason := lab_skip_reason():
        pytest.skip(reason)
    paths = LabPaths(tmp_path_factory.mktemp("mig-upgrade-lab"))
    try:
        state = hosts.up(
            paths,
            nodes=1,
            profiles=[PROFILE],
            releases=["sid"],
            first_index=free_first_index(),
        )
        lab = Lab(paths, state)
        first = run_pyinfra(lab, *OLD)
        assert first.returncode == 0, first.failure
        second = run_pyinfra(lab, *OLD)
        addons = run_pyinfra(lab, *OLD, deploy="deploys/cluster_addons.py")
        assert addons.returncode == 0, addons.failure
        yield MigFleet(lab, first, second)
    finally:
        with contextlib.suppress(Exception):
            hosts.down(paths, quiet=True, poweroff=False)  # thrown away: no orderly shutdown


def test_the_deploy_installs_the_boot_unit_and_a_second_run_changes_nothing(mig_fleet: MigFleet) -> None:
    fleet = mig_fleet
    assert {"The MIG layout's boot script", "Create the MIG layout at every boot"} <= {
        op.rsplit(" | ", 1)[-1] for op in fleet.first.changed_operations()
    }
    assert fleet.second.returncode == 0
    assert fleet.second.total[:2] == (0, 0), fleet.second.changed_operations()
    state = fleet.ssh(
        f"systemctl is-enabled {mig_layout.UNIT}; systemctl is-active {mig_layout.UNIT}", check=False
    )
    assert state.split() == ["enabled", "active"]
    script = fleet.ssh(f"cat {mig_layout.SCRIPT_PATH}")
    assert "layout 0 nvidia-smi mig -i 0 -cgi 3g.40gb,2g.20gb,1g.10gb,1g.10gb -C" in script.splitlines()
    # it ran in this boot after the deploy laid the instances out: nothing for it to do
    journal = fleet.ssh(f"journalctl -b -u {mig_layout.UNIT} --no-pager -o cat")
    assert "GPU 0: has GPU instances, left as they are" in journal, journal


def test_a_mig_node_rebooted_by_the_rolling_upgrade_comes_back_with_its_layout_and_passes(
    mig_fleet: MigFleet,
) -> None:
    fleet = mig_fleet
    before = fleet.mig_devices()
    assert len(before) == 4 * 4  # inventory/lab.py: 3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb on each of the 4 GPUs
    old_boot = fleet.boot_id()

    run = run_pyinfra(fleet.lab, deploy=UPGRADE)  # the inventory's 580: a new driver, so a reboot

    # the upgrade's own validation (host, gpu, node and workloads layers) passed, or the node would stay cordoned
    assert run.returncode == 0, run.output[-5000:]
    assert summary(run.output) == {fleet.node: "upgraded"}, run.output[-3000:]
    assert fleet.boot_id() != old_boot
    assert driver_on(fleet.lab, fleet.node) == ("580.178.04-1", "580.178.04")
    view = maintenance.read_nodes(fleet.cluster)[fleet.node]
    assert (view.unschedulable, view.upgrade_state) == (False, "done")
    # the same MIG devices (UUIDs included), created by the boot unit in the new boot, before the kubelet
    assert fleet.mig_devices() == before
    journal = fleet.ssh(f"journalctl -b -u {mig_layout.UNIT} --no-pager -o cat")
    assert "GPU 0: nvidia-smi mig -i 0 -cgi 3g.40gb,2g.20gb,1g.10gb,1g.10gb -C" in journal, journal
    order = fleet.ssh(
        f"systemctl show -p ExecMainExitTimestampMonotonic --value {mig_layout.UNIT}; "
        "systemctl show -p ExecMainStartTimestampMonotonic --value kubelet"
    ).split()
    assert 0 < int(order[0]) <= int(order[1]), order


def test_without_the_unit_a_reboot_loses_the_layout_and_the_deploy_restores_both(mig_fleet: MigFleet) -> None:
    """The control: the lab's machine drops the instances at a reboot (MIG mode kept), so the test above is no
    accident of the lab keeping them; the node deploy then lays them out and enables the unit again."""
    fleet = mig_fleet
    before = fleet.mig_devices()
    fleet.ssh(f"systemctl disable {mig_layout.UNIT}")
    old_boot = fleet.boot_id()
    fleet.ssh("systemctl reboot", check=False)  # the connection may drop before ssh sees the exit status
    wait_for_new_boot(fleet, old_boot)
    fleet.ssh("systemctl is-system-running --wait", check=False)
    assert fleet.mig_devices() == []
    modes = fleet.ssh("nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader").split()
    assert modes == ["Enabled"] * 4

    run = run_pyinfra(fleet.lab)
    assert run.returncode == 0, run.failure
    changed = {op.rsplit(" | ", 1)[-1] for op in run.changed_operations()}
    assert {"Lay out MIG instances", "Create the MIG layout at every boot"} <= changed, changed
    assert fleet.mig_devices() == before
    assert fleet.ssh(f"systemctl is-enabled {mig_layout.UNIT}").strip() == "enabled"
    # nvidia-ctk wrote no spec at that boot (every GPU MIG-enabled without a MIG device: "failed add device
    # \"all\""); the MIG step, not the toolkit step before it, has it written once the instances exist
    listed = set(fleet.ssh("nvidia-ctk cdi list").split())
    mig_uuids = {m.uuid for gpu in parse_list(fleet.ssh("nvidia-smi -L")) for m in gpu.mig_devices}
    assert len(mig_uuids) == len(before) and {cdi.qualified(uuid) for uuid in mig_uuids} <= listed, listed
