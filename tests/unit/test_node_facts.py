"""The batched fact round trip must answer every fact exactly as that fact alone would.

The node deploy decides every operation on ``node_fact`` values, which come from one ``Batch`` command that runs
each fact's own command and splits the output by markers. A section that bleeds into the next, a lost exit status
or a skipped ``requires_command`` check would make an operation decide on a wrong state, so each fact is run here
both ways on this machine (``sh -c``) and the values compared.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

from pyinfra.api import FactBase, StringCommand
from pyinfra.facts.server import Which

from gpuready.deploy.facts.host import FileDigest, FileText, Swap
from gpuready.deploy.node_facts import Batch, _key, prefetch

MISSING_TOOL = "gpuready-no-such-command"


class NeedsMissingTool(FactBase[list[str]]):
    """Prints something, so a batch that skipped the requires_command check would show it."""

    requires_command = MISSING_TOOL

    @staticmethod
    def default() -> list[str]:
        return ["default"]

    def command(self) -> str:
        return "echo ran-anyway"

    @staticmethod
    def process(output: list[str]) -> list[str]:
        return output


class Fails(FactBase[list[str]]):
    """Prints a line, then fails: pyinfra gives the default, so must the batch."""

    @staticmethod
    def default() -> list[str]:
        return ["default"]

    def command(self) -> str:
        return "echo partial; exit 3"

    @staticmethod
    def process(output: list[str]) -> list[str]:
        return output


def _sh(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60, check=False)


def _alone(cls: type[FactBase[Any]], kwargs: dict[str, Any]) -> Any:
    """What ``host.get_fact(cls, **kwargs)`` gives on this machine (pyinfra's own rules, run locally)."""
    fact = cls()
    required = fact.requires_command(**kwargs) if callable(fact.requires_command) else fact.requires_command
    if required and shutil.which(required) is None:
        return fact.default()
    command = fact.command(**kwargs)
    raw = command.get_raw_value() if isinstance(command, StringCommand) else str(command)
    result = _sh(raw)
    lines = result.stdout.splitlines()
    return fact.process(lines) if result.returncode == 0 and lines else fact.default()


def _batched(specs: list[tuple[type[FactBase[Any]], dict[str, Any]]]) -> dict[str, Any]:
    batch = Batch()
    command = batch.command(specs=json.dumps([[f"{c.__module__}.{c.__qualname__}", k] for c, k in specs]))
    result = _sh(command)
    assert result.returncode == 0, result.stderr
    return batch.process(result.stdout.splitlines())


def _missing_on_this_machine() -> list[tuple[type[FactBase[Any]], dict[str, Any]]]:
    """A real package-manager fact whose tool this machine lacks (rpm, apk or pacman), if any."""
    from pyinfra.facts.apk import ApkPackages
    from pyinfra.facts.pacman import PacmanPackages
    from pyinfra.facts.rpm import RpmPackages

    tools = {"rpm": RpmPackages, "apk": ApkPackages, "pacman": PacmanPackages}
    return [(cls, {}) for tool, cls in tools.items() if shutil.which(tool) is None][:1]


def test_batch_answers_each_fact_as_it_alone_would(tmp_path):
    present = tmp_path / "blacklist-nouveau.conf"
    present.write_text("blacklist nouveau\noptions nouveau modeset=0\n")
    missing = tmp_path / "absent.conf"
    specs: list[tuple[type[FactBase[Any]], dict[str, Any]]] = [
        (Swap, {}),
        (FileDigest, {"path": str(present)}),
        (FileDigest, {"path": str(missing)}),
        (FileText, {"path": str(present)}),
        (FileText, {"path": str(missing)}),
        (Which, {"command": "sh"}),
        (Which, {"command": MISSING_TOOL}),
        (NeedsMissingTool, {}),
        (Fails, {}),
        *_missing_on_this_machine(),
    ]
    values = _batched(specs)
    assert set(values) == {_key(c, k) for c, k in specs}
    for cls, kwargs in specs:
        assert values[_key(cls, kwargs)] == _alone(cls, kwargs), (cls.__name__, kwargs)
    # the comparison above is only as good as these: the facts really saw the files and commands
    assert (
        values[_key(FileDigest, {"path": str(present)})]["sha1"] == "e1d6222cf4cbeaf284bc01440746026616c3fcf9"
    )
    assert values[_key(FileDigest, {"path": str(missing)})] is None
    assert values[_key(FileText, {"path": str(missing)})] is None
    assert values[_key(Which, {"command": "sh"})]
    assert values[_key(NeedsMissingTool, {})] == ["default"]


def test_file_without_final_newline(tmp_path):
    unterminated = tmp_path / "99-kubernetes.conf"
    unterminated.write_text("net.ipv4.ip_forward = 1")
    specs: list[tuple[type[FactBase[Any]], dict[str, Any]]] = [
        (FileText, {"path": str(unterminated)}),
        (Swap, {}),
    ]
    values = _batched(specs)
    assert _alone(*specs[0]) == "net.ipv4.ip_forward = 1\n"
    assert values.get(_key(*specs[0])) == _alone(*specs[0])
    assert values.get(_key(Swap, {})) == _alone(Swap, {})


def test_prefetch_adds_a_spec_only_when_absent():
    declared = [(Swap, {}), (FileText, {"path": "/etc/sysctl.d/99-kubernetes.conf"})]
    assert prefetch(Swap, {}, declared) == declared
    assert prefetch(FileText, {"path": "/etc/sysctl.d/99-kubernetes.conf"}, declared) == declared
    other = prefetch(FileText, {"path": "/etc/apt/sources.list.d/cuda.list"}, declared)
    assert other == [*declared, (FileText, {"path": "/etc/apt/sources.list.d/cuda.list"})]
    assert prefetch(FileDigest, {"path": "/etc/apt/sources.list.d/cuda.list"}, other)[-1][0] is FileDigest
    assert len(declared) == 2  # the declared list itself is left alone
