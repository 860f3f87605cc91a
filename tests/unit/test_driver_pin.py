"""The driver's apt pin lists package names: a name it misses is a driver package apt may move on its own.

The pin used to be a regular expression (costly: apt matches it against its whole cache on every run). The name
list must still hold every package the lab's emulated CUDA repository builds and every one the old expression
caught, and stay a file apt parses (one-space continuation lines, a version pin above 1000 so it can downgrade).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuready.deploy.tasks.driver import driver_preferences
from gpuready.lab.packages import DRIVER_VERSIONS, driver_debs
from gpuready.nvidia.driver_packages import driver_package_names

OLD_PIN = re.compile(
    r"^(nvidia-(driver|kernel|smi|persistenced|fabricmanager|modprobe|settings|xconfig|opencl)"
    r"|libnvidia-(ml|cfg|gl|compute|encode|decode|fbc|nscq|ptxjitcompiler|nvvm)|libcuda|libnvidia-egl)"
)


def _branch(driver: str) -> str:
    return driver.split(".")[0]


def _package_field(preferences: str) -> list[str]:
    """The Package field's lines: the first without its ``Package:`` label, then its continuation lines."""
    lines = preferences.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Package:"))
    field = [lines[start].removeprefix("Package:")]
    for line in lines[start + 1 :]:
        if not line[:1].isspace():
            break
        field.append(line)
    return field


@pytest.mark.parametrize("driver", DRIVER_VERSIONS)
def test_every_lab_driver_package_is_pinned(driver):
    built = {
        deb.name
        for deb in driver_debs(
            driver, {"nvml": Path("/dev/null"), "cuda": Path("/dev/null"), "tools": Path("/dev/null")}
        )
    }
    assert built, "the lab builds no driver package"
    assert built <= set(driver_package_names(_branch(driver)))
    assert {name for name in built if OLD_PIN.match(name)} <= set(driver_package_names(_branch(driver)))


@pytest.mark.parametrize("driver", DRIVER_VERSIONS)
@pytest.mark.parametrize("source", ["cuda-repo", "distribution"])
def test_preferences_pin_names_at_one_version(driver, source):
    version = f"{driver}-1"
    text = driver_preferences(version, _branch(driver), source)
    field = _package_field(text)
    assert all(line.startswith(" ") and not line.startswith("  ") for line in field[1:]), field
    names = " ".join(field).split()
    assert not [name for name in names if "/" in name or "^" in name]
    assert sorted(names) == sorted(driver_package_names(_branch(driver), source))
    assert f"\nPin: version {version}\n" in text
    assert "\nPin-Priority: 1001\n" in text


@pytest.mark.parametrize("driver", DRIVER_VERSIONS)
def test_names_the_old_expression_caught_are_listed(driver):
    names = set(driver_package_names(_branch(driver)))
    caught = {name for name in names if OLD_PIN.match(name)}
    # the packages whose exact-version dependencies tie the driver together
    core = {"nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-smi", "libnvidia-ml1", "libcuda1"}
    assert core <= caught <= names
    assert {"nvidia-fabricmanager", "libnvidia-nscq", f"nvidia-fabricmanager-{_branch(driver)}"} <= names


def test_distribution_list_has_no_cuda_drivers_metapackage():
    names = driver_package_names("550", "distribution")
    assert names
    assert not [name for name in names if name.startswith("cuda-drivers")]
    assert "nvidia-driver" in names
