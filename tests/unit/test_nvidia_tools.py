"""NVIDIA's real container toolkit, built from its Go module (gpuready.lab.nvidia_tools), does what the lab and the
product expect of it: it reports its version, what ``nvidia-ctk runtime configure`` writes for containerd is what
the product's own host checks accept, and ``nvidia-ctk cdi generate`` over the lab's mock NVML (lab/silicon) and
the lab's rendered /dev and /proc/driver (gpuready.lab.kernel_files) names exactly the devices the lab's
``nvidia-smi -L`` lists, MIG devices included.

The build is cached in the lab cache (``gpuready.lab.state.cache_dir()``), so only the first run here compiles
(about a minute on 2 cores); skipped where Go or gcc is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import tomlkit
import yaml
from emulated import Machine
from static_tools import static_tools

from gpuready.conformance.checks import Output
from gpuready.conformance.checks import host as host_checks
from gpuready.lab import kernel_files, nvidia_tools
from gpuready.lab.emulator import nvemu
from gpuready.lab.gobuild import PrerequisiteError, cgo_problem
from gpuready.nvidia import cdi, containerd_config
from gpuready.nvidia.smi import parse_list
from gpuready.spec.model import NodeSpec

pytestmark = pytest.mark.skipif(
    cgo_problem() is not None, reason=f"building NVIDIA's toolkit needs Go and gcc: {cgo_problem()}"
)


@pytest.fixture(scope="module")
def toolkit() -> dict[str, Path]:
    return nvidia_tools.ensure_toolkit(nvidia_tools.DEFAULT_VERSION)


def run(*cmd: str | Path, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120, **kwargs)


def test_the_built_binaries_report_the_pinned_version(toolkit: dict[str, Path], h100: NodeSpec) -> None:
    version = nvidia_tools.DEFAULT_VERSION
    assert set(toolkit) == set(nvidia_tools.COMMANDS)
    ctk = run(toolkit["nvidia-ctk"], "--version")
    assert ctk.returncode == 0, ctk.stderr
    assert ctk.stdout.splitlines()[0] == f"NVIDIA Container Toolkit CLI version {version}"
    hook = run(toolkit["nvidia-cdi-hook"], "--version")
    assert hook.stdout.splitlines()[0] == f"NVIDIA CDI Hook version {version}"
    # the product's host checks read the real output: the inventory's pin, above every security floor
    assert h100.versions.toolkit == version
    assert host_checks.toolkit_version(h100, Output(0, ctk.stdout, "")) == []
    assert host_checks.toolkit_security(Output(0, ctk.stdout, "")) == []


def test_a_second_call_uses_the_cache(toolkit: dict[str, Path]) -> None:
    assert nvidia_tools.cached_toolkit(nvidia_tools.DEFAULT_VERSION) == toolkit
    assert nvidia_tools.ensure_toolkit(nvidia_tools.DEFAULT_VERSION) == toolkit


def test_ldflags_stamp_version_and_commit_as_upstreams_makefile() -> None:
    flags = nvidia_tools.ldflags("1.20.0", "abc123")
    assert f"-X {nvidia_tools.MODULE}/internal/info.version=1.20.0" in flags
    assert f"-X {nvidia_tools.MODULE}/internal/info.gitCommit=abc123" in flags
    assert "--unresolved-symbols=ignore-in-object-files" in flags and flags.startswith("-s -w ")
    assert "gitCommit" not in nvidia_tools.ldflags("1.20.0", "")


# containerd 1.7's main config as gpuready's deploy leaves it (render_main): runc with SystemdCgroup, imports
MAIN = """\
version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
"""


def merged(main: str, drop_in: str) -> str:
    """What ``containerd config dump`` prints for a main file and one imported drop-in, as containerd < 2.1 merges
    them: each plugin table of the drop-in replaces the main file's whole (containerd#5837)."""
    doc = tomllib.loads(main)
    extra = tomllib.loads(drop_in)
    doc.setdefault("plugins", {}).update(extra.get("plugins", {}))
    doc.pop("imports", None)
    return tomlkit.dumps(doc)


@pytest.mark.parametrize("cdi", [False, True], ids=["runtime-class", "cdi"])
def test_runtime_configure_writes_what_the_host_checks_accept(
    toolkit: dict[str, Path], tmp_path: Path, cdi: bool
) -> None:
    """``nvidia-ctk runtime configure`` with the settings the deploy writes itself (gpuready.nvidia.containerd_config
    RuntimeSettings: a drop-in in conf.d, runtime ``nvidia`` not the default, CDI on in CDI mode): the result passes
    the host layer's containerd checks, and its ``nvidia`` runtime is the one the deploy renders."""
    main = tmp_path / "config.toml"
    main.write_text(MAIN)
    settings = containerd_config.RuntimeSettings(enable_cdi=cdi, drop_in_dir=str(tmp_path / "conf.d"))
    args: list[str | Path] = [
        toolkit["nvidia-ctk"],
        "runtime",
        "configure",
        "--runtime=containerd",
        f"--config={main}",
        f"--drop-in-config={settings.drop_in_path}",
        "--config-source=file",  # no containerd to ask here
        f"--nvidia-runtime-name={settings.runtime_name}",
        f"--nvidia-runtime-path={settings.binary}",
    ]
    configured = run(*args, *(["--enable-cdi"] if cdi else []))
    assert configured.returncode == 0, configured.stderr
    drop_in = Path(settings.drop_in_path).read_text()
    assert settings.imports_glob in tomllib.loads(main.read_text())["imports"]
    dump = Output(0, merged(main.read_text(), drop_in), "")
    assert host_checks.containerd_nvidia_handler(dump) == []
    if cdi:
        assert host_checks.containerd_cdi(dump) == []
    ours = containerd_config.render_drop_in(MAIN, settings)
    assert containerd_config.nvidia_runtime_of(drop_in) == containerd_config.nvidia_runtime_of(ours)
    assert containerd_config.cdi_settings(drop_in)[0] == containerd_config.cdi_settings(ours)[0]


# ---- nvidia-ctk cdi generate over the lab's mock NVML and kernel files ----------------------------------------------
def mock_nvml() -> Path:
    """The lab's mock libnvidia-ml.so.1 (gpuready.lab.silicon), built once; skips the test where it cannot be."""
    build = pytest.importorskip(
        "gpuready.lab.silicon.build", reason="the mock NVML (lab/silicon) has not landed"
    )
    if "nvml" not in build.available():
        pytest.skip("the mock NVML's sources (lab/silicon/nvml) have not landed")
    try:
        return Path(build.ensure_libraries(lambda _m: None, names=["nvml"])["nvml"])
    except PrerequisiteError as exc:
        pytest.fail(f"the mock NVML does not build: {exc}")


# What cdi generate calls for a MIG device beyond a full GPU's (go-nvlib's MigDevice.GetProfile, the toolkit's MIG
# discoverer). nvidia-ctk is linked as upstream links it (NVML left unresolved, bound lazily), so a function the
# library lacks is no NVML_ERROR_FUNCTION_NOT_FOUND but "symbol lookup error" and exit 127 at its first call.
MIG_SYMBOLS = (
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlDeviceGetAttributes_v2",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetGpuInstanceById",
    "nvmlDeviceGetGpuInstanceProfileInfo",
    "nvmlGpuInstanceGetInfo",
    "nvmlGpuInstanceGetComputeInstanceById",
    "nvmlGpuInstanceGetComputeInstanceProfileInfo",
    "nvmlComputeInstanceGetInfo_v2",
)


def missing_symbols(library: Path, names: tuple[str, ...]) -> list[str]:
    """The functions of `names` that `library` does not export (nm -D)."""
    out = run("nm", "-D", "--defined-only", library).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.strip()}
    return [name for name in names if name not in exported]


def kernel_tree(machine: Machine) -> Path:
    """The machine's /dev and /proc/driver as a lab host gets them (gpuready.lab.kernel_files, from the same hardware
    and driver state files the emulated nvidia-smi reads), rendered under the test's directory; returns it."""
    hardware_file = Path(machine.env["GPUREADY_LAB_HARDWARE"])
    view = nvemu.read_view(
        Path(static_tools()),
        hardware_file,
        Path(machine.env["GPUREADY_LAB_STATE"]),
        machine.env["GPUREADY_LAB_BOOT_ID"],
    )
    kernel = machine.tmp / "kernel"
    reading = kernel_files.Reading(machine.hw, view, machine.env["GPUREADY_LAB_DRIVER_VERSION"])
    kernel_files.write(kernel, kernel_files.render(reading, Path("/proc/devices").read_text()))
    return kernel


def driver_root(root: Path, driver: str, nvml: Path) -> None:
    """The driver's files ``cdi generate`` looks for under --driver-root: the versioned libraries where the driver
    packages install them (NVML is the mock; libcuda is any file, it is only mounted) and nvidia-smi."""
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    shutil.copy(nvml, lib / f"libnvidia-ml.so.{driver}")
    (lib / "libnvidia-ml.so.1").symlink_to(f"libnvidia-ml.so.{driver}")
    (lib / f"libcuda.so.{driver}").write_text("libcuda\n")
    (lib / "libcuda.so.1").symlink_to(f"libcuda.so.{driver}")
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nvidia-smi").write_text("#!/bin/sh\n")
    (root / "usr/bin/nvidia-smi").chmod(0o755)


def generate(
    toolkit: dict[str, Path], machine: Machine, kernel: Path, root: Path, out: Path
) -> subprocess.CompletedProcess:
    """``nvidia-ctk cdi generate`` with the rendered tree as --dev-root (it holds dev/), in a mount namespace whose
    /proc/driver is the rendered one (the toolkit reads /proc/driver/nvidia-caps/mig-minors at that absolute path,
    not under --dev-root), as a lab host binds it."""
    script = (
        f'mount --bind "{kernel / "proc-driver"}" /proc/driver && exec "{toolkit["nvidia-ctk"]}" cdi generate '
        f'--dev-root="{kernel}" --driver-root="{root}" --output="{out}"'
    )
    return run("unshare", "--mount", "--propagation=private", "sh", "-c", script, env=machine.env)


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or not Path("/proc/driver").is_dir(),
    reason="device nodes (mknod) and a private /proc/driver (unshare --mount) need root",
)


@needs_root
@pytest.mark.parametrize(
    "profile, mig_gpus",
    [("h100-sxm-8", ()), ("a100-80gb-4", (0, 1)), ("l4-1", ()), ("l40s-2", ()), ("t4-1", ())],
)
def test_cdi_generate_names_what_nvidia_smi_lists(
    toolkit: dict[str, Path], tmp_path: Path, profile: str, mig_gpus: tuple[int, ...]
) -> None:
    """The real ``cdi generate`` over the mock NVML names exactly the GPUs and MIG devices the lab's
    ``nvidia-smi -L`` lists (by index and UUID, plus ``all``): the CDI host check's expectation."""
    nvml = mock_nvml()
    if mig_gpus and shutil.which("nm"):
        missing = missing_symbols(nvml, MIG_SYMBOLS)
        assert not missing, f"the mock NVML lacks what cdi generate calls for MIG devices: {missing}"
    machine = Machine(tmp_path, profile)
    for gpu in mig_gpus:
        assert machine.run("nvidia-smi", "-i", str(gpu), "-mig", "1").returncode == 0
    machine.env["GPUREADY_LAB_BOOT_ID"] = "boot-2"  # MIG mode applies at the next boot
    for gpu in mig_gpus:
        created = machine.run("nvidia-smi", "mig", "-i", str(gpu), "-cgi", "9,14,19", "-C")
        assert created.returncode == 0, created.stdout + created.stderr
    listing = machine.run("nvidia-smi", "-L")
    assert listing.returncode == 0, listing.stderr
    wanted = cdi.expected_devices(parse_list(listing.stdout))
    assert sum(1 for name in wanted if name.startswith("MIG-")) == 3 * len(mig_gpus)
    root = tmp_path / "root"
    driver_root(root, machine.env["GPUREADY_LAB_DRIVER_VERSION"], nvml)
    out = tmp_path / "nvidia.yaml"
    generated = generate(toolkit, machine, kernel_tree(machine), root, out)
    assert generated.returncode == 0, generated.stderr
    spec = yaml.safe_load(out.read_text())
    assert spec["kind"] == cdi.KIND
    assert sorted(d["name"] for d in spec["devices"]) == sorted(wanted)
    # the product's host check reads the spec as it reads a node's, and passes it
    spec_out = Output(0, f"{cdi.FILE_MARK}{cdi.SPEC_PATH}\n{out.read_text()}", "")
    assert host_checks.cdi_spec(spec_out, Output(0, listing.stdout, "")) == []
