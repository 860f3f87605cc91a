"""A lab host survives a reboot, as a real machine does: `reboot` inside it is a new boot of the same host.

These tests bring up labs of their own, one host each, numbered from 201 up (gpu-node-201, ...): the session lab
uses gpu-node-1..3, and two labs must differ in their host names (nspawn's per-machine paths) to run side by side.
Their addresses need no such care: each lab has a network namespace and a subnet of its own (10.214.1.201 beside a
session lab on 10.213.0.0/16). Each fixture takes the first number no running lab holds, so a second run of this
module on the same machine does not collide with the first either.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyinfra_runs import run_pyinfra

from gpuready.lab import hosts, ssh, supervisor
from gpuready.lab.state import LabPaths

pytestmark = pytest.mark.lab

FIRST_FREE_SEARCH = range(201, 251)
PROFILE = "l4-1"
DRIVERS = ("580.178.04", "570.195.03")  # two of the driver versions the lab's CUDA repository serves
BOOT_ID = "/proc/sys/kernel/random/boot_id"
REBOOT_WAIT_S = 90.0
REBOOT_DEPLOY = """
from pyinfra.operations import server

server.reboot(name="Reboot the lab host", delay={delay}, interval=1, reboot_timeout=120)
server.shell(name="Record the boot id after the reboot", commands=["cat {boot_id} > /root/boot-after-reboot"])
"""


@dataclass
class OneHostLab:
    paths: LabPaths
    state: dict[str, Any]

    @property
    def node(self) -> str:
        return next(iter(self.state["hosts"]))

    @property
    def host(self) -> dict[str, Any]:
        return self.state["hosts"][self.node]

    def env(self) -> dict[str, str]:
        return {**os.environ, "GPUREADY_LAB_DIR": str(self.paths.root)}

    def ssh(self, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = hosts.run_on_host(self.paths, self.node, ["sh", "-c", command])
        if check and result.returncode != 0:
            raise AssertionError(f"{self.node}: {command!r} exited {result.returncode}: {result.stderr}")
        return result

    def boot_id(self) -> str:
        return self.ssh(f"cat {BOOT_ID}").stdout.strip()

    def console_markers(self) -> list[str]:
        log = self.paths.console_log(self.node).read_text(errors="replace")
        return [line for line in log.splitlines() if line.startswith(supervisor.MARKER_PREFIX)]

    def nspawn_pid(self) -> int:
        """The supervisor's one child: the systemd-nspawn of the current boot."""
        pid = self.host["pid"]
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        assert len(children) == 1, children
        return int(children[0])


def free_first_index() -> int:
    """The first host number no lab on this machine uses (nspawn's per-machine-name dir)."""
    for index in FIRST_FREE_SEARCH:
        if not Path("/run/systemd/nspawn/propagate", f"gpu-node-{index}").exists():
            return index
    raise RuntimeError(f"every host number in {FIRST_FREE_SEARCH} is taken by a running lab")


@contextlib.contextmanager
def one_host_lab(root: Path) -> Iterator[OneHostLab]:
    paths = LabPaths(root)
    try:
        state = hosts.up(
            paths,
            nodes=1,
            profiles=[PROFILE],
            control_plane=False,
            first_index=free_first_index(),
        )
        yield OneHostLab(paths, state)
    finally:
        hosts.down(paths, quiet=True)


@pytest.fixture(scope="module")
def reboot_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OneHostLab]:
    """One host converged by the real deploy (driver, persistenced, containerd, kubelet; no cluster to join).

    Lab tests are skipped (tests/lab/conftest.py) before this runs when the machine cannot run a lab.
    """
    with one_host_lab(tmp_path_factory.mktemp("reboot-lab")) as lab:
        run = run_pyinfra(lab)
        assert run.returncode == 0, run.failure
        yield lab


@pytest.fixture
def bare_lab(tmp_path: Path) -> Iterator[OneHostLab]:
    with one_host_lab(tmp_path / "lab") as lab:
        yield lab


def wait_for_new_boot(lab: OneHostLab, old_boot_id: str) -> str:
    """Poll over SSH until the host answers from another boot; the new boot id."""
    deadline = time.monotonic() + REBOOT_WAIT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(subprocess.TimeoutExpired):
            result = lab.ssh(f"cat {BOOT_ID}", check=False)
            if result.returncode == 0 and result.stdout.strip() not in ("", old_boot_id):
                return result.stdout.strip()
        time.sleep(0.2)
    raise AssertionError(
        f"{lab.node} did not come back within {REBOOT_WAIT_S:.0f}s; console:\n{hosts.console_tail(lab.paths, lab.node)}"
    )


def reboot(lab: OneHostLab) -> str:
    """`systemctl reboot` inside the host, as an admin would; returns the new boot id once it answers again."""
    old = lab.boot_id()
    lab.ssh("systemctl reboot", check=False)  # the connection may drop before ssh sees the exit status
    new = wait_for_new_boot(lab, old)
    lab.ssh("systemctl is-system-running --wait", check=False)  # boot finished: units started (or failed)
    return new


def installed_driver(lab: OneHostLab) -> str:
    return lab.ssh("dpkg-query -W -f '${Version}' libnvidia-ml1").stdout.removesuffix("-1")


def nvidia_smi_driver(lab: OneHostLab) -> subprocess.CompletedProcess[str]:
    return lab.ssh("nvidia-smi --query-gpu=driver_version --format=csv,noheader", check=False)


def lab_leftovers(lab: OneHostLab) -> dict[str, list[str]]:
    root = str(lab.paths.root)
    processes = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if f"--directory={root}/" in line:  # the supervisor's and nspawn's command lines both name it
                processes.append(line)
    return {
        "processes": processes,
        "cgroup members": [str(pid) for cg in hosts.lab_cgroups(lab.paths) for pid in hosts.cgroup_pids(cg)],
        "cgroups": [str(cg) for cg in hosts.lab_cgroups(lab.paths) if cg.exists()],
        "mounts": [line for line in Path("/proc/mounts").read_text().splitlines() if root in line.split()[1]],
        "propagate dir": [str(p) for p in [Path("/run/systemd/nspawn/propagate", lab.node)] if p.exists()],
    }


# --- reboots ----------------------------------------------------------------------------------------------------


def test_systemctl_reboot_is_a_new_boot_of_the_same_host(reboot_lab):
    lab = reboot_lab
    host = lab.host
    canary = os.urandom(8).hex()
    lab.ssh(f"echo {canary} > /root/reboot-canary")
    old_boot, old_nspawn, markers = lab.boot_id(), lab.nspawn_pid(), len(lab.console_markers())
    known_key = lab.paths.known_hosts.read_text().split()[1:3]
    requested = time.monotonic()

    new_boot = reboot(lab)

    assert new_boot != old_boot and re.fullmatch(r"[0-9a-f-]{36}", new_boot)
    # the same sshd identity on the same address and port: strict host-key checking against `up`'s known_hosts
    # passed (lab.ssh), and the key the host serves is the one recorded then
    assert lab.ssh("cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[:2] == known_key
    assert ssh.read_banner(host["address"], host["port"]) is not None
    assert lab.ssh("cat /root/reboot-canary").stdout.strip() == canary  # the overlay root keeps its files
    # the same supervisor (what `down` signals) started a new nspawn and said so in the console log
    assert hosts.status(lab.paths)["hosts"][lab.node]["running"]
    assert lab.nspawn_pid() != old_nspawn
    new_markers = lab.console_markers()[markers:]
    assert len(new_markers) == 1 and "reboot (systemd-nspawn exited 133)" in new_markers[0]
    # enabled units started in the new boot: the daemons run, kubelet (nothing to join) was started at least once
    assert lab.ssh("systemctl is-active containerd nvidia-persistenced").stdout.split() == [
        "active",
        "active",
    ]
    kubelet = lab.ssh("systemctl show -p ExecMainStartTimestampMonotonic --value kubelet").stdout.strip()
    assert int(kubelet) > 0
    if supervisor.time_namespaces_supported():  # the clocks restarted too: uptime counts from the new boot
        uptime = float(lab.ssh("cat /proc/uptime").stdout.split()[0])
        # less than the time since the reboot was asked for, read after uptime (the checks above take time too),
        # plus under a second: the namespace's clocks start at the fraction the whole-second offset leaves
        assert uptime < time.monotonic() - requested + 1


def test_a_driver_change_takes_effect_at_the_reboot(reboot_lab):
    lab = reboot_lab
    old = installed_driver(lab)
    new = next(d for d in DRIVERS if d != old)
    assert nvidia_smi_driver(lab).stdout.strip() == old  # the running module is the installed one
    run = run_pyinfra(
        lab, "--data", f"nvidia_driver_version={new}", "--data", f"nvidia_driver_branch={new[:3]}"
    )
    assert run.returncode == 0, run.output[-3000:]
    assert installed_driver(lab) == new

    mismatch = nvidia_smi_driver(lab)
    message = (mismatch.stdout + mismatch.stderr).strip()
    assert (mismatch.returncode, message) == (
        18,
        "Failed to initialize NVML: Driver/library version mismatch",
    )

    reboot(lab)

    after = nvidia_smi_driver(lab)
    assert (after.returncode, after.stdout.strip()) == (0, new)
    assert lab.ssh("systemctl is-active nvidia-persistenced").stdout.strip() == "active"


def test_pyinfra_server_reboot_waits_and_reconnects(reboot_lab, tmp_path):
    if not supervisor.time_namespaces_supported():
        pytest.skip(
            "no time namespaces: a lab host's uptime is the machine's, so server.reboot never confirms"
        )
    lab = reboot_lab
    deploy = tmp_path / "reboot.py"
    deploy.write_text(REBOOT_DEPLOY.format(delay=3, boot_id=BOOT_ID))
    old_boot = lab.boot_id()

    run = run_pyinfra(lab, inventory="inventory/lab.py", deploy=str(deploy))

    assert run.returncode == 0, run.output[-3000:]
    assert run.table["Reboot the lab host"] == (1, 0, 0)
    assert run.table["Record the boot id after the reboot"] == (1, 0, 0)
    after = lab.ssh("cat /root/boot-after-reboot").stdout.strip()
    assert after != old_boot  # the operation after the reboot ran in the new boot, over a new connection
    assert after == lab.boot_id()
    assert nvidia_smi_driver(lab).stdout.strip() == installed_driver(lab)


# --- stopping ---------------------------------------------------------------------------------------------------


def test_down_without_poweroff_kills_a_deployed_host_and_leaves_nothing(reboot_lab):
    """What the test fixtures do with a lab they are done with (hosts.down(poweroff=False), `lab down --kill`):
    the deployed host (containerd, the kubelet, its overlay snapshots) is killed, not shut down, and nothing of it
    is left: no process, cgroup, mount or nspawn directory. Last of the reboot_lab tests: the lab is gone after."""
    lab = reboot_lab
    assert lab.ssh("systemctl is-active containerd kubelet", check=False).stdout.split()[0] == "active"
    assert lab_leftovers(lab)["processes"]  # the lab is up

    hosts.down(lab.paths, quiet=True, poweroff=False)

    assert lab_leftovers(lab) == {k: [] for k in lab_leftovers(lab)}
    assert not lab.paths.state_file.exists()


def wait_for_exit_status(pid: int) -> int:
    """The supervisor is a child of this process (`up` ran here): reap it and return its exit status."""
    deadline = time.monotonic() + hosts.STOP_TIMEOUT_S + 10
    while time.monotonic() < deadline:
        reaped, status = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    raise AssertionError(f"supervisor {pid} still runs {hosts.STOP_TIMEOUT_S + 10:.0f}s after SIGTERM")


def test_sigterm_to_the_supervisor_powers_the_host_off(bare_lab):
    lab = bare_lab
    assert lab_leftovers(lab)["processes"]  # the lab is up
    os.kill(lab.host["pid"], signal.SIGTERM)

    assert wait_for_exit_status(lab.host["pid"]) == 0  # nspawn's status for a poweroff
    log = hosts.console_tail(lab.paths, lab.node, lines=5)
    assert f"Container {lab.node} has been shut down." in log
    assert lab.console_markers() == []  # powered off, never restarted
    assert lab_leftovers(lab)["cgroup members"] == []  # every process of the host ended with the poweroff

    hosts.down(lab.paths, quiet=True)
    assert lab_leftovers(lab) == {k: [] for k in lab_leftovers(lab)}


def test_sigkill_of_the_supervisor_then_down_leaves_nothing(bare_lab):
    lab = bare_lab
    nspawn = lab.nspawn_pid()
    os.kill(lab.host["pid"], signal.SIGKILL)
    assert wait_for_exit_status(lab.host["pid"]) == -signal.SIGKILL
    assert hosts._proc_start(nspawn) is not None  # the host runs on, unsupervised
    assert not hosts.status(lab.paths)["hosts"][lab.node]["running"]

    hosts.down(lab.paths, quiet=True)
    assert lab_leftovers(lab) == {k: [] for k in lab_leftovers(lab)}
