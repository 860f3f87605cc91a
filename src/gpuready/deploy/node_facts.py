"""The node deploy's facts in one round trip, reused until something on the host changes.

pyinfra 3 caches no fact: each ``host.get_fact`` is a command on the host, and a converged GPU node used to cost 56
of them per no-change run (``dpkg -l`` alone eight times). Here every fact the node deploy reads is a plain
``FactBase`` as before, but :func:`node_fact` answers it from one batched command (:class:`Batch`) that runs each
fact's own command and parses each section with the fact's own ``process``. The answers stay valid while no
operation has run a command on the host in this run; after a change the next read batches again, so an operation
never decides on a state older than the last change.

Which facts the batch holds is declared by the tasks that read them, not listed here: each task module registers
with :func:`reads` a function that names the facts it (and the operations it calls) reads for the current node,
and :func:`node_fact_specs` gathers every registered declaration. This module imports no task and no operation
(``lint-imports`` holds it to that), so the operations can import :func:`node_fact` without a cycle.

Outside a pyinfra run (the JSON operation tests' fake host has no state) :func:`node_fact` is ``host.get_fact``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from pyinfra import host
from pyinfra.api import FactBase, StringCommand
from pyinfra.context import ctx_host

T = TypeVar("T")
FactSpec = tuple[type[FactBase[Any]], dict[str, Any]]
# A task's declaration: the facts it reads on the current pyinfra host (it may look at the host's node spec).
FactDeclaration = Callable[[], Iterable[FactSpec]]

_MARK = "@@gpuready-fact@@"
_MISSING = "@@gpuready-missing@@"
_CACHE_ATTR = "_gpuready_node_facts"


def _fact_path(cls: type[FactBase[Any]]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _key(cls: type[FactBase[Any]], kwargs: dict[str, Any]) -> str:
    return _fact_path(cls) + json.dumps(kwargs, sort_keys=True, default=str)


def _shell(command: Any) -> str:
    return command.get_raw_value() if isinstance(command, StringCommand) else str(command)


class Batch(FactBase[dict[str, Any]]):
    """
    Returns several facts at once: ``{key: value}``, each value what that fact alone would return.

    ``specs`` is a JSON list of ``[fact path, kwargs]``; the command runs each fact's command in its own subshell
    (stderr discarded, as pyinfra shows none of a fact's) and marks the end of its output with its exit status. A
    fact whose ``requires_command`` is missing, or whose command fails, gets its default.

    .. code:: python

        {'pyinfra.facts.server.Arch{}': 'x86_64', 'gpuready.deploy.facts.host.Swap{}': {'active': [], 'fstab': []}}
    """

    @staticmethod
    def _classes(specs: str) -> list[tuple[type[FactBase[Any]], dict[str, Any]]]:
        import importlib

        out = []
        for path, kwargs in json.loads(specs):
            module, _, name = path.rpartition(".")
            out.append((getattr(importlib.import_module(module), name), kwargs))
        return out

    def command(self, specs: str) -> str:
        self._specs = self._classes(specs)
        parts = []
        for index, (cls, kwargs) in enumerate(self._specs):
            fact = cls()
            command = _shell(fact.command(**kwargs))
            required = (
                fact.requires_command(**kwargs) if callable(fact.requires_command) else fact.requires_command
            )
            if required:
                command = (
                    f"if command -v {required} >/dev/null 2>&1; then {command}; else echo {_MISSING}; fi"
                )
            # the marker starts a line of its own even after output with no final newline; process() drops the
            # empty line this adds after output that had one
            parts.append(f"( {command} ) 2>/dev/null; s=$?; printf '\\n{_MARK} {index} %s\\n' \"$s\"")
        return "\n".join([*parts, "true"])

    def process(self, output: list[str]) -> dict[str, Any]:
        specs = self._specs
        results: dict[str, Any] = {}
        section: list[str] = []
        for line in output:
            if not line.startswith(_MARK):
                section.append(line)
                continue
            _, index, status = line.split()
            if section and section[-1] == "":
                section.pop()
            cls, kwargs = specs[int(index)]
            fact = cls()
            value = fact.default()
            if status == "0" and section and section != [_MISSING]:
                value = fact.process(section)
            results[_key(cls, kwargs)] = value
            section = []
        return results


_DECLARATIONS: dict[str, FactDeclaration] = {}


def reads(declaration: FactDeclaration) -> FactDeclaration:
    """Register a task's declaration of the facts it reads (a decorator, at the task module's top level).

    Keyed by the function's module and name, so a module imported twice (or reloaded) replaces its declaration
    instead of adding a second one.
    """
    _DECLARATIONS[f"{declaration.__module__}.{declaration.__qualname__}"] = declaration
    return declaration


def node_fact_specs() -> list[FactSpec]:
    """Every fact the registered tasks (the node deploy's, ``deploys/gpu_node.py``) read on this host, once each."""
    specs: dict[str, FactSpec] = {}
    for declaration in _DECLARATIONS.values():
        for cls, kwargs in declaration():
            specs.setdefault(_key(cls, kwargs), (cls, kwargs))
    return list(specs.values())


def _changes(target: Any) -> int:
    """How many operations have run commands on the host in this run (0 before the run starts)."""
    return sum(1 for data in target.state.ops[target].values() if data.operation_meta.executed)


def node_fact(cls: type[FactBase[T]], **kwargs: Any) -> T:
    """``host.get_fact(cls, **kwargs)``, answered from one batched round trip while the host is unchanged."""
    target = ctx_host.get()
    state = getattr(target, "state", None)
    if state is None or not hasattr(state, "ops"):
        return host.get_fact(cls, **kwargs)
    key = _key(cls, kwargs)
    changes = _changes(target)
    cached = getattr(target, _CACHE_ATTR, None)
    if cached is None or cached[0] != changes or key not in cached[1]:
        specs = prefetch(cls, kwargs, node_fact_specs())
        values = host.get_fact(Batch, specs=json.dumps([[_fact_path(c), k] for c, k in specs]))
        cached = (changes, values)
        setattr(target, _CACHE_ATTR, cached)
    return cached[1][key]


def prefetch(cls: type[FactBase[Any]], kwargs: dict[str, Any], specs: Iterable[FactSpec]) -> list[FactSpec]:
    """The batch to run: the declared facts, plus the one asked for if it was not declared."""
    out = list(specs)
    if all(_key(c, k) != _key(cls, kwargs) for c, k in out):
        out.append((cls, kwargs))
    return out
