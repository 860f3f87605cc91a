"""`gpuready lab up` names every missing prerequisite and how to get it, before it creates anything."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuready.lab import hosts
from gpuready.lab.state import LabPaths

MISSING = ("go", "debootstrap", "systemd-nspawn", "dpkg-scanpackages")


def test_lab_up_lists_each_missing_piece_and_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda tool, *a, **k: None if tool in MISSING else real_which(tool))
    monkeypatch.setenv("GPUREADY_LAB_CACHE", str(tmp_path / "empty-cache"))
    paths = LabPaths(tmp_path / "lab")
    with pytest.raises(hosts.LabError) as failed:
        hosts.up(paths, nodes=1)
    message = str(failed.value)
    assert message.startswith("the lab cannot start here:")
    assert "Go 1.26 or newer is not on PATH" in message and "https://go.dev/dl/" in message
    assert "debootstrap not found: apt-get install debootstrap" in message
    assert "systemd-nspawn not found: apt-get install systemd-container" in message
    assert "dpkg-scanpackages not found: apt-get install dpkg-dev" in message
    assert not paths.root.exists() and not (tmp_path / "empty-cache").exists()


def test_the_labs_control_plane_version_is_the_inventorys_default_pin() -> None:
    """The lab's control plane runs the Kubernetes version a deploy pins by default (its hosts' kubelet packages
    are built at the control plane's version), so the default lab has no version skew."""
    from gpuready.lab.cluster import cluster

    namespace: dict[str, object] = {}
    repo = Path(__file__).resolve().parents[2]
    exec((repo / "inventory/group_data/all.py").read_text(), namespace)
    assert namespace["kubernetes_version"] == cluster.DEFAULT_VERSION


def test_a_malformed_control_plane_version_is_named(tmp_path: Path) -> None:
    problems = hosts.prerequisite_problems(tmp_path, kubernetes_version="1.34")
    assert "Kubernetes version '1.34' must be a release like 1.36.3" in problems
