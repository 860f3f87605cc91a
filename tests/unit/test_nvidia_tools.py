"""NVIDIA's real container toolkit, built from its Go module (gpuready.lab.nvidia_tools), does what the lab and the
product expect of it: it reports its version, and what ``nvidia-ctk runtime configure`` writes for containerd is
what the product's own host checks accept.

The build is cached in the lab cache (``gpuready.lab.state.cache_dir()``), so only the first run here compiles
(about a minute on 2 cores); skipped where Go or gcc is missing.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest
import tomlkit
import yaml
from emulated import Machine

from gpuready.conformance.checks import Output
from gpuready.conformance.checks import host as host_checks
from gpuready.lab import nvidia_tools
from gpuready.lab.cluster.binaries import PrerequisiteError, go_problem
from gpuready.nvidia import cdi, containerd_config
from gpuready.nvidia.smi import parse_list
from gpuready.spec.model import NodeSpec

pytestmark = pytest.mark.skipif(
    go_problem() is not None or shutil.which("gcc") is None,
    reason=f"building NVIDIA's toolkit needs Go and gcc: {go_problem() or 'gcc is not on PATH'}",
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


# ---- nvidia-ctk cdi generate over the lab's mock NVML ------------------------------------------------------------
NVIDIA_MAJOR = 195  # the kernel driver's fixed major: /dev/nvidia<minor>, nvidiactl 255, nvidia-modeset 254
UVM_MAJOR, CAPS_MAJOR = 510, 509  # dynamic majors (/proc/devices) on a real node; any free ones do here
GIS, CIS = 15, 8  # GPU and compute instance ids the driver has capability minors for, per GPU


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


def mig_minors(gpu_minors: list[int]) -> str:
    """/proc/driver/nvidia-caps/mig-minors as the driver writes it: config, monitor, then every GPU and compute
    instance's access capability by GPU minor, each with its /dev/nvidia-caps/nvidia-cap<minor>."""
    lines, minor = ["config 1", "monitor 2"], 3
    for gpu in gpu_minors:
        for gi in range(GIS):
            lines.append(f"gpu{gpu}/gi{gi}/access {minor}")
            minor += 1
            for ci in range(CIS):
                lines.append(f"gpu{gpu}/gi{gi}/ci{ci}/access {minor}")
                minor += 1
    return "\n".join(lines) + "\n"


def host_root(root: Path, gpu_minors: list[int], driver: str, nvml: Path) -> None:
    """What ``cdi generate`` reads under --dev-root and --driver-root: the driver's character devices (regular
    files are not device nodes to it) and its versioned libraries where the driver package installs them."""
    dev = root / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    nodes = {f"nvidia{m}": (NVIDIA_MAJOR, m) for m in gpu_minors}
    nodes |= {"nvidiactl": (NVIDIA_MAJOR, 255), "nvidia-modeset": (NVIDIA_MAJOR, 254)}
    nodes |= {"nvidia-uvm": (UVM_MAJOR, 0), "nvidia-uvm-tools": (UVM_MAJOR, 1)}
    nodes |= {f"nvidia-caps/nvidia-cap{m}": (CAPS_MAJOR, m) for m in (1, 2)}
    for line in mig_minors(gpu_minors).splitlines()[2:]:
        minor = int(line.split()[1])
        nodes[f"nvidia-caps/nvidia-cap{minor}"] = (CAPS_MAJOR, minor)
    for name, (major, minor) in nodes.items():
        os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    shutil.copy(nvml, lib / f"libnvidia-ml.so.{driver}")
    (lib / "libnvidia-ml.so.1").symlink_to(f"libnvidia-ml.so.{driver}")
    shutil.copy(nvml, lib / f"libcuda.so.{driver}")  # an ELF file by the name is all the spec needs of it
    (lib / "libcuda.so.1").symlink_to(f"libcuda.so.{driver}")
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nvidia-smi").write_text("#!/bin/sh\n")
    (root / "usr/bin/nvidia-smi").chmod(0o755)


def generate(
    toolkit: dict[str, Path], machine: Machine, root: Path, out: Path
) -> subprocess.CompletedProcess:
    """``nvidia-ctk cdi generate`` in a mount namespace of its own whose /proc/driver holds the driver's MIG minors
    (the toolkit reads /proc/driver/nvidia-caps/mig-minors at that absolute path, not under --dev-root)."""
    proc_driver = machine.tmp / "proc-driver"
    (proc_driver / "nvidia-caps").mkdir(parents=True, exist_ok=True)
    minors = sorted(g.get("minor_number", g["index"]) for g in machine.hw["gpus"])
    (proc_driver / "nvidia-caps/mig-minors").write_text(mig_minors(minors))
    ctk = toolkit["nvidia-ctk"]
    script = (
        f'mount --bind "{proc_driver}" /proc/driver && exec "{ctk}" cdi generate '
        f'--dev-root="{root}" --driver-root="{root}" --output="{out}"'
    )
    env = {**machine.env, "LD_LIBRARY_PATH": str(root / "usr/lib/x86_64-linux-gnu")}
    return run("unshare", "--mount", "--propagation=private", "sh", "-c", script, env=env)


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or not Path("/proc/driver").is_dir(),
    reason="device nodes (mknod) and a private /proc/driver (unshare --mount) need root",
)


@needs_root
@pytest.mark.parametrize("profile, mig_gpus", [("h100-sxm-8", ()), ("a100-80gb-4", (0, 1))])
def test_cdi_generate_names_what_nvidia_smi_lists(
    toolkit: dict[str, Path], tmp_path: Path, profile: str, mig_gpus: tuple[int, ...]
) -> None:
    """The real ``cdi generate`` over the mock NVML names exactly the GPUs and MIG devices the lab's
    ``nvidia-smi -L`` lists (by index and UUID, plus ``all``): the CDI host check's expectation."""
    nvml = mock_nvml()
    if mig_gpus and shutil.which("nm") and (missing := missing_symbols(nvml, MIG_SYMBOLS)):
        pytest.skip(
            f"the mock NVML does not export what cdi generate calls for MIG devices: {', '.join(missing)}"
        )
    machine = Machine(tmp_path, profile)
    for gpu in mig_gpus:
        assert machine.run("nvidia_smi", "-i", str(gpu), "-mig", "1").returncode == 0
    machine.env["GPUREADY_LAB_BOOT_ID"] = "boot-2"  # MIG mode applies at the next boot
    for gpu in mig_gpus:
        created = machine.run("nvidia_smi", "mig", "-i", str(gpu), "-cgi", "9,14,19", "-C")
        assert created.returncode == 0, created.stdout + created.stderr
    listing = machine.run("nvidia_smi", "-L")
    assert listing.returncode == 0, listing.stderr
    wanted = cdi.expected_devices(parse_list(listing.stdout))
    assert sum(1 for name in wanted if name.startswith("MIG-")) == 3 * len(mig_gpus)
    root = tmp_path / "root"
    minors = [g.get("minor_number", g["index"]) for g in machine.hw["gpus"]]
    host_root(root, minors, machine.env["GPUREADY_LAB_DRIVER_VERSION"], nvml)
    out = tmp_path / "nvidia.yaml"
    generated = generate(toolkit, machine, root, out)
    assert generated.returncode == 0, generated.stderr
    spec = yaml.safe_load(out.read_text())
    assert spec["kind"] == cdi.KIND
    assert sorted(d["name"] for d in spec["devices"]) == sorted(wanted)
    # the product's host check reads the spec as it reads a node's, and passes it
    spec_out = Output(0, f"{cdi.FILE_MARK}{cdi.SPEC_PATH}\n{out.read_text()}", "")
    assert host_checks.cdi_spec(spec_out, Output(0, listing.stdout, "")) == []
