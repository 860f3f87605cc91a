"""Every public parser of tool output, its documented error, its real inputs, and mutations of those inputs.

Shared by ``tests/unit/test_parser_fuzz.py`` (hypothesis, a small budget in every test run) and
``bench/fuzz_parsers.py`` (100,000 mutants per parser). The inputs are the project's own captures
(tests/fixtures, tests/conformance/data; provenance in tests/fixtures/SOURCES.md); the mutations are what a
dropped SSH session, a flaky disk or a hostile node does to them: truncation anywhere, flipped bytes, lines lost
or repeated, numbers replaced (negative, huge, non-ASCII digits, not numbers), JSON values of the wrong type and
JSON nested without end. A parser may return a record or raise its documented error; anything else is a bug.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from gpuready.nvidia import cdi, containerd_config, dcgm, dcgm_diag, nvbandwidth, smi
from gpuready.nvidia.errors import ParseError

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
BAR = "#" * 80


@dataclass(frozen=True)
class Target:
    """A public parser, the error it documents, and the real outputs it reads."""

    name: str
    parse: Callable[[str], object]
    error: type[ValueError]
    inputs: Callable[[], tuple[str, ...]]
    json: bool = False


def _read(pattern: str) -> tuple[str, ...]:
    return tuple(p.read_text() for p in sorted(FIXTURES.glob(pattern)))


def _capture_sections(command: str) -> tuple[tuple[str, str], ...]:
    """(command line, output) of every section of the nvidia_gpu_exporter captures run as ``command...``."""
    found = []
    for path in sorted((FIXTURES / "captures").glob("*.txt")):
        lines = path.read_text().split("\n")
        for i, line in enumerate(lines):
            if line.startswith("# $ ") and line[4:].strip().startswith(command) and BAR in lines[i:]:
                header_end = lines.index(BAR, i)
                rest = lines[header_end + 1 :]
                body = rest[: rest.index(BAR)] if BAR in rest else rest
                found.append((line[4:].strip(), "\n".join(body).strip("\n") + "\n"))
    return tuple(found)


def _outputs(command: str) -> tuple[str, ...]:
    return tuple(body for _, body in _capture_sections(command))


# --query-gpu: the field list of the capture's own command line, so each capture parses as it is
@cache
def _csv_cases() -> tuple[tuple[list[str], str], ...]:
    cases = []
    for line, body in _capture_sections("nvidia-smi --query-gpu="):
        fields = line.split("--query-gpu=", 1)[1].split()[0].split(",")
        cases.append((fields, body))
    return tuple(cases)


def _csv_inputs() -> tuple[str, ...]:
    # the field list travels in the text's first line so one string is one input
    return tuple(",".join(fields) + "\n" + body for fields, body in _csv_cases())


def _parse_csv(text: str) -> object:
    fields, _, body = text.partition("\n")
    return smi.parse_query_gpu_csv(body, fields.split(","))


def _cdi_inputs() -> tuple[str, ...]:
    """Spec files as ``cdi.spec_command`` prints them, in nvidia-ctk's layout (devices per GPU and MIG device)."""
    listing = (FIXTURES / "nvidia-smi-mig" / "nvidia_gpu_exporter__list_gpus.txt").read_text()
    names = list(cdi.expected_devices(smi.parse_list(listing)))
    devices = "".join(
        f'- name: "{name}"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia{i % 8}\n'
        for i, name in enumerate(names[:12])
    )
    spec = (
        "---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n"
        + devices
        + "containerEdits:\n  deviceNodes:\n  - path: /dev/nvidiactl\n  mounts:\n"
        + "  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05\n"
        + "    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05\n"
    )
    return (f"{cdi.FILE_MARK}{cdi.SPEC_PATH}\n{spec}", f"{cdi.FILE_MARK}{cdi.STATIC_SPEC_PATH}\n{spec}")


def _containerd_inputs() -> tuple[str, ...]:
    return tuple(
        p.read_text() for p in sorted((REPO / "tests" / "conformance" / "data").glob("containerd-*.toml"))
    )


def _query_text() -> tuple[str, ...]:
    return (
        _read("nvidia-smi-text/*valid*") + _read("nvidia-smi-text/*orig_nvsmi8*") + _outputs("nvidia-smi -q")
    )


def _nvlink() -> tuple[str, ...]:
    return _read("nvidia-smi-text/*nvlink*") + _outputs("nvidia-smi nvlink -s")


def _mig(kind: str) -> Callable[[], tuple[str, ...]]:
    return lambda: _read(f"nvidia-smi-mig/*mig-{kind}.txt") + _read(f"nvidia-smi-mig/*mig-{kind}-*.txt")


TARGETS: tuple[Target, ...] = (
    Target("smi.parse_query_xml", smi.parse_query_xml, ParseError, lambda: _read("nvidia-smi-xml/*.xml")),
    Target("smi.parse_query_text", smi.parse_query_text, ParseError, _query_text),
    Target(
        "smi.parse_query_text(filtered)",
        lambda text: smi.parse_query_text(text, filtered=True),
        ParseError,
        _query_text,
    ),
    Target("smi.parse_query_gpu_csv", _parse_csv, ParseError, _csv_inputs),
    Target(
        "smi.parse_list",
        smi.parse_list,
        ParseError,
        lambda: _read("nvidia-smi-mig/*list_gpus.txt") + _outputs("nvidia-smi -L"),
    ),
    Target(
        "smi.parse_list(expected=8)",
        lambda text: smi.parse_list(text, expected=8),
        ParseError,
        lambda: _read("nvidia-smi-mig/*list_gpus.txt"),
    ),
    Target("smi.parse_mig_lgip", smi.parse_mig_lgip, ParseError, _mig("lgip")),
    Target("smi.parse_mig_lgi", smi.parse_mig_lgi, ParseError, _mig("lgi")),
    Target("smi.parse_mig_lci", smi.parse_mig_lci, ParseError, _mig("lci")),
    Target("smi.parse_mig_lcip", smi.parse_mig_lcip, ParseError, _mig("lcip")),
    Target("smi.parse_mig_lgipp", smi.parse_mig_lgipp, ParseError, _mig("lgipp")),
    Target("smi.parse_nvlink_report", smi.parse_nvlink_report, ParseError, _nvlink),
    Target(
        "smi.parse_nvlink_status(expected=8)",
        lambda t: smi.parse_nvlink_status(t, expected=8),
        ParseError,
        _nvlink,
    ),
    Target(
        "dcgm_diag.parse_diag_json",
        dcgm_diag.parse_diag_json,
        dcgm_diag.DiagError,
        lambda: _read("dcgm-diag/*.json"),
        json=True,
    ),
    Target(
        "nvbandwidth.parse_nvbandwidth_json",
        nvbandwidth.parse_nvbandwidth_json,
        nvbandwidth.NvbandwidthError,
        lambda: _read("nvbandwidth/*.json"),
        json=True,
    ),
    Target(
        "dcgm.parse_dcgm_metrics",
        dcgm.parse_dcgm_metrics,
        ParseError,
        lambda: _read("dcgm-exporter/*.txt"),
    ),
    Target("cdi.parse_specs", cdi.parse_specs, cdi.SpecError, _cdi_inputs),
    Target(
        "containerd_config.nvidia_runtime_of",
        containerd_config.nvidia_runtime_of,
        containerd_config.ContainerdConfigError,
        _containerd_inputs,
    ),
    Target(
        "containerd_config.cdi_settings",
        containerd_config.cdi_settings,
        containerd_config.ContainerdConfigError,
        _containerd_inputs,
    ),
)

BY_NAME = {target.name: target for target in TARGETS}


@cache
def inputs_of(name: str) -> tuple[str, ...]:
    found = BY_NAME[name].inputs()
    assert found, f"no inputs for {name}"
    return found


# --------------------------------------------------------------------------------------------------------------
# Mutations
# --------------------------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_REPLACEMENTS = (
    "-1",
    "-0",
    "-999999",
    "0",
    "4294967296",
    "9" * 30,
    "9" * 5000,
    "1e999",
    "nan",
    "inf",
    "1_0",
    "\u0663",  # ARABIC-INDIC DIGIT THREE
    "\uff11\uff12",  # FULLWIDTH DIGIT ONE, TWO
    "\u096b",  # DEVANAGARI DIGIT FIVE
    "0x1F",
    "",
    " ",
    "1.5",
    "+3",
)
_JUNK = (
    "\x00",
    "\ufeff",
    "\r",
    "\t",
    "<",
    "&amp;",
    "&#0;",
    "]]>",
    "{",
    "}",
    "[",
    '"',
    ":",
    "N/A",
    "\ud800",
    "é",
)


def truncate(text: str, rng: random.Random) -> str:
    return text[: rng.randrange(len(text) + 1)]


def truncate_at_line(text: str, rng: random.Random) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[: rng.randrange(len(lines) + 1)])


def flip_bytes(text: str, rng: random.Random) -> str:
    data = bytearray(text.encode("utf-8", "surrogatepass"))
    for _ in range(rng.randint(1, 4)):
        if data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    # the runners decode with errors="replace"; a lone surrogate is kept now and then all the same
    return data.decode("utf-8", "surrogateescape" if rng.random() < 0.2 else "replace")


def delete_line(text: str, rng: random.Random) -> str:
    lines = text.splitlines(keepends=True)
    if lines:
        del lines[rng.randrange(len(lines))]
    return "".join(lines)


def duplicate_lines(text: str, rng: random.Random) -> str:
    lines = text.splitlines(keepends=True)
    if lines:
        start = rng.randrange(len(lines))
        end = min(len(lines), start + rng.choice((1, 1, 2, 5, 40)))
        lines[end:end] = lines[start:end]
    return "".join(lines)


def swap_lines(text: str, rng: random.Random) -> str:
    lines = text.splitlines(keepends=True)
    if len(lines) > 1:
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    return "".join(lines)


def replace_number(text: str, rng: random.Random) -> str:
    matches = list(_NUMBER.finditer(text))
    if not matches:
        return text
    for _ in range(rng.randint(1, 3)):
        match = rng.choice(matches)
        new = rng.choice(_REPLACEMENTS)
        text = text[: match.start()] + new + text[match.end() :]
        matches = list(_NUMBER.finditer(text))
        if not matches:
            break
    return text


def insert_junk(text: str, rng: random.Random) -> str:
    at = rng.randrange(len(text) + 1)
    junk = "".join(rng.choice(_JUNK) for _ in range(rng.randint(1, 6)))
    return text[:at] + junk + text[at:]


def indent_line(text: str, rng: random.Random) -> str:
    lines = text.splitlines(keepends=True)
    if lines:
        i = rng.randrange(len(lines))
        lines[i] = " " * rng.choice((1, 4, 8, 40)) + lines[i]
    return "".join(lines)


def nest_deep(text: str, rng: random.Random) -> str:
    """Bracket or tag nesting thousands deep at a random point."""
    at = rng.randrange(len(text) + 1)
    depth = rng.choice((40, 1000, 5000))
    opener, closer = rng.choice((("[", "]"), ('{"a":', "}"), ("<a>", "</a>")))
    return text[:at] + opener * depth + closer * depth + text[at:]


_TEXT_MUTATIONS: tuple[Callable[[str, random.Random], str], ...] = (
    truncate,
    truncate_at_line,
    flip_bytes,
    delete_line,
    duplicate_lines,
    swap_lines,
    replace_number,
    insert_junk,
    indent_line,
    nest_deep,
)


def _random_value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(10 if depth < 3 else 7)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice((True, False))
    if kind == 2:
        return rng.choice((-1, 0, 7, 2**64, -(2**70)))
    if kind == 3:
        return rng.choice((1.5, -0.0, 1e308))
    if kind == 4:
        return rng.choice(("", "N/A", "Pass", "Fail", "12.5", "-3", "\u0663", "GPU", "x" * 300))
    if kind == 5:
        return []
    if kind == 6:
        return {}
    if kind == 7:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(1, 3))]
    if kind == 8:
        return {
            rng.choice(("status", "name", "results", "tests", "entity_id", "error")): _random_value(
                rng, depth + 1
            )
        }
    value: object = 0
    for _ in range(rng.choice((40, 200))):
        value = [value]
    return value


def _json_nodes(doc: object) -> list[tuple[object, object]]:
    """(container, key) of every value in a decoded document, without recursion."""
    nodes: list[tuple[object, object]] = []
    stack = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                nodes.append((item, key))
                stack.append(value)
        elif isinstance(item, list):
            for index, value in enumerate(item):
                nodes.append((item, index))
                stack.append(value)
    return nodes


def json_retype(text: str, rng: random.Random) -> str:
    """Replace or delete values of the decoded document: wrong types, nulls, deep nesting, missing keys."""
    start = text.find("{")
    try:
        doc, end = json.JSONDecoder().raw_decode(text, max(start, 0))
    except (ValueError, RecursionError):  # already mutated past reading: mutate it as text
        return insert_junk(text, rng)
    for _ in range(rng.randint(1, 3)):
        nodes = _json_nodes(doc)
        if not nodes:
            break
        container, key = rng.choice(nodes)
        if isinstance(container, dict) and rng.random() < 0.25:
            del container[key]
        else:
            container[key] = _random_value(rng)  # type: ignore[index]
    dumped = json.dumps(doc, indent=rng.choice((None, 2)), ensure_ascii=rng.random() < 0.5)
    return text[: max(start, 0)] + dumped + text[end:]


def mutate(text: str, rng: random.Random, is_json: bool = False) -> str:
    """One to three mutations of ``text``; JSON inputs get structural ones half the time."""
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        if is_json and rng.random() < 0.5:
            text = json_retype(text, rng)
        else:
            text = rng.choice(_TEXT_MUTATIONS)(text, rng)
    return text


def outcome(target: Target, text: str) -> tuple[str, BaseException | None]:
    """("parsed" | "documented" | "undocumented", the exception)."""
    try:
        target.parse(text)
    except target.error as exc:
        return "documented", exc
    except Exception as exc:  # every other exception is the finding
        return "undocumented", exc
    return "parsed", None
