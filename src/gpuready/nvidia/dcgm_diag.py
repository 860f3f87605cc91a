"""Reader for ``dcgmi diag -r <level> -j`` output (DCGM's active diagnostics), DCGM 2.x/3.x and 4.x.

The diag layer of the conformance suite runs ``dcgmi diag`` on a node and needs, per test and per GPU, the
status and DCGM's own words. Two document shapes exist, both seen in real captures (tests/fixtures/dcgm-diag,
provenance in tests/fixtures/SOURCES.md):

* **DCGM 2.x/3.x** - everything under ``"DCGM GPU Diagnostic"``: ``test_categories`` (``category``:
  Deployment / Integration / Hardware / Stress) -> ``tests`` (``name`` such as "Denylist", "PCIe",
  "GPU Memory") -> ``results``. A result has ``status`` and, for per-GPU tests, ``gpu_ids`` (a GPU index as a
  string; NVVS's own output puts a comma-separated list there for the software tests); ``warnings`` and
  ``info`` are a string in dcgmi's output (DCGM ``dcgmi/tests/TestDiag.cpp``) or a list of strings / of
  ``{"warning": ..., "error_id": ...}`` objects in NVVS's. The version, when present, is
  ``"version"`` beside ``test_categories``.
* **DCGM 4.x** - ``"DCGM Diagnostic"`` -> ``test_categories`` -> ``tests`` (lower-case plugin names:
  "software", "memory", "pcie", "diagnostic", "targeted_stress", ...) -> ``results`` with ``entity_group``
  ("GPU"), ``entity_group_id``, ``entity_id``, ``status``, optional ``warnings`` (objects with ``warning``,
  ``error_id``, ``error_category``, ``error_severity``) and ``info`` (strings); each test also has a
  ``test_summary`` with the test's overall ``status``. ``metadata`` (``version``, ``Driver Version
  Detected``) and ``entity_groups`` (the GPUs in the run) are siblings of ``"DCGM Diagnostic"`` at the top
  (DCGM ``testing/python3/dcgm_diag_schema.json``; captures from DCGM 4.2.3 and 4.5.2).

Decisions:

* One :class:`DiagTest` per test and entity. A 4.x test whose ``test_summary`` is Fail or Warn while no
  entity result is (DCGM 4.2.3 reported a pcie "Fail" with four per-GPU "Pass" lines when a helper process
  died, NVIDIA/DCGM#253) gets one more record with ``gpu=None`` carrying the summary's status and messages,
  so the failure is not lost.
* Statuses are normalised to "Pass", "Fail", "Warn", "Skip" (any case; "Skipped" and "Not Run" become "Skip":
  the test did not judge the GPU). An unknown status raises :class:`DiagError` rather than read as a pass.
* :meth:`DiagReport.failed` returns the **Fail** records only. That is DCGM's own verdict: dcgmi exits 226
  (``DCGM_ST_NVVS_ERROR``, -30 as an 8-bit status) when a test fails and 0 when the worst result is a warning
  (``Diag::GetFailureResult``, exercised in DCGM ``dcgmi/tests/TestDiag.cpp``: "Expected a diagResult with only
  a warning to return success"). Warnings are kept apart in :meth:`DiagReport.warned` so a stricter policy can
  add them.
* The JSON does not record the run level. ``level`` is the caller's when given, otherwise the highest level
  whose tests appear (software only -> 1; memory/pcie -> 2; diagnostic/targeted stress/power, memory bandwidth
  -> 3; memtest/pulse -> 4), which is right for ``-r 1..4`` runs and a guess for runs of named tests.
* Text that is not a dcgmi diag document (nv-hostengine not running: "Error: unable to establish a connection
  to the specified host: localhost" / "Error: Unable to connect to host engine. Host engine connection
  invalid/disconnected."; a diagnostic that could not start; a ``runtime_error`` document) raises
  :class:`DiagError` quoting what was there. A banner line before the JSON ("Successfully ran diagnostic for
  group.") is skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpuready.nvidia.errors import MAX_JSON_DEPTH, ParseError, check_text, json_depth_exceeded

__all__ = ["STATUSES", "DiagError", "DiagReport", "DiagTest", "parse_diag_json"]

STATUSES = ("Pass", "Fail", "Warn", "Skip")

_ROOT_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")

_STATUS_WORDS = {
    "pass": "Pass",
    "passed": "Pass",
    "fail": "Fail",
    "failed": "Fail",
    "warn": "Warn",
    "warning": "Warn",
    "skip": "Skip",
    "skipped": "Skip",
    "not run": "Skip",
    "notrun": "Skip",
    "not_run": "Skip",
}

# Test name (lower case, blanks and underscores folded) -> the lowest run level that includes it.
# DCGM 4 plugin names and DCGM 2.x/3.x display names.
_LEVEL_OF_TEST = {
    "software": 1,
    "memory": 2,
    "gpumemory": 2,
    "pcie": 2,
    "diagnostic": 3,
    "targetedstress": 3,
    "targetedpower": 3,
    "memorybandwidth": 3,
    "smstress": 3,
    "nvbandwidth": 3,
    "memtest": 4,
    "pulse": 4,
    "pulsetest": 4,
}

_CONNECT_HINT = re.compile(r"unable to (establish a connection|connect to host engine)", re.IGNORECASE)


class DiagError(ParseError):
    """The text is not a ``dcgmi diag -j`` result document; the message says what was found instead.

    A :class:`~gpuready.nvidia.errors.ParseError`, hence a ValueError.
    """


@dataclass(frozen=True)
class DiagTest:
    """One test's result on one GPU (``gpu`` None: a result for the whole run, e.g. 3.x software tests).

    ``messages`` holds DCGM's warning texts first, then its info lines, as printed.
    """

    name: str
    category: str | None
    gpu: int | None
    status: str  # "Pass" | "Fail" | "Warn" | "Skip"
    messages: tuple[str, ...]


@dataclass(frozen=True)
class DiagReport:
    """A parsed ``dcgmi diag -j`` document."""

    level: int | None
    dcgm_version: str | None
    tests: tuple[DiagTest, ...]
    driver_version: str | None = None
    gpus: tuple[int, ...] = ()  # GPUs DCGM listed for the run (4.x ``entity_groups``); empty when not given

    def failed(self) -> list[DiagTest]:
        """Results DCGM failed (what makes dcgmi exit non-zero); warnings are in :meth:`warned`."""
        return [t for t in self.tests if t.status == "Fail"]

    def warned(self) -> list[DiagTest]:
        return [t for t in self.tests if t.status == "Warn"]

    def names(self) -> tuple[str, ...]:
        """Test names in document order, each once."""
        return tuple(dict.fromkeys(t.name for t in self.tests))

    def for_gpu(self, gpu: int) -> list[DiagTest]:
        return [t for t in self.tests if t.gpu == gpu]


def _excerpt(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    out = " / ".join(lines)
    return out if len(out) <= limit else out[: limit - 3] + "..."


def _not_a_document(text: str, why: str) -> DiagError:
    if not text.strip():
        return DiagError("dcgmi diag printed nothing (expected its -j JSON document)")
    hint = ""
    if _CONNECT_HINT.search(text):
        hint = " - nv-hostengine is not reachable (is the nvidia-dcgm service running?)"
    return DiagError(f"not dcgmi diag JSON ({why}){hint}; dcgmi printed: {_excerpt(text)!r}")


def _load(text: str) -> dict:
    check_text(text, "dcgmi diag -j", DiagError)
    # The document starts at the first line that opens an object; dcgmi may print a banner first.
    match = re.search(r"^[ \t]*\{", text, re.MULTILINE)
    if match is None:
        raise _not_a_document(text, "no JSON object in the output")
    start = text.index("{", match.start())
    try:
        doc, _end = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as e:
        raise _not_a_document(text, f"the JSON is broken at line {e.lineno}: {e.msg}") from None
    except RecursionError:
        raise _not_a_document(text, f"the JSON nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise _not_a_document(text, f"the JSON holds an unreadable value ({str(e)[:80]})") from None
    if not isinstance(doc, dict):
        raise _not_a_document(text, "the JSON is not an object")
    if json_depth_exceeded(doc):
        raise _not_a_document(text, f"the JSON nests deeper than {MAX_JSON_DEPTH} levels")
    return doc


def _items(value: object, where: str) -> list:
    """A JSON array that may be missing (null or absent: empty); anything else is not dcgmi's document."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise DiagError(f"{where} is {type(value).__name__}, expected a list")
    return value


def _strings(value: object) -> list[str]:
    """Warning/info values: a string, a list of strings, or a list of {"warning"|"error"|...: text} objects."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, dict):
        for key in ("warning", "error", "message", "msg", "info"):
            if isinstance(value.get(key), str):
                return _strings(value[key])
        return []
    if isinstance(value, list):
        out: list[str] = []
        for item in value:
            out += _strings(item)
        return out
    return [str(value)]


def _status(raw: object, where: str) -> str:
    if not isinstance(raw, str):
        raise DiagError(f"{where}: status is missing or not text ({_short(raw)})")
    status = _STATUS_WORDS.get(raw.strip().lower())
    if status is None:
        raise DiagError(
            f"{where}: unknown status {_short(raw)}; known: {', '.join(STATUSES)} (and Skipped, Not Run)"
        )
    return status


def _gpu_of(result: dict, where: str) -> int | None:
    group = result.get("entity_group")
    if "entity_id" in result:
        if group is not None and str(group).upper() != "GPU":
            return None  # a CPU / NvSwitch entity: not a GPU index
        entity = result["entity_id"]
        if isinstance(entity, bool) or not isinstance(entity, int) or entity < 0:
            raise DiagError(f"{where}: entity_id is not a GPU index ({_short(entity)})")
        return entity
    ids = result.get("gpu_ids", result.get("gpu_id"))
    if ids is None:
        return None
    if isinstance(ids, int) and not isinstance(ids, bool) and ids >= 0:
        return ids
    text = ids.strip() if isinstance(ids, str) else ""
    if re.fullmatch(r"[0-9]{1,9}", text):
        return int(text)
    if re.fullmatch(r"[0-9]{1,9}(\s*,\s*[0-9]{1,9})+", text):
        return None  # one result standing for several GPUs (NVVS software tests)
    raise DiagError(f"{where}: cannot read the GPU id {_short(ids)}")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_RANK = {"Skip": 0, "Pass": 1, "Warn": 2, "Fail": 3}


def _tests(diag: dict) -> Iterable[DiagTest]:
    categories = diag.get("test_categories")
    if not isinstance(categories, list):
        raise DiagError("dcgmi diag JSON has no test_categories list")
    for c_index, category in enumerate(categories):
        if category is None:
            continue
        if not isinstance(category, dict):
            raise DiagError(f"test category #{c_index} is not an object")
        cat_name = category.get("category")
        cat_name = cat_name if isinstance(cat_name, str) else None
        for t_index, test in enumerate(_items(category.get("tests"), f"category {cat_name!r} tests")):
            if test is None:  # NVVS leaves null holes in its arrays
                continue
            if not isinstance(test, dict) or not isinstance(test.get("name"), str):
                raise DiagError(f"test #{t_index} of category {cat_name!r} has no name")
            name = test["name"]
            records: list[DiagTest] = []
            for r_index, result in enumerate(_items(test.get("results"), f"test {name!r} results")):
                if result is None:
                    continue
                where = f"test {name!r} result #{r_index}"
                if not isinstance(result, dict):
                    raise DiagError(f"{where} is not an object")
                records.append(
                    DiagTest(
                        name=name,
                        category=cat_name,
                        gpu=_gpu_of(result, where),
                        status=_status(result.get("status"), where),
                        messages=tuple(_strings(result.get("warnings")) + _strings(result.get("info"))),
                    )
                )
            summary = test.get("test_summary")
            if isinstance(summary, dict) and "status" in summary:
                s_status = _status(summary["status"], f"test {name!r} summary")
                worst = max((_RANK[r.status] for r in records), default=-1)
                if not records or (s_status in ("Fail", "Warn") and _RANK[s_status] > worst):
                    records.append(
                        DiagTest(
                            name=name,
                            category=cat_name,
                            gpu=None,
                            status=s_status,
                            messages=tuple(_strings(summary.get("warnings")) + _strings(summary.get("info"))),
                        )
                    )
            yield from records


def _infer_level(tests: Iterable[DiagTest]) -> int | None:
    levels = [_LEVEL_OF_TEST.get(re.sub(r"[\s_]+", "", t.name.lower())) for t in tests]
    known = [lv for lv in levels if lv is not None]
    if known:
        return max(known)
    # DCGM 2.x/3.x level 1 is a list of deployment checks (Denylist, NVML Library, ...).
    return 1 if levels else None


def _text_field(*candidates: object) -> str | None:
    for value in candidates:
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _entity_gpus(doc: dict) -> tuple[int, ...]:
    gpus: list[int] = []
    for group in _items(doc.get("entity_groups"), "entity_groups"):
        if not isinstance(group, dict) or str(group.get("entity_group", "")).upper() != "GPU":
            continue
        for entity in _items(group.get("entities"), "entity_groups entities"):
            gpu = entity.get("entity_id") if isinstance(entity, dict) else None
            if isinstance(gpu, int) and not isinstance(gpu, bool) and gpu >= 0:
                gpus.append(gpu)
    return tuple(gpus)


def parse_diag_json(text: str, level: int | None = None) -> DiagReport:
    """Parse ``dcgmi diag -r <level> -j`` output of DCGM 2.x, 3.x or 4.x into a :class:`DiagReport`.

    ``level`` is the ``-r`` level the caller ran (the document does not record it); without it the level is
    inferred from the tests present. Raises :class:`DiagError` on anything that is not a result document.
    """
    doc = _load(text)
    root_key = next((k for k in _ROOT_KEYS if k in doc), None)
    if root_key is None:
        keys = ", ".join(repr(k) for k in list(doc)[:6]) or "none"
        raise _not_a_document(
            text, f"no 'DCGM Diagnostic' / 'DCGM GPU Diagnostic' object; top-level keys: {keys}"
        )
    diag = doc[root_key]
    if not isinstance(diag, dict):
        raise DiagError(f"{root_key!r} is not an object")
    runtime_error = _text_field(diag.get("runtime_error"), doc.get("runtime_error"))
    if runtime_error and not diag.get("test_categories"):
        raise DiagError(f"dcgmi diag did not run: {runtime_error}")
    tests = tuple(_tests(diag))
    if not tests:
        raise DiagError(f"dcgmi diag JSON ({root_key!r}) holds no test results")
    metadata = doc.get("metadata")
    if not isinstance(metadata, dict):
        metadata = {}
    return DiagReport(
        level=level if level is not None else _infer_level(tests),
        dcgm_version=_text_field(metadata.get("version"), diag.get("version"), doc.get("version")),
        tests=tests,
        driver_version=_text_field(
            metadata.get("Driver Version Detected"),
            diag.get("Driver Version Detected"),
            doc.get("Driver Version Detected"),
        ),
        gpus=_entity_gpus(doc),
    )
