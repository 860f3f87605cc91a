"""The suite as a user without a checkout gets it: the built wheel alone in a fresh virtualenv, run with
``gpuready check`` from an empty directory, against a fake node (``--connection local``), with a site check
directory of its own. Proves the wheel ships the layer files and their pytest.ini, and that nothing of the
checkout (its pyproject, conftest files, ``inventory/``) is needed."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from shims import REPO, read_verdict

SITE_CHECK = """
def test_node_name_file(node, host):
    assert host.run("printenv GPUREADY_FAKE_NODE").stdout.strip(), f"{node.name}: not the fake node"
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with only the wheel built from this checkout in it; the wheel's dependencies come from this
    run's environment through a path entry appended after the venv's own site-packages (so the wheel's gpuready,
    not this checkout's editable one, is the one imported)."""
    work = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work), str(REPO)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = work.glob("gpuready-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    for shipped in ("test_host.py", "test_gpu.py", "test_diag.py", "pytest.ini", "README.md"):
        assert f"gpuready/conformance/suite/{shipped}" in names, f"the wheel lacks the suite's {shipped}"
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = Path(
        subprocess.run(
            [venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(purelib), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    # the console script, as pip writes it for the venv's interpreter
    script = venv / "bin" / "gpuready"
    script.write_text(
        f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom gpuready.cli import main\nsys.exit(main())\n"
    )
    script.chmod(0o755)
    (purelib / "zz-test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def test_gpuready_check_from_an_empty_directory_runs_the_wheels_suite(installed, make_node, tmp_path):
    node = make_node("l4-1")
    node.activate()
    inventory = node.inventory()
    empty = tmp_path / "empty"
    empty.mkdir()
    site = tmp_path / "site"
    site.mkdir()
    (site / "test_mine.py").write_text(SITE_CHECK)
    reports = tmp_path / "reports"
    proc = subprocess.run(
        [installed / "bin" / "gpuready", "check", "--inventory", str(inventory), "--connection", "local",
         "--report-dir", str(reports), "--site", str(site), "-m", "host or gpu or site"],
        cwd=empty,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    where = subprocess.run(
        [installed / "bin" / "python", "-c", "import gpuready; print(gpuready.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(installed) in where, f"the run imported gpuready from {where}, not the wheel's"
    assert f"rootdir: {Path(where).parent / 'conformance' / 'suite'}" in out, out[:2000]
    verdict = read_verdict(reports)  # validated against the schema the package ships
    layers = verdict["nodes"]["gpu-node-1"]["layers"]
    assert {x: layers[x]["status"] for x in layers} == {"host": "pass", "gpu": "pass", "site": "pass"}
    assert list(layers["site"]["checks"]) == ["test_node_name_file"]
    assert sorted(p.name for p in empty.iterdir()) == [], (
        "gpuready check wrote into the directory it ran from"
    )
