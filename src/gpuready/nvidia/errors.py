"""The one error the NVIDIA tool-output parsers raise, and the limits every parser applies to its input.

A parser that meets output it cannot read fully (truncated by a dropped SSH session, garbled, or from a
driver that renamed a field) must say so instead of returning a record with holes: the conformance suite
would otherwise report "0 ECC errors" for a GPU it never really read. Subclassing ValueError keeps
``except ValueError`` callers working.

The contract of every public parser in :mod:`gpuready.nvidia` (``smi``, ``dcgm``, ``dcgm_diag``,
``nvbandwidth``, ``cdi``, ``containerd_config``): whatever text it is given, it returns a complete record or
raises its documented error, a subclass of ValueError (:class:`ParseError` or the module's own subclass of it,
``cdi.SpecError``, ``containerd_config.ContainerdConfigError``); never TypeError, KeyError, IndexError,
RecursionError or UnicodeError. ``tests/unit/test_parser_fuzz.py`` and ``bench/fuzz_parsers.py`` hold them to it
on mutated real captures.
"""

from __future__ import annotations

# No tool output the suite reads comes near this (the largest, ``nvidia-smi -q`` of 8 GPUs, is ~100 KB);
# a bigger input is not that tool's output, and refusing it bounds a parser's time and memory.
MAX_OUTPUT_CHARS = 16 * 1024 * 1024
# dcgmi diag -j nests 6 levels deep, nvbandwidth -j 4; deeper JSON is not theirs (and Python's recursive
# readers would fail with RecursionError at about 1000).
MAX_JSON_DEPTH = 32


class ParseError(ValueError):
    """Tool output could not be read completely; the message names the tool and what was missing."""


def check_text(text: object, tool: str, error: type[ValueError] = ParseError) -> str:
    """``text`` itself when it is a string a parser may read; ``error`` naming ``tool`` when it is not text or
    longer than :data:`MAX_OUTPUT_CHARS`."""
    if not isinstance(text, str):
        raise error(f"{tool}: expected the output as text, got {type(text).__name__}")
    if len(text) > MAX_OUTPUT_CHARS:
        raise error(
            f"{tool}: {len(text)} characters of output, more than {MAX_OUTPUT_CHARS}; not {tool} output"
        )
    return text


def json_depth_exceeded(value: object, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether decoded JSON nests deeper than ``limit`` arrays/objects (walked without recursion)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
