"""The lab's mock ``libcuda.so.1`` (src/gpuready/lab/silicon/cuda) runs the product's own CUDA tools as
``--connection local`` runs them (``python -m gpuready.conformance.cuda.vector_add`` / ``.bandwidth`` in a shell),
and the product's checks judge what they print: a healthy machine passes, each fault fails the check that should
catch it, and the copy figures are the emulated nvbandwidth's for the same machine (one bandwidth model)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
from emulated import Machine
from static_tools import cap_minor

from gpuready.conformance.checks import Output, diag, gpu
from gpuready.nvidia import nvbandwidth
from gpuready.nvidia.nvbandwidth import NVBANDWIDTH_COMMAND

SILICON = Path(__file__).resolve().parents[2] / "src" / "gpuready" / "lab" / "silicon"
GO = shutil.which("go") or next((p for p in ("/usr/local/go/bin/go",) if os.path.exists(p)), None)
VECTOR_ADD = f"{sys.executable} -m gpuready.conformance.cuda.vector_add"  # as the gpu layer runs it locally

pytestmark = pytest.mark.skipif(
    GO is None, reason="Go is not installed: the mock libcuda.so.1 is built with cgo"
)


def _lab_build() -> ModuleType | None:
    try:
        from gpuready.lab.silicon import build
    except ImportError:
        return None
    return build


@pytest.fixture(scope="session")
def libcuda_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory holding the built mock ``libcuda.so.1``: the lab's own build (cached by source) where the
    silicon build module is there, else a plain ``go build`` of the package into a temporary directory."""
    env = {**os.environ, "PATH": f"{Path(str(GO)).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    build = _lab_build()
    if build is not None:
        saved = os.environ["PATH"]
        os.environ["PATH"] = env["PATH"]
        try:
            return Path(build.ensure_libraries(lambda _line: None, names=["cuda"])["cuda"]).parent
        except build.PrerequisiteError:
            pass  # e.g. no module proxy for the NVML header the lab build fetches: a plain build needs none
        finally:
            os.environ["PATH"] = saved
    out = tmp_path_factory.mktemp("libcuda")
    subprocess.run(
        [str(GO), "build", "-buildmode=c-shared", "-o", str(out / "libcuda.so.1"), "./cuda"],
        cwd=SILICON,
        env={**env, "CGO_ENABLED": "1"},
        check=True,
        capture_output=True,
        timeout=600,
    )
    return out


def lab(tmp: Path, profile: str, *fault: tuple[str, int | None], **kw: object) -> Machine:
    """One emulated machine (hardware file, driver state, Fabric Manager up unless ``fabric_up=False``)."""
    options: dict = {"persistence": True, "fabric_up": True, **kw}
    return Machine(tmp, profile, *fault, **options)


def run(machine: Machine, libdir: Path, command: str, timeout: float = 180) -> Output:
    """A product command through the shell, with the machine's environment and the mock library on the path."""
    env = {**machine.env, "LD_LIBRARY_PATH": str(libdir), "HOME": str(machine.tmp)}
    proc = subprocess.run(command, shell=True, env=env, capture_output=True, text=True, timeout=timeout)
    return Output(proc.returncode, proc.stdout, proc.stderr)


def emulated_nvbandwidth(machine: Machine) -> nvbandwidth.BandwidthReport:
    proc = machine.run("nvbandwidth", *shlex.split(NVBANDWIDTH_COMMAND)[1:])
    assert proc.returncode == 0, proc.stderr
    return nvbandwidth.parse_nvbandwidth_json(proc.stdout)


def assert_same_figures(measured: dict, expected: dict) -> None:
    """The product's timed figures equal the emulated nvbandwidth's: same keys, within float32 event rounding."""
    assert sorted(measured) == sorted(expected)
    for key, value in expected.items():
        assert measured[key] == pytest.approx(value, rel=2e-3), key


@pytest.fixture
def l4(fleet):
    return fleet.nodes["gpu-infer-l4-01.prod.example.com"]


# ---- vectorAdd ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", ["h100-sxm-8", "l4-1"])
def test_vector_add_passes_on_every_gpu(tmp_path, libcuda_dir, fleet, profile):
    node = fleet.nodes[
        "gpu-train-01.prod.example.com" if profile == "h100-sxm-8" else "gpu-infer-l4-01.prod.example.com"
    ]
    out = run(lab(tmp_path, profile), libcuda_dir, VECTOR_ADD)
    assert out.rc == 0, out.text
    lines = out.stdout.splitlines()
    assert len(lines) == node.gpu_count and all(line.endswith("Test PASSED") for line in lines), lines
    assert lines[0].startswith(f"CUDA device 0 ({node.gpu_model}): vectorAdd of 50000 elements")
    assert gpu.vector_add(node, out) == []


def test_off_bus_gpu_is_missing_from_cuda(tmp_path, libcuda_dir, h100):
    out = run(lab(tmp_path, "h100-sxm-8", ("off-bus", 2)), libcuda_dir, VECTOR_ADD)
    assert out.rc == 0 and out.stdout.count("Test PASSED") == 7, out.text
    assert gpu.vector_add(h100, out) == ["vectorAdd ran on 7 CUDA device(s), the inventory says 8 GPUs"]


def test_last_gpu_off_the_bus_leaves_no_cuda_device(tmp_path, libcuda_dir, l4):
    out = run(lab(tmp_path, "l4-1", ("xid-79", 0)), libcuda_dir, VECTOR_ADD)
    assert out.rc == 1
    assert "cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)" in out.stderr
    problems = gpu.vector_add(l4, out)
    assert len(problems) == 1 and "CUDA_ERROR_NO_DEVICE" in problems[0], problems


def test_driver_mismatch_fails_cu_init(tmp_path, libcuda_dir, l4):
    machine = lab(tmp_path, "l4-1", ("driver-mismatch", None))
    out = run(machine, libcuda_dir, VECTOR_ADD)
    assert out.rc == 1 and "cuInit failed: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH" in out.stderr, out.text
    assert gpu.vector_add(l4, out)
    copies = run(machine, libcuda_dir, diag.bandwidth_command("local"))
    assert copies.rc == 1
    problems, _ = diag.host_to_device(l4, copies)
    assert problems and "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH" in problems[0], problems


def write_state(machine: Machine, kmod: str, mig_gpus: tuple[int, ...] = ()) -> None:
    """The driver state of this boot (what nvemu keeps): the loaded module's version, MIG mode per GPU."""
    gpus = {
        g["uuid"]: {
            "mig_current": i in mig_gpus,
            "mig_pending": i in mig_gpus,
            "persistence": False,
            "gis": [],
        }
        for i, g in enumerate(machine.hw["gpus"])
    }
    state = Path(machine.env["GPUREADY_LAB_STATE"])
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps({"boot_id": machine.env["GPUREADY_LAB_BOOT_ID"], "kmod": kmod, "gpus": gpus}))


def test_loaded_module_of_another_version_is_a_driver_mismatch(tmp_path, libcuda_dir):
    machine = lab(tmp_path, "l4-1")
    write_state(machine, kmod="570.195.03")  # upgraded packages, old module still loaded: no reboot yet
    out = run(machine, libcuda_dir, VECTOR_ADD)
    assert out.rc == 1 and "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH" in out.stderr, out.text


def test_gpu_in_mig_mode_is_not_a_cuda_device(tmp_path, libcuda_dir):
    machine = lab(tmp_path, "h100-sxm-8")
    write_state(machine, kmod=machine.env["GPUREADY_LAB_DRIVER_VERSION"], mig_gpus=(1,))
    out = run(machine, libcuda_dir, VECTOR_ADD)
    assert out.rc == 0 and out.stdout.count("Test PASSED") == 7, out.text


def test_nvswitch_fabric_down_is_system_not_ready(tmp_path, libcuda_dir):
    out = run(lab(tmp_path, "h100-sxm-8", fabric_up=False), libcuda_dir, VECTOR_ADD)
    assert out.rc == 1 and "CUDA_ERROR_SYSTEM_NOT_READY" in out.stderr, out.text


# ---- the driver API directly: kernels by name, bytes really copied, events timing the model ----------------

PROBE = textwrap.dedent(
    """
    import ctypes, json
    from gpuready.conformance.cuda import vector_add
    lib = ctypes.CDLL("libcuda.so.1")
    u64, ptr, size = ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t
    lib.cuMemcpyHtoDAsync_v2.argtypes = [u64, ptr, size, ptr]
    lib.cuMemcpyDtoH_v2.argtypes = [ptr, u64, size]
    lib.cuMemcpyHtoD_v2.argtypes = [u64, ptr, size]
    lib.cuEventRecord.argtypes = [ptr, ptr]
    lib.cuEventSynchronize.argtypes = [ptr]
    lib.cuEventElapsedTime.argtypes = [ctypes.POINTER(ctypes.c_float), ptr, ptr]
    lib.cuCtxSetCurrent.argtypes = [ptr]
    lib.cuModuleGetFunction.argtypes = [ctypes.POINTER(ptr), ptr, ctypes.c_char_p]
    out = {"init": lib.cuInit(0)}
    dev, ctx, mod, fn = ctypes.c_int(), ptr(), ptr(), ptr()
    lib.cuDeviceGet(ctypes.byref(dev), 0)
    lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    lib.cuCtxSetCurrent(ctx)
    other = vector_add.PTX.replace("vectorAdd", "saxpy")
    out["load_other"] = lib.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(other.encode()))
    out["get_other"] = lib.cuModuleGetFunction(ctypes.byref(fn), mod, b"saxpy")
    out["load_garbage"] = lib.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(b"\\x7fELF not ptx"))
    lib.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(vector_add.PTX.encode()))
    out["get_vector_add"] = lib.cuModuleGetFunction(ctypes.byref(fn), mod, b"vectorAdd")
    n = 64 << 20
    dptr = ctypes.c_uint64()
    lib.cuMemAlloc_v2(ctypes.byref(dptr), ctypes.c_size_t(n))
    data = ctypes.create_string_buffer(bytes(range(256)) * (n // 256))
    back = ctypes.create_string_buffer(n)
    out["htod"] = lib.cuMemcpyHtoD_v2(dptr.value, data, n)
    out["dtoh"] = lib.cuMemcpyDtoH_v2(back, dptr.value, n)
    out["same_bytes"] = back.raw == data.raw[:n]
    out["out_of_range"] = lib.cuMemcpyHtoD_v2(dptr.value + n - 4, data, 8)
    start, stop = ptr(), ptr()
    lib.cuEventCreate(ctypes.byref(start), 0)
    lib.cuEventCreate(ctypes.byref(stop), 0)
    lib.cuEventRecord(start, None)
    for _ in range(4):
        lib.cuMemcpyHtoDAsync_v2(dptr.value, data, n, None)
    lib.cuEventRecord(stop, None)
    lib.cuEventSynchronize(stop)
    ms = ctypes.c_float()
    out["elapsed"] = lib.cuEventElapsedTime(ctypes.byref(ms), start, stop)
    out["ms"] = ms.value
    print(json.dumps(out))
    """
)


def test_driver_api_kernels_copies_and_event_timing(tmp_path, libcuda_dir):
    machine = lab(tmp_path, "l4-1", ("pcie-downgrade", 0))
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    out = run(machine, libcuda_dir, f"{sys.executable} {script}")
    assert out.rc == 0, out.text
    got = json.loads(out.stdout)
    assert got["init"] == 0
    # a kernel the mock cannot run: CUDA_ERROR_NOT_FOUND
    assert got["load_other"] == 0 and got["get_other"] == 500
    assert got["load_garbage"] == 200  # CUDA_ERROR_INVALID_IMAGE
    assert got["get_vector_add"] == 0
    assert got["htod"] == got["dtoh"] == 0 and got["same_bytes"] is True
    assert got["out_of_range"] == 1  # CUDA_ERROR_INVALID_VALUE
    assert got["elapsed"] == 0
    # 4 x 64 MiB over the downgraded link (L4: Gen4 x16 -> Gen2 x8): the emulated nvbandwidth's figure
    h2d = emulated_nvbandwidth(machine).host_to_device[0]
    assert got["ms"] == pytest.approx(4 * (64 << 20) / (h2d * 1e9) * 1000, rel=2e-3)


# ---- copy bandwidth against the floors ----------------------------------------------------------------------


def copies_as_modelled(machine: Machine, libcuda_dir: Path):
    """diag's bandwidth command over the mock libcuda on `machine`: it succeeds and every figure it reports
    (host->device, device->host, peer) is the emulated nvbandwidth's. Returns (its output, the parsed report)."""
    copies = run(machine, libcuda_dir, diag.bandwidth_command("local"))
    assert copies.rc == 0, copies.text
    report = nvbandwidth.parse_nvbandwidth_json(copies.stdout)
    expected = emulated_nvbandwidth(machine)
    assert_same_figures(report.host_to_device, expected.host_to_device)
    assert_same_figures(report.device_to_host, expected.device_to_host)
    assert_same_figures(report.peer, expected.peer)
    return copies, report


def test_healthy_h100_bandwidth_is_the_modelled_link_and_passes_the_floors(tmp_path, libcuda_dir, h100):
    machine = lab(tmp_path, "h100-sxm-8")
    copies, report = copies_as_modelled(machine, libcuda_dir)
    for check in (diag.host_to_device, diag.device_to_host, diag.peer):
        problems, figures = check(h100, copies)
        assert problems == [], (check.__name__, problems)
        assert figures[-1].floor is not None and figures[-1].measured >= figures[-1].floor
    assert len(report.peer) == 8 * 7


def test_link_faults_fail_the_floors_naming_the_gpu(tmp_path, libcuda_dir, h100):
    machine = lab(tmp_path, "h100-sxm-8", ("pcie-downgrade", 2), ("slow-gpu", 5), ("nvlink-down", 3))
    copies, report = copies_as_modelled(machine, libcuda_dir)
    for check, what in ((diag.host_to_device, "host->device"), (diag.device_to_host, "device->host")):
        problems, _ = check(h100, copies)
        assert [p.split(":")[0] for p in problems] == ["GPU 2", "GPU 5"], problems
        assert all(f"{what} " in p and "GB/s < floor" in p for p in problems)
    peer = diag.peer(h100, copies)[0]
    assert peer and all("GPU 3" in p or "GPU 5" in p for p in peer), peer
    # GPU 3 without NVLink: PCIe peers on its NUMA node (GPUs 0-2), none across (4-7), as on real hosts
    assert (3, 0) in report.peer and (3, 4) not in report.peer
    assert any(p.startswith("GPU 4 -> GPU 3: no peer figure") for p in peer)


def test_l4_slow_gpu_fails_both_host_copy_floors(tmp_path, libcuda_dir, l4):
    copies = run(lab(tmp_path, "l4-1", ("slow-gpu", 0)), libcuda_dir, diag.bandwidth_command("local"))
    assert copies.rc == 0, copies.text
    for check in (diag.host_to_device, diag.device_to_host):
        problems, _ = check(l4, copies)
        assert len(problems) == 1 and problems[0].startswith("GPU 0: "), problems


def test_a_process_sees_the_gpus_and_the_one_mig_device_its_device_nodes_give(tmp_path, libcuda_dir):
    """In a container the runtime gives a pod its GPUs as device nodes, and a MIG device as its parent's node
    plus the GPU instance's capability node: CUDA then sees exactly those (one MIG device per process)."""
    machine = lab(tmp_path, "a100-80gb-4")
    for boot, args in (
        ("boot-1", ("-i", "2", "-mig", "1")),
        ("boot-2", ("mig", "-i", "2", "-cgi", "9,14", "-C")),
    ):
        machine.env["GPUREADY_LAB_BOOT_ID"] = boot  # MIG mode takes effect at the next boot
        result = machine.run("nvidia-smi", *args)
        assert result.returncode == 0, result.stdout + result.stderr
    state = json.loads(Path(machine.env["GPUREADY_LAB_STATE"]).read_text())
    gpu2 = machine.hw["gpus"][2]
    gi_2g = next(gi["id"] for gi in state["gpus"][gpu2["uuid"]]["gis"] if gi["profile_id"] == 14)
    dev = tmp_path / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    minor = gpu2["minor_number"]
    for node in (
        "nvidiactl",
        f"nvidia{minor}",
        f"nvidia-caps/nvidia-cap{cap_minor(machine.env, minor, gi_2g)}",
    ):
        (dev / node).touch()
    machine.env["GPUREADY_LAB_DEV"] = str(dev)
    out = run(machine, libcuda_dir, VECTOR_ADD)
    assert out.rc == 0 and out.stdout.count("Test PASSED") == 1, out.text
    assert "NVIDIA A100-SXM4-80GB MIG 2g.20gb" in out.stdout, out.text

    for node in (f"nvidia{minor}", f"nvidia-caps/nvidia-cap{cap_minor(machine.env, minor, gi_2g)}"):
        (dev / node).unlink()
    for whole in machine.hw["gpus"][:2]:
        (dev / f"nvidia{whole['minor_number']}").touch()
    out = run(machine, libcuda_dir, VECTOR_ADD)
    assert out.rc == 0 and out.stdout.count("Test PASSED") == 2, out.text
    assert "MIG" not in out.stdout, out.text
