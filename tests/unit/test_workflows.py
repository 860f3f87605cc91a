"""The GitHub workflows run what the READMEs document: every program, subcommand and flag a workflow step runs is
one a user reads about (actionlint, in `make lint`, checks the workflows' own syntax)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from gpuready.conformance import SUITE_DIR

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
DOCS = (REPO / "README.md").read_text() + (SUITE_DIR / "README.md").read_text()


def steps(path: Path) -> list[tuple[str, str]]:
    doc = yaml.safe_load(path.read_text())
    return [
        (step.get("name", step["run"]), " ".join(step["run"].split()))
        for job in doc["jobs"].values()
        for step in job["steps"]
        if "run" in step
    ]


def test_there_is_a_workflow_with_commands():
    assert WORKFLOWS and all(steps(path) for path in WORKFLOWS)


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_every_step_runs_a_documented_command(path):
    for name, command in steps(path):
        words = shlex.split(command)
        program = words[0].removeprefix(".venv/bin/")
        first = next((w for w in words[1:] if not w.startswith("-")), "")
        documented = f"{program} {first}" if program in ("make", "gpuready", "pytest") else program
        assert documented in DOCS, (
            f"{path.name}: step {name!r} runs `{documented}`, which no README documents"
        )
        for flag in (w.split("=", 1)[0] for w in words if re.match(r"^--[a-z]", w)):
            assert flag in DOCS, f"{path.name}: step {name!r} passes {flag}, which no README documents"


def test_the_nightly_conformance_step_checks_this_machine_locally():
    """The runner is the node: the host, gpu and diag layers look at this machine, not over SSH at itself."""
    (command,) = [
        c for _, c in steps(REPO / ".github" / "workflows" / "nightly-gpu.yml") if "gpuready check" in c
    ]
    assert "--connection local" in command


def test_the_kubeconfig_workflow_reaches_the_nodes_only_through_the_cluster():
    """A runner with only a kubeconfig: the expectations discovered from the cluster, the host and gpu layers in
    probe pods, nothing deployed over SSH."""
    commands = [c for _, c in steps(REPO / ".github" / "workflows" / "nightly-kubeconfig.yml")]
    (suite,) = [c for c in commands if "gpuready check" in c]
    assert "--connection pod" in suite and '--kubeconfig "$KUBECONFIG"' in suite
    assert "--discover" in suite and "--inventory" not in suite  # no inventory: expectations from the cluster
    assert not [c for c in commands if "pyinfra" in c or "ssh" in c]
    doc = yaml.safe_load((REPO / ".github" / "workflows" / "nightly-kubeconfig.yml").read_text())
    assert "pull_request" not in doc[True]  # YAML's `on:` key; the secret never reaches a fork's code
