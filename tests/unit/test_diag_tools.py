"""``diag_tools``: the node deploy installs DCGM 4 for the driver's CUDA major with its nvidia-dcgm service, and
nvbandwidth where a repository has it; ``gpuready plan`` shows it; the lab's CUDA repository serves the packages
under those names (the operation fixtures are tests/operations/apt.where_available; the lab run is
tests/lab/test_lab_diag_tools.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from emulated import Machine
from static_tools import static_tools
from test_spec import write_inventory

from gpuready.cli import main
from gpuready.deploy.facts.apt import AptCandidate
from gpuready.lab import packages
from gpuready.nvidia import diag_packages
from gpuready.spec import load_fleet


@pytest.mark.parametrize(
    ("driver", "cuda_package"),
    [
        ("580.178.04", "datacenter-gpu-manager-4-cuda13"),
        ("595.91.07", "datacenter-gpu-manager-4-cuda13"),
        ("570.195.03", "datacenter-gpu-manager-4-cuda12"),
        ("535.288.01", "datacenter-gpu-manager-4-cuda12"),
        ("470.256.02", "datacenter-gpu-manager-4-cuda11"),
    ],
)
def test_the_dcgm_package_follows_the_drivers_cuda_major(driver, cuda_package):
    assert diag_packages.dcgm_packages(driver) == ["datacenter-gpu-manager-4-core", cuda_package]


def inventory(tmp_path: Path, name: str, **data: object) -> Path:
    """One inventory per directory: a path loaded once is not read again."""
    (tmp_path / name).mkdir()
    return write_inventory(tmp_path / name, **data)


def test_off_by_default_and_on_where_the_inventory_asks(tmp_path):
    (node,) = load_fleet(inventory(tmp_path, "off")).nodes.values()
    assert not node.diag_tools
    assert "diag" not in node.apt_packages
    (node,) = load_fleet(inventory(tmp_path, "on", diag_tools=True)).nodes.values()
    assert node.diag_tools
    assert node.apt_packages["diag"] == ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13"]
    older = inventory(
        tmp_path, "r570", diag_tools=True, nvidia_driver_branch="570", nvidia_driver_version="570.195.03"
    )
    (node,) = load_fleet(older).nodes.values()
    assert node.apt_packages["diag"][1] == "datacenter-gpu-manager-4-cuda12"


def test_plan_shows_the_diag_tools(tmp_path, capsys):
    on = str(inventory(tmp_path, "on", diag_tools=True))
    assert main(["plan", on, "--json"]) == 0
    install = json.loads(capsys.readouterr().out)["nodes"]["node-1"]["install"]
    assert install["packages"]["diag"] == ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13"]
    assert install["diag_tools"] == {
        "services": ["nvidia-dcgm"],
        "where_a_repository_has_it": ["nvbandwidth"],
    }
    assert main(["plan", on]) == 0
    text = capsys.readouterr().out
    assert "install      diag        datacenter-gpu-manager-4-core datacenter-gpu-manager-4-cuda13\n" in text
    assert (
        "install      diag        nvbandwidth where a repository has it; service nvidia-dcgm enabled and running"
        in text
    )
    assert main(["plan", str(inventory(tmp_path, "off")), "--json"]) == 0
    assert "diag_tools" not in json.loads(capsys.readouterr().out)["nodes"]["node-1"]["install"]


@pytest.mark.parametrize(
    ("output", "candidate"),
    [(["0.9+ds-2"], "0.9+ds-2"), (["(none)"], None), ([], None), (["1:4.5.2-1"], "1:4.5.2-1")],
)
def test_apt_candidate(output, candidate):
    assert AptCandidate.process(output) == candidate
    assert AptCandidate().command("nvbandwidth") == (
        "apt-cache policy nvbandwidth | sed -n 's/^ *Candidate: *//p'"
    )


def test_the_lab_serves_dcgm_under_the_real_names_with_its_unit(tmp_path: Path):
    tools = tmp_path / "nvidia-emu-tools"
    tools.write_bytes(b"\x7fELF")
    debs = {deb.name: deb for deb in packages.diag_debs(tools)}
    assert sorted(debs) == [
        "datacenter-gpu-manager-4-core",
        "datacenter-gpu-manager-4-cuda12",
        "datacenter-gpu-manager-4-cuda13",
        "nvbandwidth",
    ]
    core = debs["datacenter-gpu-manager-4-core"]
    assert "/lib/systemd/system/nvidia-dcgm.service" in core.files
    # dcgmi and nv-hostengine are the static tools under their names, ELF files as NVIDIA's are
    assert core.executables == {"/usr/bin/dcgmi": tools, "/usr/bin/nv-hostengine": tools}
    unit = core.files["/lib/systemd/system/nvidia-dcgm.service"][0].decode()
    assert "ExecStart=/usr/bin/nv-hostengine -n" in unit
    assert "enable" not in core.scripts["postinst"]  # the deploy enables it, as NVIDIA's steps do
    for major in (12, 13):
        deb = debs[f"datacenter-gpu-manager-4-cuda{major}"]
        assert deb.depends == [f"datacenter-gpu-manager-4-core (= {packages.DCGM_VERSION})"]
    assert debs["nvbandwidth"].executables == {"/usr/bin/nvbandwidth": tools}  # the static tools, by its name
    # every package the deploy asks for on the lab's drivers is served
    for driver in packages.DRIVER_VERSIONS:
        assert set(diag_packages.dcgm_packages(driver)) <= set(debs)


def hostengine(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [static_tools(), "nv-hostengine", *args], capture_output=True, text=True, env=env, timeout=30
    )


def test_emulated_hostengine_version_and_options():
    assert hostengine("--version").stdout == "version : 4.5.2\n"
    bad = hostengine("--frobnicate")
    assert (bad.returncode, bad.stderr) == (1, "nv-hostengine: unknown option --frobnicate\n")


def test_emulated_hostengine_terminates_the_running_one(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        pid_file = tmp_path / "hostengine.pid"
        pid_file.write_text(f"{sleeper.pid}\n")
        done = hostengine("-t", "--pid", str(pid_file))
        assert (done.returncode, done.stdout) == (0, "Host engine successfully terminated.\n")
        assert sleeper.wait(timeout=10) != 0
    finally:
        sleeper.kill()
        sleeper.wait()
    none = hostengine("-t", "--pid", str(tmp_path / "none.pid"))
    assert (none.returncode, none.stderr) == (1, "Unable to terminate host engine.\n")


def test_emulated_hostengine_starts_where_nvml_does(tmp_path):
    host = Machine(tmp_path, "l4-1")
    env = {**host.env, "GPUREADY_LAB_HOSTENGINE_PID": str(tmp_path / "run" / "nv-hostengine.pid")}
    pid_file = tmp_path / "run" / "nv-hostengine.pid"
    # forking (no -n): the pid file names the daemon when the starter exits; -t stops it
    assert hostengine(env=env).returncode == 0
    assert Path(f"/proc/{int(pid_file.read_text())}").exists()
    assert hostengine("-t", env=env).stdout == "Host engine successfully terminated.\n"
    deadline = time.monotonic() + 20
    while pid_file.exists():  # the daemon removes its pid file as it stops
        assert time.monotonic() < deadline, "nv-hostengine did not stop on SIGTERM"
        time.sleep(0.02)  # polling for the daemon's exit, with a deadline
    # the unit's way: -n, in the foreground until SIGTERM
    proc = subprocess.Popen(
        [static_tools(), "nv-hostengine", "-n", "--service-account", "nvidia-dcgm"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not (pid_file.exists() and pid_file.read_text() == f"{proc.pid}\n"):
            assert proc.poll() is None and time.monotonic() < deadline, "nv-hostengine -n wrote no pid file"
            time.sleep(0.02)  # polling for the pid file, with a deadline
    finally:
        proc.terminate()
    out, _ = proc.communicate(timeout=20)
    assert (proc.returncode, out) == (0, "Started host engine version 4.5.2 using port number: 5555\n")
    assert not pid_file.exists()
    # after a driver change NVML cannot start until the reboot, and neither can the host engine
    host.run("nvidia-smi", "-L")
    failed = hostengine("-n", env={**env, "GPUREADY_LAB_DRIVER_VERSION": "590.48.01"})
    assert (failed.returncode, failed.stderr) == (1, "Error: DCGM initialization error\n")
