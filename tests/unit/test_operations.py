"""Operations in pyinfra's JSON-fixture style: facts in, commands out.

Each ``tests/operations/<module>.<operation>/<case>.json`` holds ``kwargs``, the ``facts`` the fake host answers
(keyed by fact path, then by the fact's arguments as ``key=value``), and the expected ``commands`` (an upload is
``["upload", "<content>", "<dest>"]``), ``noop_description`` or ``exception``; ``noops`` lists what a core operation
reports unchanged beside its commands. This reaches the branches the lab cannot boot (Ubuntu paths, containerd 2.x
configs) without a host.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyinfra.api import FileUploadCommand, StringCommand
from pyinfra.context import ctx_host, ctx_state

CASES = sorted((Path(__file__).resolve().parents[1] / "operations").glob("*/*.json"))


class FakeHost:
    """Just enough of pyinfra's Host for an operation's generator: facts from the fixture, noops recorded."""

    def __init__(self, facts: dict[str, dict[str, Any]]):
        self.facts = facts
        self.noops: list[str] = []
        self.current_op_global_arguments: dict[str, Any] = {}
        self.data = SimpleNamespace()
        self.name = "fake-host"

    def get_fact(self, cls: type, *args: Any, **kwargs: Any) -> Any:
        module = cls.__module__.removeprefix("pyinfra.facts.")
        path = f"{module}.{cls.__name__}"
        if args:  # a few core operations pass the first argument positionally (e.g. File(dest))
            kwargs = {"path": args[0], **kwargs}
        key = ",".join(f"{k}={v}" for k, v in sorted(kwargs.items()))
        known = self.facts.get(path, {})
        if key in known:
            return known[key]
        if not kwargs and path in self.facts and not isinstance(known, dict):
            return known
        if not kwargs and "" in known:
            return known[""]
        default = getattr(cls, "default", None)
        return default() if callable(default) else None

    def noop(self, description: str) -> None:
        self.noops.append(description)

    def get_temp_filename(self, *args: Any, **kwargs: Any) -> str:
        return "_tempfile_"

    def log(self, *args: Any, **kwargs: Any) -> None:
        pass


def _render(command: Any) -> Any:
    if isinstance(command, FileUploadCommand):
        src = command.src
        content = src.getvalue() if hasattr(src, "getvalue") else str(src)
        return ["upload", content, command.dest]
    if isinstance(command, StringCommand):
        return command.get_raw_value()
    return str(command)


def _facts(raw: dict[str, Any]) -> dict[str, Any]:
    """Fact values that are sets in pyinfra (e.g. held packages) are lists in JSON."""
    out = {}
    for path, value in raw.items():
        if path.endswith("HeldPackages"):
            value = {"": set(value)}
        out[path] = value
    return out


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.stem}" for c in CASES])
def test_operation(case: Path):
    spec = json.loads(case.read_text())
    module_name, op_name = case.parent.name.rsplit(".", 1)
    op = getattr(importlib.import_module(f"gpuready.deploy.operations.{module_name}"), op_name)
    host = FakeHost(_facts(spec.get("facts", {})))
    state = SimpleNamespace(config=SimpleNamespace(DIFF=False), cwd=None)
    with ctx_state.use(state), ctx_host.use(host):
        if "exception" in spec:
            with pytest.raises(Exception) as info:
                list(op._inner(*spec.get("args", []), **spec.get("kwargs", {})))
            assert type(info.value).__name__ == spec["exception"]["name"]
            assert spec["exception"]["message"] in str(info.value)
            return
        commands = [_render(c) for c in op._inner(*spec.get("args", []), **spec.get("kwargs", {}))]
    assert commands == spec["commands"]
    if "noop_description" in spec:
        assert host.noops == [spec["noop_description"]]
    elif "noops" in spec:  # a core operation notes what it leaves alone beside what it changes
        assert host.noops == spec["noops"]
    else:
        assert host.noops == [] or commands == []
