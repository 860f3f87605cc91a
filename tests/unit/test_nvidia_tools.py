"""NVIDIA's real container toolkit, built from its Go module (gpuready.lab.nvidia_tools), does what the lab and the
product expect of it: it reports its version, and what ``nvidia-ctk runtime configure`` writes for containerd is
what the product's own host checks accept.

The build is cached in the lab cache (``gpuready.lab.state.cache_dir()``), so only the first run here compiles
(about a minute on 2 cores); skipped where Go or gcc is missing.
"""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import tomlkit

from gpuready.conformance.checks import Output
from gpuready.conformance.checks import host as host_checks
from gpuready.lab import nvidia_tools
from gpuready.lab.cluster.binaries import go_problem
from gpuready.nvidia import containerd_config
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
