"""The lab's NVIDIA packages carry the real names, versions and dependencies, and the right files: the emulated
driver tools, and the toolkit's built binaries where NVIDIA's packages put them (stand-ins here: the real build is
tests/unit/test_nvidia_tools.py's)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from gpuready.lab import nvidia_tools, packages
from gpuready.lab.emulator import package_files as pf

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not installed")


def fake_toolkit(where: Path):
    """A `toolkit_binaries` stand-in: one small executable per command and version, saying which it is."""

    def binaries(version: str) -> dict[str, Path]:
        found = {}
        for command in nvidia_tools.COMMANDS:
            path = where / version / command
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(f"#!/bin/sh\necho {command} {version}\n")
                path.chmod(0o755)
            found[command] = path
        return found

    return binaries


def fake_libraries() -> dict[str, Path]:
    """Stand-ins for the mock libnvidia-ml.so.1, libcuda.so.1 and static tools (tests/unit/test_mock_nvml.py,
    test_mock_cuda.py and test_emulated_tools.py build and prove the real ones)."""
    root = Path(tempfile.gettempdir()) / "gpuready-test-fake-libs"
    root.mkdir(exist_ok=True)
    libs = {
        "nvml": root / "libnvidia-ml.so.1",
        "cuda": root / "libcuda.so.1",
        "tools": root / "nvidia-emu-tools",
    }
    for name, path in libs.items():
        if not path.exists():
            path.write_bytes(b"\x7fELF fake " + name.encode())
    return libs


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    tools = fake_toolkit(tmp_path_factory.mktemp("toolkit"))
    return packages.build_packages(
        tmp_path_factory.mktemp("debs"), toolkit_binaries=tools, driver_libraries=fake_libraries
    )


def field(deb: Path, name: str) -> str:
    return subprocess.run(
        ["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True, check=True
    ).stdout.strip()


def contents(deb: Path) -> dict[str, str]:
    """path -> mode string, from dpkg-deb -c."""
    out = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    result = {}
    for line in out.splitlines():
        parts = line.split()
        path = parts[5].removeprefix(".")
        result[path.rstrip("/") or "/"] = parts[0]
    return result


def by_name(built: dict[str, list[Path]]) -> dict[tuple[str, str], Path]:
    return {(field(p, "Package"), field(p, "Version")): p for paths in built.values() for p in paths}


def test_repositories_and_package_names(built: dict[str, list[Path]]) -> None:
    assert set(built) == {"cuda", "libnvidia-container"}
    names = {key: sorted({field(p, "Package") for p in paths}) for key, paths in built.items()}
    assert names["cuda"] == [
        "datacenter-gpu-manager-4-core",
        "datacenter-gpu-manager-4-cuda12",
        "datacenter-gpu-manager-4-cuda13",
        "libcuda1",
        "libnvidia-ml1",
        "nvbandwidth",
        "nvidia-cuda-mps",
        "nvidia-driver",
        "nvidia-driver-cuda",
        "nvidia-fabricmanager",
        "nvidia-kernel-open-dkms",
        "nvidia-persistenced",
        "nvidia-smi",
    ]
    assert names["libnvidia-container"] == [
        "libnvidia-container-tools",
        "libnvidia-container1",
        "nvidia-container-toolkit",
        "nvidia-container-toolkit-base",
    ]
    versions = {field(p, "Version") for p in built["cuda"]}
    assert versions == {"580.178.04-1", "570.195.03-1", "595.91.07-1", "1:4.5.2-1", "0.8-1"}
    assert {field(p, "Version") for p in built["libnvidia-container"]} == {"1.20.0-1", "1.17.3-1"}
    # pool file names drop the epoch (1:4.5.2-1 -> 4.5.2-1), as Debian's do
    assert all(
        p.name == f"{field(p, 'Package')}_{field(p, 'Version').split(':')[-1]}_amd64.deb"
        for p in built["cuda"]
    )
    assert {field(p, "Architecture") for paths in built.values() for p in paths} == {"amd64"}


def test_control_fields_of_the_driver_and_toolkit(built: dict[str, list[Path]]) -> None:
    debs = by_name(built)
    cuda = debs[("nvidia-driver-cuda", "580.178.04-1")]
    assert field(cuda, "Depends") == (
        "nvidia-smi (= 580.178.04-1), libnvidia-ml1 (= 580.178.04-1), libcuda1 (= 580.178.04-1), "
        "nvidia-persistenced (= 580.178.04-1), nvidia-cuda-mps (= 580.178.04-1), "
        "nvidia-kernel-open-dkms (= 580.178.04-1) | nvidia-kernel-dkms-any (= 580.178.04-1)"
    )
    assert field(debs[("nvidia-driver", "570.195.03-1")], "Depends") == "nvidia-driver-cuda (= 570.195.03-1)"
    assert field(debs[("nvidia-smi", "580.178.04-1")], "Maintainer") == "cudatools <cudatools@nvidia.com>"
    toolkit = debs[("nvidia-container-toolkit", "1.20.0-1")]
    assert field(toolkit, "Depends") == (
        "nvidia-container-toolkit-base (= 1.20.0-1), libnvidia-container-tools (>= 1.20.0-1), "
        "libnvidia-container-tools (<< 2.0.0)"
    )


_DEP = re.compile(r"^(\S+)(?: \((=|>=|<<) (\S+)\))?$")


def _satisfied(match: re.Match, have: dict[str, set[str]]) -> bool:
    name, op, version = match.groups()
    if name not in have:
        return False
    return op in (None, ">=", "<<") or version in have[name]


def test_every_dependency_is_satisfiable_from_the_same_repository(built: dict[str, list[Path]]) -> None:
    """apt can install the meta packages from the lab repos alone (versions compared as the test needs)."""
    for paths in built.values():
        have: dict[str, set[str]] = {}
        for p in paths:
            have.setdefault(field(p, "Package"), set()).add(field(p, "Version"))
            for provided in filter(None, field(p, "Provides").split(", ")):
                name, version = _DEP.match(provided).groups()[0::2]  # type: ignore[union-attr]
                have.setdefault(name, set()).add(version)
        for p in paths:
            for clause in filter(None, field(p, "Depends").split(", ")):
                options = [_DEP.match(alt.strip()) for alt in clause.split("|")]
                assert all(options), clause

                assert any(_satisfied(m, have) for m in options), f"{p.name}: {clause} cannot be satisfied"


def test_driver_contents(built: dict[str, list[Path]]) -> None:
    debs = by_name(built)
    smi = contents(debs[("nvidia-smi", "580.178.04-1")])
    assert smi["/usr/bin/nvidia-smi"].startswith("-rwxr-xr-x")
    # nvidia-smi is the static tools' ELF (no Python in it), as NVIDIA's is an ELF that runs in any container
    assert not any(path.endswith(".py") for path in smi)
    ml = contents(debs[("libnvidia-ml1", "580.178.04-1")])
    # no Python in any driver package: every emulated tool is the static tools' ELF
    assert not any(path.endswith(".py") for deb in debs.values() for path in contents(deb)), "a .py file"
    assert {
        "/usr/lib/nvidia-emu/driver-version",
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
    } <= set(ml)
    pd = contents(debs[("nvidia-persistenced", "580.178.04-1")])
    assert "/lib/systemd/system/nvidia-persistenced.service" in pd and "/usr/bin/nvidia-persistenced" in pd
    fm = contents(debs[("nvidia-fabricmanager", "580.178.04-1")])
    assert {
        "/usr/bin/nv-fabricmanager",
        "/lib/systemd/system/nvidia-fabricmanager.service",
        "/usr/share/nvidia/nvswitch/fabricmanager.cfg",
    } <= set(fm)
    assert "/usr/bin/nvidia-smi" not in contents(debs[("nvidia-driver", "580.178.04-1")])
    tk = by_name(built)
    base = contents(tk[("nvidia-container-toolkit-base", "1.20.0-1")])
    assert {"/usr/bin/nvidia-ctk", "/usr/bin/nvidia-container-runtime", "/usr/bin/nvidia-cdi-hook"} <= set(
        base
    )
    assert "/usr/bin/nvidia-container-runtime-hook" in contents(tk[("nvidia-container-toolkit", "1.20.0-1")])
    # nvidia-container-cli is the static tools' ELF (no Python in it); it reports libnvidia-container1's version
    cli = contents(tk[("libnvidia-container-tools", "1.20.0-1")])
    assert cli["/usr/bin/nvidia-container-cli"].startswith("-rwxr-xr-x")
    assert not any(path.endswith(".py") for path in cli)
    assert "/usr/lib/nvidia-container-emu/version" in contents(tk[("libnvidia-container1", "1.20.0-1")])
    # the CDI refresh units ship from 1.18 on
    assert "/lib/systemd/system/nvidia-cdi-refresh.path" in contents(
        tk[("nvidia-container-toolkit-base", "1.20.0-1")]
    )
    assert "/lib/systemd/system/nvidia-cdi-refresh.path" not in contents(
        tk[("nvidia-container-toolkit-base", "1.17.3-1")]
    )


def test_no_file_is_shipped_by_two_packages_of_one_version(built: dict[str, list[Path]]) -> None:
    owners: dict[tuple[str, str], str] = {}
    for paths in built.values():
        for p in paths:
            version = field(p, "Version")
            for path, mode in contents(p).items():
                if mode.startswith("d"):
                    continue
                key = (version, path)
                assert key not in owners, f"{path} in {owners.get(key)} and {p.name}"
                owners[key] = p.name


def test_files_are_the_emulator_sources_and_versions(built: dict[str, list[Path]], tmp_path: Path) -> None:
    debs = by_name(built)
    root = tmp_path / "root"
    for key in (
        ("libnvidia-ml1", "570.195.03-1"),
        ("nvidia-smi", "570.195.03-1"),
        ("nvidia-kernel-open-dkms", "570.195.03-1"),
        ("nvidia-persistenced", "570.195.03-1"),
    ):
        subprocess.run(["dpkg-deb", "-x", str(debs[key]), str(root)], check=True)
    assert (root / "usr/lib/nvidia-emu/driver-version").read_text() == "570.195.03\n"
    assert (root / "usr/lib/nvidia-emu/kmod-version").read_text() == "570.195.03\n"
    # nvidia-smi is the static tools' ELF file, as NVIDIA's is one: it runs in containers without Python
    assert (root / "usr/bin/nvidia-smi").read_bytes() == fake_libraries()["tools"].read_bytes()
    assert (root / "usr/bin/nvidia-smi").stat().st_mode & 0o777 == 0o755
    # so are the driver's daemons: nvidia-persistenced (and nv-fabricmanager) run as their units' Type=forking
    assert (root / "usr/bin/nvidia-persistenced").read_bytes() == fake_libraries()["tools"].read_bytes()
    for key in (("libnvidia-container-tools", "1.17.3-1"), ("libnvidia-container1", "1.17.3-1")):
        subprocess.run(["dpkg-deb", "-x", str(debs[key]), str(root)], check=True)
    assert (root / "usr/bin/nvidia-container-cli").read_bytes() == fake_libraries()["tools"].read_bytes()
    assert (root / "usr/lib/nvidia-container-emu/version").read_text() == "1.17.3\n"
    control = tmp_path / "control"
    subprocess.run(
        ["dpkg-deb", "-e", str(debs[("nvidia-persistenced", "570.195.03-1")]), str(control)], check=True
    )
    postinst = (control / "postinst").read_text()
    assert "systemctl enable nvidia-persistenced.service" in postinst
    assert (control / "postinst").stat().st_mode & 0o111
    assert subprocess.run(["sh", "-n", str(control / "postinst")]).returncode == 0


def test_the_toolkit_packages_carry_the_built_binaries_and_nvidias_scripts(
    built: dict[str, list[Path]], tmp_path: Path
) -> None:
    debs = by_name(built)
    root, control = tmp_path / "root", tmp_path / "control"
    control.mkdir()
    for name in ("nvidia-container-toolkit-base", "nvidia-container-toolkit"):
        subprocess.run(["dpkg-deb", "-x", str(debs[(name, "1.20.0-1")]), str(root)], check=True)
        subprocess.run(["dpkg-deb", "-e", str(debs[(name, "1.20.0-1")]), str(control / name)], check=True)
    for command in nvidia_tools.COMMANDS:
        installed = root / "usr/bin" / command
        assert installed.read_text() == f"#!/bin/sh\necho {command} 1.20.0\n"
        assert installed.stat().st_mode & 0o777 == 0o755
    units = root / "lib/systemd/system"
    assert (units / "nvidia-cdi-refresh.service").read_text() == pf.CDI_REFRESH_SERVICE
    assert (units / "nvidia-cdi-refresh.path").read_text() == pf.CDI_REFRESH_PATH
    assert (root / "etc/nvidia-container-toolkit/nvidia-cdi-refresh.env").is_file()
    # nvidia-ctk writes the runtime's config.toml at configure time, as NVIDIA's postinst has it do
    assert not (root / "etc/nvidia-container-runtime/config.toml").exists()
    base_postinst = (control / "nvidia-container-toolkit-base/postinst").read_text()
    assert "nvidia-ctk --quiet config --config-file=/etc/nvidia-container-runtime/config.toml --in-place" in (
        base_postinst
    )
    assert "systemctl enable nvidia-cdi-refresh.path nvidia-cdi-refresh.service" in base_postinst
    assert "ln -s /usr/bin/nvidia-container-runtime-hook /usr/bin/nvidia-container-toolkit" in (
        (control / "nvidia-container-toolkit/postinst").read_text()
    )
    for script in control.glob("*/post*"):
        assert subprocess.run(["sh", "-n", str(script)]).returncode == 0, script
    old = tmp_path / "old"
    subprocess.run(
        ["dpkg-deb", "-e", str(debs[("nvidia-container-toolkit-base", "1.17.3-1")]), str(old)], check=True
    )
    assert "nvidia-cdi-refresh" not in (old / "postinst").read_text()


def test_rebuild_is_skipped_when_nothing_changed(tmp_path: Path) -> None:
    tools = fake_toolkit(tmp_path / "toolkit")
    out = tmp_path / "debs"

    def build(driver: str) -> dict[str, list[Path]]:
        return packages.build_packages(
            out,
            driver_versions=[driver],
            toolkit_versions=["1.20.0"],
            toolkit_binaries=tools,
            driver_libraries=fake_libraries,
        )

    first = build("580.178.04")
    deb = first["cuda"][0]
    stamp = deb.stat().st_mtime_ns
    again = build("580.178.04")
    assert again == first
    assert deb.stat().st_mtime_ns == stamp
    # a rebuilt toolkit binary rebuilds the packages
    ctk = tools("1.20.0")["nvidia-ctk"]
    ctk.write_text(ctk.read_text() + "# rebuilt\n")
    build("580.178.04")
    assert deb.stat().st_mtime_ns != stamp
    other = build("575.57.08")
    assert {p.name for p in out.glob("*.deb")} == {p.name for paths in other.values() for p in paths}
