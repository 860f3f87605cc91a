"""The test tree cannot shadow the conformance suite: pytester runs ``conformance/`` in-process, where a
top-level test module already imported under the same name (tests/unit has no __init__.py) makes its layer file
fail to import ("import file mismatch"), and every in-process suite run with it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from gpuready.conformance import SUITE_DIR

REPO = Path(__file__).resolve().parents[2]


def test_no_top_level_test_module_shares_a_conformance_file_name():
    layers = {path.name for path in (SUITE_DIR).glob("test_*.py")}
    clashing = [
        str(path.relative_to(REPO))
        for path in (REPO / "tests").rglob("test_*.py")
        if path.name in layers and not (path.parent / "__init__.py").exists()
    ]
    assert clashing == [], f"rename these: they shadow conformance/ layer files of the same name: {clashing}"


def collected(args: list[str], cwd: Path) -> list[str]:
    """The node ids `pytest --collect-only` selects with `args` (run in a fresh process: the conftest under test)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode in (0, 5), proc.stdout + proc.stderr  # 5: everything deselected
    return sorted(line for line in proc.stdout.splitlines() if "::" in line)


def test_a_test_that_reaches_lab_cluster_is_marked_cluster(tmp_path):
    """tests/conftest.py marks `cluster` every test whose fixture closure holds `lab_cluster` (directly or through
    another fixture) and every test in its cluster directories, so `-m "not cluster and not lab"` is the unit run."""
    tests = tmp_path / "tests"
    (tests / "kube").mkdir(parents=True)
    for helper in ("conftest.py", "last_user.py"):  # the conftest and the module it imports
        shutil.copy(REPO / "tests" / helper, tests / helper)
    (tests / "test_sample.py").write_text(
        "import pytest\n\n"
        "@pytest.fixture\n"
        "def fleet(virtual_nodes):\n"
        "    return virtual_nodes\n\n"
        "def test_direct(lab_cluster): pass\n"
        "def test_through_virtual_nodes(virtual_nodes): pass\n"
        "def test_through_a_fixture_of_its_own(fleet): pass\n"
        "def test_through_kubectl(kubectl): pass\n"
        "def test_plain(tmp_path): pass\n"
    )
    (tests / "kube" / "__init__.py").write_text("")
    (tests / "kube" / "test_in_a_cluster_dir.py").write_text("def test_no_fixture(): pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")
    assert collected(["-m", "cluster"], tmp_path) == [
        "tests/kube/test_in_a_cluster_dir.py::test_no_fixture",
        "tests/test_sample.py::test_direct",
        "tests/test_sample.py::test_through_a_fixture_of_its_own",
        "tests/test_sample.py::test_through_kubectl",
        "tests/test_sample.py::test_through_virtual_nodes",
    ]
    assert collected(["-m", "not cluster and not lab"], tmp_path) == ["tests/test_sample.py::test_plain"]


def test_the_unit_run_leaves_out_the_real_cluster_tests():
    """On the real tree: the cluster directories' tests are out of `make unit`, unit tests in."""
    selected = collected(
        [
            "-m",
            "not cluster and not lab",
            "tests/kube/test_maintenance.py",
            "tests/kube/test_kubectl.py",
            "tests/unit/test_test_layout.py",
        ],
        REPO,
    )
    assert selected, "the unit tests were left out too"
    assert [node for node in selected if not node.startswith("tests/unit/")] == []


def test_make_unit_runs_the_unit_selection_and_the_marker_is_registered():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert any(marker.startswith("cluster:") for marker in config["markers"])
    makefile = (REPO / "Makefile").read_text()
    assert '-m "not cluster and not lab"' in makefile.split("\nunit:", 1)[1].split("\n\n", 1)[0]


def test_the_modules_sharing_the_real_l4_lab_run_one_after_another():
    """tests/lab/conftest.py takes the shared real-kubelet lab down as soon as the next test does not use it, so
    the modules that use it must sort together: they, and only they, are named test_lab_real_*. A module of
    another name between them costs a second bring-up and deploy (85 s in CI at bb4552a)."""
    lab = REPO / "tests" / "lab"
    users = sorted(p.name for p in lab.glob("test_lab_*.py") if "real_l4_lab" in p.read_text())
    named = sorted(p.name for p in lab.glob("test_lab_real_*.py"))
    assert users == named, f"use real_l4_lab exactly in the test_lab_real_* modules: {users} vs {named}"
