"""The lab's static NVIDIA tools (``gpuready.lab.silicon`` ``tools``: ``nvidia-emu-tools``), which run in images
without Python: ``nvidia-cuda-mps-control`` as NVIDIA's MPS control daemon image and device plugin drive it
(k8s-device-plugin v0.19.3 ``cmd/mps-control-daemon/mps/daemon.go``), and nvidia-smi's compute mode, which must
agree with the Python nvidia-smi on the same machine.

The binary is built once per session into the real lab cache, as the mock NVML is (test_mock_nvml.py).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from emulated import Machine

from gpuready.lab.gobuild import go_problem
from gpuready.lab.silicon import build

USAGE = "Please run 'nvidia-smi -h' for help.\n"


@pytest.fixture(scope="session")
def tools() -> Path:
    problem = go_problem()
    if problem:
        pytest.skip(f"the lab's static tools are built with Go: {problem}")
    return build.static_tools()


class Mps:
    """nvidia-cuda-mps-control with its pipe and log directories under ``tmp``, as the MPS daemon image runs it:
    a copy of the binary under the tool's name (as the driver package installs it, and the CDI spec mounts it),
    the command written to standard input without a newline, the pipe closed."""

    def __init__(self, tools: Path, tmp: Path) -> None:
        self.tool = tmp / "bin" / "nvidia-cuda-mps-control"
        self.tool.parent.mkdir()
        shutil.copy2(tools, self.tool)
        self.pipe, self.log = tmp / "pipe", tmp / "log"
        self.env = {"CUDA_MPS_PIPE_DIRECTORY": str(self.pipe), "CUDA_MPS_LOG_DIRECTORY": str(self.log)}

    def run(self, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.tool), *args],
            input=stdin,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
        )

    def echo(self, command: str) -> tuple[int, str]:
        done = self.run(stdin=command)
        return done.returncode, done.stdout


def test_mps_control_daemon_as_nvidias_mps_image_drives_it(tools: Path, tmp_path: Path) -> None:
    mps = Mps(tools, tmp_path)
    # the device plugin's health check before any daemon: it fails, and says why
    assert mps.echo("get_default_active_thread_percentage") == (1, "Cannot find MPS control daemon process\n")
    started = mps.run("-d")
    assert started.returncode == 0, started.stderr
    assert (mps.pipe / "control").is_socket()
    try:
        again = mps.run("-d")
        assert again.returncode == 1 and "already running" in again.stdout
        # what daemon.go's Start sends (2 replicas of an 80 GiB GPU), then AssertHealthy's command
        assert mps.echo("set_default_device_pinned_mem_limit 0 40960M") == (0, "")
        assert mps.echo("set_default_active_thread_percentage 50") == (0, "50.0\n")
        assert mps.echo("get_default_active_thread_percentage") == (0, "50.0\n")
        assert mps.echo("get_default_device_pinned_mem_limit 0") == (0, "40960M\n")
        code, out = mps.echo("set_active_thread_percentage_everywhere 10")
        assert code == 0 and out.startswith(
            'Unrecognized command "set_active_thread_percentage_everywhere 10"'
        )
    finally:
        assert mps.echo("quit") == (0, "")
    deadline = time.monotonic() + 10
    while (mps.pipe / "control").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not (mps.pipe / "control").exists()
    assert mps.echo("get_default_active_thread_percentage")[0] == 1
    log = (mps.log / "control.log").read_text().splitlines()
    assert [line.split("] ", 1)[1] for line in log] == [
        "Startup",
        "Cmd:set_default_device_pinned_mem_limit 0 40960M",
        "Cmd:set_default_active_thread_percentage 50",
        "Cmd:get_default_active_thread_percentage",
        "Cmd:get_default_device_pinned_mem_limit 0",
        "Cmd:set_active_thread_percentage_everywhere 10",
        "Cmd:quit",
        "Exit",
    ]


def test_a_daemon_left_by_a_dead_container_does_not_block_a_new_one(tools: Path, tmp_path: Path) -> None:
    """The pod restarts: its old daemon is gone, its socket file is not. A new daemon starts in its place."""
    mps = Mps(tools, tmp_path)
    mps.pipe.mkdir()
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(mps.pipe / "control"))
    stale.close()  # the file stays, nothing listens
    assert mps.run("-d").returncode == 0
    try:
        assert mps.echo("get_default_active_thread_percentage") == (0, "100.0\n")
    finally:
        mps.echo("quit")


def test_compute_mode_set_without_python_is_what_nvidia_smi_reports(tools: Path, tmp_path: Path) -> None:
    machine = Machine(tmp_path, "l40s-2")
    uuid = machine.hw["gpus"][1]["uuid"]

    def static(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(tools), "nvidia-smi", *args], env=machine.env, capture_output=True, text=True, timeout=30
        )

    def modes() -> list[str]:
        out = machine.run("nvidia-smi", "--query-gpu=compute_mode", "--format=csv,noheader")
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    done = static("-i", uuid, "-c", "EXCLUSIVE_PROCESS")
    bus = machine.hw["gpus"][1]["pci_bus_id"]
    assert (done.returncode, done.stdout) == (
        0,
        f"Set compute mode to EXCLUSIVE_PROCESS for GPU {bus}.\nAll done.\n",
    )
    assert modes() == ["Default", "Exclusive_Process"]
    again = static("-i", uuid, "-c", "3")
    assert again.stdout.startswith(f"Compute mode is already set to EXCLUSIVE_PROCESS for GPU {bus}.")
    assert static("-c", "DEFAULT").returncode == 0  # every GPU
    assert modes() == ["Default", "Default"]
    # what it cannot do, it says, and changes nothing
    mixed = static("-L", "-c", "3")
    assert (mixed.returncode, mixed.stdout) == (2, "Invalid combination of input arguments.\n\n" + USAGE), (
        mixed
    )
    assert static("-i", "GPU-nonexistent", "-c", "3").stdout == "No devices were found\n"
    assert static("-c", "EXCLUSIVE_THREAD").stdout == 'Invalid value "EXCLUSIVE_THREAD" for option -c\n'
    assert modes() == ["Default", "Default"]
