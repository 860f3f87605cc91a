"""Fixtures for running the conformance suite in-process (pytester) against a fake one-node host."""

from __future__ import annotations

import shutil

import pytest
from shims import fake_node

from gpuready.conformance import SUITE_DIR


def pytest_configure(config: pytest.Config) -> None:
    # pytester's fixtures; `pytest_plugins` is only allowed in the root conftest, which is not ours
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")


@pytest.fixture
def suite_dir(pytester: pytest.Pytester):
    """The user-facing suite (conformance/*.py) copied into pytester's directory."""
    target = pytester.path / "conformance"
    target.mkdir()
    for path in (SUITE_DIR).glob("*.py"):
        shutil.copy(path, target / path.name)
    return target


@pytest.fixture
def make_node(tmp_path, monkeypatch):
    """A fake GPU host; call ``.write()`` and ``.activate()`` (env + driver prepared) after changing it."""

    def make(profile: str = "h100-sxm-8"):
        node = fake_node(tmp_path / f"node-{profile}", profile)

        def activate():
            node.write()
            for key, value in node.env().items():
                monkeypatch.setenv(key, value)
            node.prepare_driver()

        def create_mig(layout):
            node.enable_mig(sorted(layout))
            activate()  # after the "reboot": persistence mode again
            node.create_instances(layout)

        node.activate = activate
        node.create_mig = create_mig
        return node

    return make


@pytest.fixture
def run_suite(pytester: pytest.Pytester, suite_dir):
    """Run the suite with --connection local against an inventory; returns (RunResult, report dir)."""

    def run(inventory, *args: str):
        report_dir = pytester.path / "report"
        result = pytester.runpytest_inprocess(
            "conformance",
            "--inventory",
            str(inventory),
            "--connection",
            "local",
            "--report-dir",
            str(report_dir),
            "-p",
            "no:cacheprovider",
            "-rs",
            *args,
        )
        return result, report_dir

    return run
