"""NVIDIA's real nvidia-mig-parted (v0.13.1, built from its Go module) partitions the lab's emulated A100s through
the mock libnvidia-ml.so.1, and the emulated nvidia-smi sees exactly what it made (one driver state, one lock).

mig-parted reads two host files at fixed paths besides NVML: ``/proc/modules`` (an ``nvidia`` line, else it takes
a PCI config-space path the lab does not emulate) and ``/sys/bus/pci/devices`` (the GPUs it walks). Each run here
is therefore made in a private mount namespace (``unshare``; a user namespace when not root) where a tmpfs
``/proc`` holds that ``modules`` file (``/proc/self`` still links to the real procfs) and the GPUs' sysfs
directories are bound over ``/sys/bus/pci/devices``; ``nvidia-smi`` on PATH is the lab's emulator, which
mig-parted runs as ``nvidia-smi -r -i <bus ids>`` to make a pending MIG mode take effect.

The NVML MIG mutation calls are also checked directly through ctypes for the return codes the real library
gives (pending mode, no MIG mode, no capacity left, in use, stale handles).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from emulated import Machine
from static_tools import static_tools

from gpuready.lab.gobuild import PrerequisiteError, cgo_problem
from gpuready.lab.silicon import build

# inventory/lab.py: the a100-80gb-4 pool's mig_layout (mixed strategy), the same on every GPU
LAB_LAYOUT = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
CONFIG = """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  lab:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.40gb": 1
        "2g.20gb": 1
        "1g.10gb": 2
"""
# NVML return codes (nvml.h)
SUCCESS, INVALID_ARGUMENT, NOT_SUPPORTED, NOT_FOUND, IN_USE, INSUFFICIENT_RESOURCES = 0, 2, 3, 6, 19, 23


def _need_cgo() -> None:
    problem = cgo_problem()
    if problem:
        pytest.skip(f"built with Go and cgo: {problem}")


@pytest.fixture(scope="session")
def nvml_dir() -> Path:
    _need_cgo()
    return build.ensure_libraries(lambda _msg: None, names=["nvml"])["nvml"].parent


@pytest.fixture(scope="session")
def mig_parted() -> Path:
    _need_cgo()
    from gpuready.lab.mig_parted import ensure_mig_parted

    try:
        return ensure_mig_parted()
    except PrerequisiteError as exc:  # the Go module proxy is out of reach
        pytest.skip(f"nvidia-mig-parted could not be built: {exc}")


@pytest.fixture(scope="session")
def unshare() -> list[str]:
    """The command prefix giving a private mount namespace: as root, or in a user namespace."""
    tool = shutil.which("unshare")
    if not tool:
        pytest.skip("unshare (util-linux) is not on PATH: mig-parted needs /proc/modules and sysfs faked")
    for prefix in ([tool, "-m"], [tool, "-r", "-m"]):
        if subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
            return prefix
    pytest.skip("no mount namespace can be made here (unshare -m / -rm refused)")


class _Host(Machine):
    """An a100-80gb-4 lab machine with what mig-parted reads besides NVML, and a way to run it there."""

    def __init__(self, tmp: Path, nvml_dir: Path, prefix: list[str]) -> None:
        super().__init__(tmp, "a100-80gb-4")
        self.prefix = prefix
        self.env["LD_LIBRARY_PATH"] = str(nvml_dir)
        sysfs = tmp / "sys-pci"
        for gpu in self.hw["gpus"]:
            ids = gpu["pci_device_id"]
            d = sysfs / gpu["pci_bus_id"].lower()[4:]
            d.mkdir(parents=True)
            values = {
                "vendor": f"0x{ids[4:].lower()}",
                "device": f"0x{ids[:4].lower()}",
                "class": "0x030200",
                "numa_node": str(gpu.get("numa_node", -1)),
                "resource": "0x0000000000000000 0x0000000000000000 0x0000000000000000",
            }
            for name, value in values.items():
                (d / name).write_text(value + "\n")
        (tmp / "modules").write_text("nvidia_uvm 1 0 - Live 0x0\nnvidia 1 1 nvidia_uvm, Live 0x0\n")
        (tmp / "realproc").mkdir()
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        smi = bin_dir / "nvidia-smi"
        smi.symlink_to(static_tools())  # the static tools' nvidia-smi, by the name it is run as
        self.env["PATH"] = f"{bin_dir}:{self.env['PATH']}"
        self.wrapper = tmp / "in-host.sh"
        self.wrapper.write_text(
            textwrap.dedent(
                """\
                #!/bin/sh
                set -e
                T="$1"; shift
                mount --bind /proc "$T/realproc"
                mount -t tmpfs lab-proc /proc
                ln -s "$T/realproc/self" /proc/self
                cp "$T/modules" /proc/modules
                mount --bind "$T/sys-pci" /sys/bus/pci/devices
                exec "$@"
                """
            )
        )
        self.wrapper.chmod(0o755)
        self.config = tmp / "config.yaml"
        self.config.write_text(CONFIG)

    def mig_parted(self, binary: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.prefix, str(self.wrapper), str(self.tmp), str(binary), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def smi(self, *args: str) -> str:
        result = self.run("nvidia-smi", *args)
        assert result.returncode == 0, f"nvidia-smi {args}: {result.stdout}{result.stderr}"
        return result.stdout

    def mig_devices(self) -> dict[int, list[str]]:
        """`nvidia-smi -L`: each GPU's MIG device names in device order."""
        out: dict[int, list[str]] = {}
        gpu = -1
        for line in self.smi("-L").splitlines():
            if line.startswith("GPU "):
                gpu = int(line.split()[1].rstrip(":"))
                out[gpu] = []
            elif line.strip().startswith("MIG "):
                out[gpu].append(line.split()[1])
        return out


def test_apply_partitions_the_gpus_and_nvidia_smi_lists_exactly_them(
    tmp_path: Path, nvml_dir: Path, mig_parted: Path, unshare: list[str]
) -> None:
    host = _Host(tmp_path, nvml_dir, unshare)
    assert host.mig_devices() == {0: [], 1: [], 2: [], 3: []}

    # Not applied yet: assert fails before anything is changed.
    before = host.mig_parted(mig_parted, "assert", "-f", str(host.config), "-c", "lab")
    assert before.returncode != 0, before.stdout + before.stderr

    applied = host.mig_parted(mig_parted, "apply", "-f", str(host.config), "-c", "lab")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "MIG configuration applied successfully" in applied.stdout + applied.stderr
    # MIG mode took effect through mig-parted's `nvidia-smi -r` (pending until a reset in the lab, as on a VM).
    modes = host.smi("--query-gpu=mig.mode.current,mig.mode.pending", "--format=csv,noheader")
    assert modes.split("\n")[:4] == ["Enabled, Enabled"] * 4, modes
    listed = host.mig_devices()
    assert sorted(listed) == [0, 1, 2, 3]
    for gpu, names in listed.items():
        assert Counter(names) == Counter(LAB_LAYOUT), (gpu, names)

    ok = host.mig_parted(mig_parted, "assert", "-f", str(host.config), "-c", "lab")
    assert ok.returncode == 0, ok.stdout + ok.stderr

    # Take one 1g.10gb instance away through the emulated nvidia-smi: mig-parted sees the change at once.
    state = json.loads((tmp_path / "state" / "state.json").read_text())
    gis = state["gpus"][host.hw["gpus"][0]["uuid"]]["gis"]
    small = next(gi["id"] for gi in gis if gi["size"] == 1)
    host.smi("mig", "-i", "0", "-gi", str(small), "-dci")
    host.smi("mig", "-i", "0", "-gi", str(small), "-dgi")
    assert Counter(host.mig_devices()[0]) == Counter(["3g.40gb", "2g.20gb", "1g.10gb"])
    broken = host.mig_parted(mig_parted, "assert", "-f", str(host.config), "-c", "lab")
    assert broken.returncode != 0
    assert "not currently applied" in broken.stdout + broken.stderr

    # Applying again repairs it without a reset (MIG mode is already on).
    again = host.mig_parted(mig_parted, "apply", "-f", str(host.config), "-c", "lab")
    assert again.returncode == 0, again.stdout + again.stderr
    assert Counter(host.mig_devices()[0]) == Counter(LAB_LAYOUT)

    # The state file stays in nvemu's exact layout (json.dumps(indent=1, sort_keys=True)).
    text = (tmp_path / "state" / "state.json").read_text()
    assert text == json.dumps(json.loads(text), indent=1, sort_keys=True)


MUTATIONS = """
import ctypes, json, sys
lib = ctypes.CDLL("libnvidia-ml.so.1")
assert lib.nvmlInit_v2() == 0
h = ctypes.c_void_p()
assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
profiles = json.loads(sys.argv[1])
out = {}
def mode():
    cur, pend = ctypes.c_uint(), ctypes.c_uint()
    assert lib.nvmlDeviceGetMigMode(h, ctypes.byref(cur), ctypes.byref(pend)) == 0
    return [cur.value, pend.value]
"""

BEFORE_RESET = """
status = ctypes.c_int(-1)
out["set"] = lib.nvmlDeviceSetMigMode(h, 1, ctypes.byref(status))
out["activation"] = status.value
out["mode"] = mode()
gi = ctypes.c_void_p()
out["create_without_mig"] = lib.nvmlDeviceCreateGpuInstance(h, profiles["7g.80gb"], ctypes.byref(gi))
print(json.dumps(out))
"""

AFTER_RESET = """
class Placement(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]
gi, small, ci = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
count = ctypes.c_uint()
out["mode"] = mode()
out["create_full"] = lib.nvmlDeviceCreateGpuInstance(h, profiles["7g.80gb"], ctypes.byref(gi))
lib.nvmlDeviceGetGpuInstanceRemainingCapacity(h, profiles["1g.10gb"], ctypes.byref(count))
out["capacity_1g"] = count.value
out["create_1g_no_room"] = lib.nvmlDeviceCreateGpuInstance(h, profiles["1g.10gb"], ctypes.byref(small))
out["create_placed_taken"] = lib.nvmlDeviceCreateGpuInstanceWithPlacement(
    h, profiles["1g.10gb"], ctypes.byref(Placement(0, 1)), ctypes.byref(small))
out["create_ci_bad_profile"] = lib.nvmlGpuInstanceCreateComputeInstance(gi, 5, ctypes.byref(ci))
out["create_ci"] = lib.nvmlGpuInstanceCreateComputeInstance(gi, 4, ctypes.byref(ci))
out["create_ci_no_room"] = lib.nvmlGpuInstanceCreateComputeInstance(gi, 0, ctypes.byref(ci))
status = ctypes.c_int(-1)
out["disable_in_use"] = lib.nvmlDeviceSetMigMode(h, 0, ctypes.byref(status))
out["destroy_gi_in_use"] = lib.nvmlGpuInstanceDestroy(gi)
print(json.dumps(out), flush=True)
sys.stdin.readline()  # the test looks with nvidia-smi meanwhile
out = {}
out["destroy_ci"] = lib.nvmlComputeInstanceDestroy(ci)
out["destroy_gi"] = lib.nvmlGpuInstanceDestroy(gi)
out["destroy_gi_again"] = lib.nvmlGpuInstanceDestroy(gi)
lib.nvmlDeviceGetGpuInstanceRemainingCapacity(h, profiles["1g.10gb"], ctypes.byref(count))
out["capacity_1g_after"] = count.value
out["create_placed"] = lib.nvmlDeviceCreateGpuInstanceWithPlacement(
    h, profiles["1g.10gb"], ctypes.byref(Placement(3, 1)), ctypes.byref(small))
out["create_placed_bad_start"] = lib.nvmlDeviceCreateGpuInstanceWithPlacement(
    h, profiles["7g.80gb"], ctypes.byref(Placement(1, 8)), ctypes.byref(gi))
print(json.dumps(out), flush=True)
"""


def test_nvml_mig_mutations_return_the_real_codes_and_write_the_shared_state(
    tmp_path: Path, nvml_dir: Path
) -> None:
    if os.geteuid() != 0 and not os.access(tmp_path, os.W_OK):
        pytest.skip("needs a writable state directory")
    machine = Machine(tmp_path, "a100-80gb-4")
    env = {**machine.env, "LD_LIBRARY_PATH": str(nvml_dir)}
    gpu0 = machine.hw["gpus"][0]
    profiles = json.dumps({p["name"]: p["profile_id"] for p in gpu0["mig_profiles"]})

    def script(body: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", MUTATIONS + body, profiles],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    proc = script(BEFORE_RESET)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    got = json.loads(stdout)
    # Accepted, pending until a GPU reset (the lab's hosts cannot reset in place: nvidia-smi's "Not Supported").
    assert got == {
        "set": SUCCESS,
        "activation": NOT_SUPPORTED,
        "mode": [0, 1],
        "create_without_mig": NOT_SUPPORTED,
    }
    pending = machine.run(
        "nvidia-smi", "--query-gpu=mig.mode.current,mig.mode.pending", "--format=csv,noheader"
    )
    assert pending.stdout.splitlines()[0] == "Disabled, Enabled", pending.stdout

    reset = machine.run("nvidia-smi", "-r", "-i", "0")
    assert reset.returncode == 0, reset.stdout

    proc = script(AFTER_RESET)
    assert proc.stdout is not None and proc.stdin is not None
    got = json.loads(proc.stdout.readline() or "{}")
    try:
        assert got == {
            "mode": [1, 1],
            "create_full": SUCCESS,
            "capacity_1g": 0,
            "create_1g_no_room": INSUFFICIENT_RESOURCES,
            "create_placed_taken": INSUFFICIENT_RESOURCES,
            "create_ci_bad_profile": NOT_SUPPORTED,
            "create_ci": SUCCESS,
            "create_ci_no_room": INSUFFICIENT_RESOURCES,
            "disable_in_use": IN_USE,
            "destroy_gi_in_use": IN_USE,
        }
        # What NVML made is what the emulated nvidia-smi lists, at once.
        listed = machine.run("nvidia-smi", "-L").stdout
        assert "MIG 7g.80gb     Device  0:" in listed, listed
        lgi = machine.run("nvidia-smi", "mig", "-lgi", "-i", "0").stdout
        assert "MIG 7g.80gb" in lgi and "0:8" in lgi, lgi
    finally:
        proc.stdin.write("\n")
        proc.stdin.flush()
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert json.loads(stdout) == {
        "destroy_ci": SUCCESS,
        "destroy_gi": SUCCESS,
        "destroy_gi_again": INVALID_ARGUMENT,
        "capacity_1g_after": 7,
        "create_placed": SUCCESS,
        "create_placed_bad_start": INVALID_ARGUMENT,
    }
    lgi = machine.run("nvidia-smi", "mig", "-lgi", "-i", "0").stdout
    assert "MIG 1g.10gb" in lgi and "3:1" in lgi and "7g.80gb" not in lgi, lgi
    # The driver numbers a 1g instance by its placement (mig.py): slot 3 of 8 is GI 10.
    state = json.loads((tmp_path / "state" / "state.json").read_text())
    assert [(gi["id"], gi["start"]) for gi in state["gpus"][gpu0["uuid"]]["gis"]] == [(10, 3)]
