"""Reader for ``nvbandwidth -j`` (NVIDIA/nvbandwidth): copy bandwidth host<->GPU and GPU<->GPU, in GB/s.

The diag layer measures each node's copy paths and compares them with per-model floors. Three producers print
the same document: the real ``nvbandwidth`` on a node, the lab's emulated one, and ``python -m
gpuready.conformance.cuda.bandwidth`` (CUDA driver API, for machines without the tool). One reader serves all three.

The layout, read from nvbandwidth's ``json_output.cpp`` (v0.5 to v0.8) and a real ``-v -j`` capture
(tests/fixtures/SOURCES.md)::

    {"nvbandwidth": {
        "CUDA Runtime Version": 12070,            # cuDriverGetVersion, despite the name
        "Driver Version": "565.02",               # nvmlSystemGetDriverVersion
        "GPU Device list": ["0: NVIDIA H100 80GB HBM3 (00000000:18:00): (host)", ...],   # v0.8 and later
        "git_version": "...", "version": "v0.8",
        "error": "...",                           # only when the run stopped (a CUDA/NVML call failed)
        "warning": "...",                         # only for a small buffer size
        "testcases": [
            {"name": "host_to_device_memcpy_ce", "status": "Passed",
             "bandwidth_description": "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
             "bandwidth_matrix": [["53.1", "53.4", ...]],      # rows of strings, "N/A" where not measured
             "sum": 427.4,                                     # "min", "max", "average" too with -v
            },
            {"name": "device_to_device_memcpy_read_ce", "status": "Waived"},   # no peer pair (one GPU)
            ...]}}

Statuses are ``Passed``, ``Waived``, ``Error``, ``Running`` (the run died inside the testcase; the top-level
``error`` says why) and ``ERROR`` (the name given to ``-t`` is not a testcase). Host<->device matrices have one
row (the CPU) and a column per CUDA device; device-to-device matrices have a row per device (the one whose
context runs the copy) and a column per peer, ``N/A`` on the diagonal and where peer access is impossible.
Columns are CUDA ordinals: a GPU that fell off the bus is not counted and the ones after it move up, which is
why :attr:`BandwidthReport.devices` keeps the PCI addresses nvbandwidth printed.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from gpuready.nvidia.errors import MAX_JSON_DEPTH, ParseError, check_text, json_depth_exceeded

__all__ = [
    "DEVICE_TO_DEVICE_READ",
    "DEVICE_TO_DEVICE_WRITE",
    "DEVICE_TO_HOST",
    "HOST_TO_DEVICE",
    "NVBANDWIDTH_COMMAND",
    "BandwidthReport",
    "NvbandwidthError",
    "parse_nvbandwidth_json",
]

HOST_TO_DEVICE = "host_to_device_memcpy_ce"
DEVICE_TO_HOST = "device_to_host_memcpy_ce"
DEVICE_TO_DEVICE_READ = "device_to_device_memcpy_read_ce"
DEVICE_TO_DEVICE_WRITE = "device_to_device_memcpy_write_ce"

# What the diag layer runs on a node. ``-t`` is a boost::program_options multitoken option: one ``-t`` followed
# by several names (or indices) selects several testcases; a second ``-t`` is rejected as "cannot be specified
# more than once". Copy-engine (``_ce``) variants: cuMemcpyAsync, no kernel, so the figure does not depend on
# which SM architectures the binary was built for.
NVBANDWIDTH_COMMAND = f"nvbandwidth -j -t {HOST_TO_DEVICE} {DEVICE_TO_HOST} {DEVICE_TO_DEVICE_READ}"

_TOOL = "nvbandwidth -j"
_FIGURE = re.compile(r"-?[0-9]{1,12}(?:\.[0-9]{0,12})?")
_NOT_MEASURED = "N/A"


class NvbandwidthError(ParseError):
    """The text is not a complete ``nvbandwidth -j`` document; the message says what was found instead."""


@dataclass(frozen=True)
class BandwidthReport:
    """Bandwidths in GB/s (10^9 bytes per second), keyed by CUDA device ordinal.

    ``peer`` is keyed ``(row, column)`` of the device-to-device matrix: the read testcase when it is there,
    else the write one. Pairs nvbandwidth could not measure (``N/A``) are absent, so a missing key is a missing
    path. ``errors`` holds the run's top-level error and one line per testcase that did not pass or was not
    found; ``waived`` names testcases nvbandwidth skipped as not applicable (device-to-device with fewer than
    two GPUs or no peer access at all). ``testcases`` lists every testcase in the document, in order;
    ``devices`` is the "GPU Device list" (empty before nvbandwidth v0.8).
    """

    host_to_device: dict[int, float]
    device_to_host: dict[int, float]
    peer: dict[tuple[int, int], float]
    errors: tuple[str, ...]
    driver_version: str | None
    waived: tuple[str, ...] = ()
    testcases: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()


def _describe(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _load(text: str) -> dict:
    """The JSON object in ``text``; lines before and after it (a driver warning on stdout) are ignored.

    The document starts with a ``{`` at the start of a line (jsoncpp and ``json.dumps`` both write it so);
    a ``{`` inside a warning line is not mistaken for it.
    """
    stripped = check_text(text, _TOOL, NvbandwidthError).strip()
    if not stripped:
        raise NvbandwidthError(f"{_TOOL}: empty output")
    starts = [m.start() for m in re.finditer(r"(?m)^\{", stripped)] or [stripped.find("{")]
    if starts[0] < 0:
        first = stripped.splitlines()[0]
        raise NvbandwidthError(f"{_TOOL}: no JSON object; found {_describe(first)} (was -j given?)")
    decoder = json.JSONDecoder()
    failure: json.JSONDecodeError | None = None
    for start in starts:
        try:
            document, _end = decoder.raw_decode(stripped, start)
        except json.JSONDecodeError as exc:
            failure = failure or exc
            continue
        except RecursionError:
            raise NvbandwidthError(f"{_TOOL}: the JSON nests deeper than {MAX_JSON_DEPTH} levels") from None
        except ValueError as exc:  # an integer of more digits than Python converts
            raise NvbandwidthError(f"{_TOOL}: unreadable JSON value ({str(exc)[:80]})") from None
        if json_depth_exceeded(document):
            raise NvbandwidthError(f"{_TOOL}: the JSON nests deeper than {MAX_JSON_DEPTH} levels")
        if not isinstance(document.get("nvbandwidth"), dict):
            raise NvbandwidthError(
                f"{_TOOL}: expected an object with an 'nvbandwidth' object, found {_describe(sorted(document))}"
            )
        return document["nvbandwidth"]
    assert failure is not None
    raise NvbandwidthError(f"{_TOOL}: unreadable JSON ({failure.msg} at character {failure.pos})")


def _cell(value: object, name: str, row: int, column: int) -> float | None:
    if value == _NOT_MEASURED:
        return None
    where = f"{_TOOL}: {name} bandwidth_matrix[{row}][{column}]"
    if not isinstance(value, str):
        raise NvbandwidthError(f"{where} is {_describe(value)}, expected a number in a string or 'N/A'")
    # ASCII digits as nvbandwidth prints them: float() would also take "nan", "1_0", " 12 " or non-ASCII digits
    if not _FIGURE.fullmatch(value):
        raise NvbandwidthError(
            f"{where} is {_describe(value)}, expected a finite bandwidth >= 0 (ASCII digits) or 'N/A'"
        )
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise NvbandwidthError(f"{where} is {_describe(value)}, expected a finite bandwidth >= 0")
    return number


def _matrix(case: Mapping, name: str) -> list[list[float | None]]:
    rows = case.get("bandwidth_matrix")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, list) for r in rows):
        raise NvbandwidthError(
            f"{_TOOL}: {name} passed but its bandwidth_matrix is {_describe(rows)}, expected a list of rows"
        )
    width = len(rows[0])
    if width == 0 or any(len(r) != width for r in rows):
        raise NvbandwidthError(
            f"{_TOOL}: {name} bandwidth_matrix rows have {[len(r) for r in rows]} cells, expected equal, non-zero"
        )
    return [[_cell(v, name, i, j) for j, v in enumerate(r)] for i, r in enumerate(rows)]


def _host_row(passed: Mapping[str, Mapping], name: str) -> dict[int, float]:
    if name not in passed:
        return {}
    matrix = _matrix(passed[name], name)
    if len(matrix) != 1:
        raise NvbandwidthError(f"{_TOOL}: {name} has {len(matrix)} rows, expected 1 (the CPU)")
    return {column: value for column, value in enumerate(matrix[0]) if value is not None}


def _peer_matrix(matrix: list[list[float | None]], name: str) -> dict[tuple[int, int], float]:
    if len(matrix) != len(matrix[0]):
        raise NvbandwidthError(
            f"{_TOOL}: {name} is {len(matrix)}x{len(matrix[0])}, expected a square GPU x GPU matrix"
        )
    return {
        (row, column): value
        for row, cells in enumerate(matrix)
        for column, value in enumerate(cells)
        if value is not None and row != column
    }


def parse_nvbandwidth_json(text: str) -> BandwidthReport:
    """Read ``nvbandwidth -j`` output (any testcases) into a :class:`BandwidthReport`.

    A run that stopped early is still a report: its error is in ``errors`` and the figures measured before
    it are kept. Raises :class:`NvbandwidthError` when the text is not such a document at all (plain-text
    output, a cut-off document, a matrix cell that is not a number or ``N/A``, a host matrix with more than
    one row, a non-square device matrix).
    """
    body = _load(text)
    errors: list[str] = []
    if body.get("error"):
        errors.append(f"nvbandwidth: {str(body['error']).strip()[:500]}")
    raw_cases = body.get("testcases", [])
    if not isinstance(raw_cases, list):
        raise NvbandwidthError(f"{_TOOL}: testcases is {_describe(raw_cases)}, expected a list")
    if not raw_cases and not errors:
        raise NvbandwidthError(f"{_TOOL}: no testcases and no error in keys {_describe(sorted(body))}")
    devices = body.get("GPU Device list", [])
    if not isinstance(devices, list) or not all(isinstance(d, str) for d in devices):
        raise NvbandwidthError(f"{_TOOL}: 'GPU Device list' is {_describe(devices)}, expected strings")
    driver = body.get("Driver Version")
    if driver is not None and not isinstance(driver, str):
        raise NvbandwidthError(f"{_TOOL}: 'Driver Version' is {_describe(driver)}, expected a string")

    names: list[str] = []
    waived: list[str] = []
    passed: dict[str, Mapping] = {}
    for index, case in enumerate(raw_cases):
        if not isinstance(case, dict) or not isinstance(case.get("name"), str):
            raise NvbandwidthError(
                f"{_TOOL}: testcases[{index}] is {_describe(case)}, expected a named object"
            )
        name, status = case["name"], case.get("status")
        names.append(name)
        detail = f": {str(case['error']).strip()[:500]}" if case.get("error") else ""
        if status == "Passed":
            passed.setdefault(name, case)
            if detail:
                errors.append(f"{name}{detail}")
        elif status == "Waived":
            waived.append(name)
        elif status == "ERROR":
            errors.append(f"{name}: not a testcase of this nvbandwidth{detail}")
        else:
            errors.append(f"{name}: {status if isinstance(status, str) else _describe(status)}{detail}")

    peer: dict[tuple[int, int], float] = {}
    for name in (DEVICE_TO_DEVICE_READ, DEVICE_TO_DEVICE_WRITE):
        if name in passed:
            peer = _peer_matrix(_matrix(passed[name], name), name)
            break
    return BandwidthReport(
        host_to_device=_host_row(passed, HOST_TO_DEVICE),
        device_to_host=_host_row(passed, DEVICE_TO_HOST),
        peer=peer,
        errors=tuple(errors),
        driver_version=driver,
        waived=tuple(waived),
        testcases=tuple(names),
        devices=tuple(devices),
    )
