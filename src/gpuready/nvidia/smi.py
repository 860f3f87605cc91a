"""Readers for nvidia-smi output: ``-q -x``, ``-q``, ``--query-gpu`` CSV, ``-L``, ``mig -l*`` and ``nvlink -s``.

Why hand-written readers rather than NVML: the conformance suite looks at nodes over SSH, where only the
``nvidia-smi`` binary is there, and the lab's emulated ``nvidia-smi`` must be checked against the shapes
real drivers print. Both readers of the full query (XML and text) fill the same :class:`GpuInfo`, so a
check written once works on either, and an emulator that prints either format can be compared with a
real capture field by field.

Conventions every reader here follows:

* values nvidia-smi prints for "no value" (``N/A``, ``[N/A]``, ``[Not Supported]``, ``Requested
  functionality has been deprecated``) become ``None``;
* the note driver 610 and later put after the value of a field it will drop (``610.43.02 [Deprecated;
  will be removed in CUDA 14.0. Use KMD Version instead]``) is not part of the value;
* anything else that does not read as the expected type raises :class:`~gpuready.nvidia.errors.ParseError`
  naming the tool, the GPU and the field, and so does output that stops early: a record is complete or
  it is not returned.

Field names and layouts were read from real captures of drivers 515 to 610 (see tests/fixtures/SOURCES.md).
"""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from gpuready.nvidia.errors import ParseError, check_text

__all__ = [
    "COMPUTE_MODES",
    "DEFAULT_COMPUTE",
    "EXCLUSIVE_PROCESS",
    "LOST_GPU",
    "PROHIBITED_COMPUTE",
    "ComputeInstanceProfileRow",
    "ComputeInstanceRow",
    "CsvValue",
    "GpuInfo",
    "GpuInstancePlacements",
    "GpuInstanceProfileRow",
    "GpuInstanceRow",
    "ListedGpu",
    "ListedMigDevice",
    "MigDevice",
    "NvLink",
    "NvLinkGpu",
    "RemappedRows",
    "SmiReport",
    "parse_list",
    "parse_mig_lci",
    "parse_mig_lcip",
    "parse_mig_lgi",
    "parse_mig_lgip",
    "parse_mig_lgipp",
    "parse_nvlink_report",
    "parse_nvlink_status",
    "parse_query_gpu_csv",
    "parse_query_text",
    "parse_query_xml",
]

# What nvidia-smi prints (stdout or stderr, depending on the view) for a GPU the driver has lost; the GPU is
# then left out of every listing and nvidia-smi exits 15.
LOST_GPU = re.compile(r"Unable to determine the device handle for GPU\s*([0-9A-Fa-f:.]+): (.*)")

# Compute modes by their nvmlComputeMode_t number (nvml.h), named as nvidia-smi prints them ("Compute Mode").
COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
DEFAULT_COMPUTE = COMPUTE_MODES[0]
PROHIBITED_COMPUTE = COMPUTE_MODES[2]
EXCLUSIVE_PROCESS = COMPUTE_MODES[3]

# --------------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MigDevice:
    """One MIG device (a compute instance inside a GPU instance) as the full query lists it."""

    index: int
    gpu_instance_id: int
    compute_instance_id: int
    memory_total_mib: int
    sm_count: int | None


@dataclass(frozen=True)
class RemappedRows:
    """Row-remapping state (Ampere and later); ``pending`` means a GPU reset is needed to apply it."""

    correctable: int | None
    uncorrectable: int | None
    pending: bool | None
    failure: bool | None


@dataclass(frozen=True)
class GpuInfo:
    """One GPU from ``nvidia-smi -q`` or ``-q -x``.

    ``None`` means the driver printed no value (N/A) or the field does not exist on that driver. The
    identity and memory fields (name, uuid, memory_*) are never ``None`` from a full query (the reader
    raises ParseError instead); they can be from a filtered ``-q -d ...`` text query only.
    ECC counts sum every uncorrectable counter the driver reports (DRAM + SRAM on Ampere and later,
    the ``double_bit`` total on older drivers). Clock event reasons use the ``--query-gpu`` names
    (``gpu_idle``, ``sw_power_cap``, ``hw_slowdown`` ...), whichever of "event"/"throttle" the driver says.
    """

    index: int
    pci_bus_id: str
    name: str | None
    uuid: str | None
    serial: str | None
    vbios: str | None
    memory_total_mib: int | None
    memory_used_mib: int | None
    memory_free_mib: int | None
    persistence_mode: bool | None
    mig_mode_current: str | None
    mig_mode_pending: str | None
    mig_devices: tuple[MigDevice, ...]
    ecc_mode_current: str | None
    ecc_mode_pending: str | None
    ecc_uncorrectable_volatile: int | None
    ecc_uncorrectable_aggregate: int | None
    retired_pages_single_bit: int | None
    retired_pages_double_bit: int | None
    retired_pages_pending: bool | None
    remapped_rows: RemappedRows | None
    pcie_link_gen_current: int | None
    pcie_link_gen_max: int | None
    pcie_link_width_current: int | None
    pcie_link_width_max: int | None
    clock_event_reasons_active: tuple[str, ...]
    temperature_c: int | None
    power_draw_w: float | None
    fabric_state: str | None
    fabric_status: str | None
    # "Default", "Exclusive_Process", "Prohibited" (or the deprecated "Exclusive_Thread"), as nvidia-smi names it
    compute_mode: str | None = None


@dataclass(frozen=True)
class SmiReport:
    """The whole of one ``nvidia-smi -q`` / ``-q -x`` run.

    ``attached_gpus`` is the driver's count of GPUs in the machine; ``gpus`` holds fewer only where the
    reader was told how many are left out (``unlisted``: GPUs nvidia-smi could not reach, or a query
    limited with ``-i``). From driver 610 on the text query names the driver version ``KMD
    Version`` and the CUDA version ``CUDA UMD Version`` (the old names are kept, marked deprecated);
    ``driver_version`` and ``cuda_version`` are read from whichever the output has, the new name first.
    """

    driver_version: str
    cuda_version: str | None
    attached_gpus: int
    gpus: tuple[GpuInfo, ...]


@dataclass(frozen=True)
class ListedMigDevice:
    """A ``  MIG 1g.10gb  Device  0: (UUID: MIG-...)`` line of ``nvidia-smi -L``."""

    index: int
    profile: str
    uuid: str


@dataclass(frozen=True)
class ListedGpu:
    """A ``GPU 0: <name> (UUID: GPU-...)`` line of ``nvidia-smi -L`` and the MIG devices under it."""

    index: int
    name: str
    uuid: str
    mig_devices: tuple[ListedMigDevice, ...] = ()


@dataclass(frozen=True)
class GpuInstanceProfileRow:
    """One row of ``nvidia-smi mig -lgip``: what a GPU instance profile costs and how many still fit."""

    gpu: int
    name: str
    profile_id: int
    instances_free: int
    instances_total: int
    memory_gib: float
    p2p: bool | None
    sm_count: int
    ce: int
    enc: int
    dec: int
    ofa: int
    jpg: int


@dataclass(frozen=True)
class GpuInstanceRow:
    """One row of ``nvidia-smi mig -lgi``: a GPU instance that exists."""

    gpu: int
    name: str
    profile_id: int
    instance_id: int
    placement_start: int
    placement_size: int


@dataclass(frozen=True)
class ComputeInstanceRow:
    """One row of ``nvidia-smi mig -lci``: a compute instance inside a GPU instance."""

    gpu: int
    gpu_instance_id: int
    name: str
    profile_id: int
    compute_instance_id: int
    placement_start: int
    placement_size: int


@dataclass(frozen=True)
class ComputeInstanceProfileRow:
    """One row of ``nvidia-smi mig -lcip``; ``is_default`` is the profile marked ``*``."""

    gpu: int
    gpu_instance_id: int
    name: str
    profile_id: int
    is_default: bool
    instances_free: int
    instances_total: int
    sm_count: int
    dec: int
    enc: int
    ofa: int
    ce: int
    jpg: int


@dataclass(frozen=True)
class GpuInstancePlacements:
    """One line of ``nvidia-smi mig -lgipp``: where instances of a profile may start, and their size."""

    gpu: int
    profile_id: int
    starts: tuple[int, ...]
    size: int


@dataclass(frozen=True)
class NvLink:
    """One link of ``nvidia-smi nvlink -s``; ``speed_gbps`` (GB/s) is None for an inactive link."""

    link: int
    speed_gbps: float | None


@dataclass(frozen=True)
class NvLinkGpu:
    """One GPU of ``nvidia-smi nvlink -s`` with its links and any message printed instead of links
    (``Device does not have or support Nvlink``, ``... all links are inActive``, MIG mode notices)."""

    index: int
    name: str
    uuid: str
    links: tuple[NvLink, ...] = ()
    messages: tuple[str, ...] = field(default=())


CsvValue = str | int | float | None

# --------------------------------------------------------------------------------------------------
# Value conversion shared by the readers
# --------------------------------------------------------------------------------------------------

_NOT_AVAILABLE = frozenset(
    {
        "N/A",
        "[N/A]",
        "Not Supported",
        "[Not Supported]",
        "Requested functionality has been deprecated",
        "[Requested functionality has been deprecated]",
    }
)

# Driver 610 and later follow the value of a field they are about to drop with a note:
# "Driver Version : 610.43.02 [Deprecated; will be removed in CUDA 14.0. Use KMD Version instead]".
_DEPRECATION_NOTE = re.compile(r"\s+\[Deprecated\b[^\]]*\]$")
# ASCII digits only: int() and float() also read Arabic-Indic or fullwidth digits, which no NVIDIA tool prints.
_NUMBER_WITH_UNIT = re.compile(r"^(-?[0-9]+(?:\.[0-9]+)?) ?([A-Za-z%/()]*)$")
_DIGITS = re.compile(r"[0-9]{1,18}")


def _value(value: str | None) -> str | None:
    """The stripped value without any deprecation note, or None for a missing field or one of
    nvidia-smi's no-value markers."""
    if value is None:
        return None
    text = _DEPRECATION_NOTE.sub("", value.strip())
    return None if text in _NOT_AVAILABLE else text


def _number(
    value: str | None, unit: str, what: str, kind: type[int] | type[float], signed: bool = False
) -> int | float | None:
    """``"81559 MiB"`` -> 81559; the unit must be the expected one so a renamed field cannot slip by.

    Counts and sizes (every field read here but temperatures) cannot be negative: a ``-1`` is garbled
    output, not a healthy zero, so it is an error unless ``signed``."""
    text = _value(value)
    if text is None:
        return None
    match = _NUMBER_WITH_UNIT.match(text)
    if match is None or match.group(2) != unit:
        raise ParseError(f"{what}: expected a number in {unit or 'no unit'}, got {text!r}")
    if not signed and match.group(1).startswith("-"):
        raise ParseError(f"{what}: negative value {text!r}; a count or size cannot be below 0")
    try:
        return kind(match.group(1))
    except ValueError:
        raise ParseError(f"{what}: expected {kind.__name__}, got {text[:40]!r}") from None


def _int(value: str | None, unit: str, what: str, signed: bool = False) -> int | None:
    result = _number(value, unit, what, int, signed)
    return None if result is None else int(result)


def _float(value: str | None, unit: str, what: str) -> float | None:
    result = _number(value, unit, what, float)
    return None if result is None else float(result)


def _index(token: str, what: str) -> int:
    """A GPU index, link number or instance id: ASCII digits only, and a sane length."""
    if not _DIGITS.fullmatch(token):
        raise ParseError(f"{what}: expected a number, got {token[:40]!r}")
    return int(token)


def _flag(value: str | None, true: str, false: str, what: str) -> bool | None:
    text = _value(value)
    if text is None:
        return None
    if text in (true, false):
        return text == true
    raise ParseError(f"{what}: expected {true!r} or {false!r}, got {text!r}")


def _sum_counts(values: Iterable[tuple[str, str | None]], what: str) -> int | None:
    """Sum counters, None when none of them has a value (ECC off, or a GPU without such counters)."""
    total: int | None = None
    for name, value in values:
        count = _int(value, "", f"{what} {name}")
        if count is not None:
            total = count if total is None else total + count
    return total


def _active_reasons(pairs: Iterable[tuple[str, str | None]]) -> tuple[str, ...]:
    return tuple(name for name, state in pairs if state is not None and state.strip() == "Active")


# --------------------------------------------------------------------------------------------------
# nvidia-smi -q -x
# --------------------------------------------------------------------------------------------------

_XML = "nvidia-smi -q -x"
_XML_ECC_UNCORRECTABLE = (
    "dram_uncorrectable",
    "sram_uncorrectable",
    "sram_uncorrectable_parity",
    "sram_uncorrectable_secded",
)


def parse_query_xml(text: str, *, unlisted: int = 0) -> SmiReport:
    """Read ``nvidia-smi -q -x`` (DTD v11, v12, v13) into an :class:`SmiReport`.

    Raises ParseError on XML that is not well formed (which is what a truncated capture is), on a root
    other than ``<nvidia_smi_log>``, on a ``<gpu>`` without name, UUID, bus id or memory totals, on a
    negative counter, and when the ``<gpu>`` elements are fewer than ``<attached_gpus>`` less ``unlisted``:
    the GPUs the caller knows are left out, those nvidia-smi could not reach (its :data:`LOST_GPU` lines,
    printed outside the XML) or those an ``-i`` selection did not ask for. A report cut short between two
    ``<gpu>`` elements would not be well-formed XML; this catches a report that lists fewer GPUs silently.
    """
    check_text(text, _XML)
    if not text.strip():
        raise ParseError(f"{_XML}: empty output")
    try:
        root = ET.fromstring(text)
    except (ET.ParseError, UnicodeError) as exc:
        raise ParseError(f"{_XML}: not well-formed XML ({exc}); truncated or not XML output") from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"{_XML}: root element is <{root.tag}>, expected <nvidia_smi_log>")
    driver = _value(_xml_text(root, "driver_version"))
    if driver is None:
        raise ParseError(f"{_XML}: no <driver_version> element")
    attached = _int(_xml_text(root, "attached_gpus"), "", f"{_XML}: <attached_gpus>")
    if attached is None:
        raise ParseError(f"{_XML}: no <attached_gpus> element")
    gpus = tuple(_xml_gpu(i, element) for i, element in enumerate(root.findall("gpu")))
    _check_gpu_count(_XML, attached, len(gpus), unlisted)
    return SmiReport(
        driver_version=driver,
        cuda_version=_value(_xml_text(root, "cuda_version")),
        attached_gpus=attached,
        gpus=gpus,
    )


def _check_gpu_count(tool: str, attached: int, found: int, unlisted: int) -> None:
    """Every attached GPU is listed, or is one the caller knows is left out (unreachable, or not selected
    with ``-i``): a query cut short at a GPU boundary must not read as a smaller node."""
    if found > attached:
        raise ParseError(f"{tool}: {found} GPUs listed but attached GPUs says {attached}")
    if attached and not found:
        raise ParseError(f"{tool}: attached GPUs says {attached} but no GPU is listed; truncated output?")
    if found + unlisted < attached:
        left_out = f" and {unlisted} left out (unreachable or not selected)" if unlisted else ""
        raise ParseError(
            f"{tool}: attached GPUs says {attached} but {found} are listed{left_out}: the report of"
            f" {attached - found - unlisted} GPU(s) is missing; truncated output?"
        )


def _xml_text(element: ET.Element, path: str) -> str | None:
    found = element.find(path)
    if found is None:
        return None
    return "".join(found.itertext())


class _XmlFields:
    """Typed access to one element's fields; every error names the ``<gpu>`` and the element path."""

    def __init__(self, element: ET.Element, where: str) -> None:
        self.element = element
        self.where = where

    def text(self, path: str) -> str | None:
        return _value(_xml_text(self.element, path))

    def required(self, path: str) -> str:
        raw = _xml_text(self.element, path)
        if raw is None:
            raise ParseError(f"{self.where} has no <{path}> element")
        value = _value(raw)
        if value is None:
            raise ParseError(f"{self.where} <{path}> has no value ({raw.strip()!r})")
        return value

    def integer(self, path: str, unit: str = "", signed: bool = False) -> int | None:
        return _int(_xml_text(self.element, path), unit, f"{self.where} <{path}>", signed)

    def required_integer(self, path: str, unit: str = "") -> int:
        value = _int(self.required(path), unit, f"{self.where} <{path}>")
        assert value is not None  # required() returned a value
        return value

    def decimal(self, path: str, unit: str) -> float | None:
        return _float(_xml_text(self.element, path), unit, f"{self.where} <{path}>")

    def flag(self, path: str, true: str, false: str) -> bool | None:
        return _flag(_xml_text(self.element, path), true, false, f"{self.where} <{path}>")


def _xml_gpu(index: int, gpu: ET.Element) -> GpuInfo:
    where = f"{_XML}: <gpu> #{index}"
    fields = _XmlFields(gpu, where)
    bus_id = fields.text("pci/pci_bus_id") or _value(gpu.get("id"))
    if bus_id is None:
        raise ParseError(f"{where} has no <pci/pci_bus_id> element")

    reasons = gpu.find("clocks_event_reasons")
    if reasons is None:
        reasons = gpu.find("clocks_throttle_reasons")
    reason_pairs = [] if reasons is None else [(_reason_name(child.tag), child.text) for child in reasons]

    remapped: RemappedRows | None = None
    remapped_element = gpu.find("remapped_rows")
    if remapped_element is not None and len(remapped_element):
        remapped = RemappedRows(
            correctable=fields.integer("remapped_rows/remapped_row_corr"),
            uncorrectable=fields.integer("remapped_rows/remapped_row_unc"),
            pending=fields.flag("remapped_rows/remapped_row_pending", "Yes", "No"),
            failure=fields.flag("remapped_rows/remapped_row_failure", "Yes", "No"),
        )

    # Drivers before 530 print <power_draw>; later ones split it into average and instantaneous, and
    # --query-gpu's power.draw is the average, so that is the one kept.
    power_path = next(
        (
            f"{section}/{reading}"
            for section in ("gpu_power_readings", "power_readings")
            for reading in ("power_draw", "average_power_draw")
            if gpu.find(f"{section}/{reading}") is not None
        ),
        None,
    )

    return GpuInfo(
        index=index,
        pci_bus_id=bus_id,
        name=fields.required("product_name"),
        uuid=fields.required("uuid"),
        serial=fields.text("serial"),
        vbios=fields.text("vbios_version"),
        memory_total_mib=fields.required_integer("fb_memory_usage/total", "MiB"),
        memory_used_mib=fields.required_integer("fb_memory_usage/used", "MiB"),
        memory_free_mib=fields.required_integer("fb_memory_usage/free", "MiB"),
        persistence_mode=fields.flag("persistence_mode", "Enabled", "Disabled"),
        compute_mode=fields.text("compute_mode"),
        mig_mode_current=fields.text("mig_mode/current_mig"),
        mig_mode_pending=fields.text("mig_mode/pending_mig"),
        mig_devices=tuple(
            _xml_mig_device(_XmlFields(element, f"{where} <mig_device>"))
            for element in gpu.findall("mig_devices/mig_device")
        ),
        ecc_mode_current=fields.text("ecc_mode/current_ecc"),
        ecc_mode_pending=fields.text("ecc_mode/pending_ecc"),
        ecc_uncorrectable_volatile=_xml_ecc_uncorrectable(gpu, "volatile", where),
        ecc_uncorrectable_aggregate=_xml_ecc_uncorrectable(gpu, "aggregate", where),
        retired_pages_single_bit=fields.integer("retired_pages/multiple_single_bit_retirement/retired_count"),
        retired_pages_double_bit=fields.integer("retired_pages/double_bit_retirement/retired_count"),
        retired_pages_pending=_any_yes(
            [
                fields.flag("retired_pages/pending_blacklist", "Yes", "No"),
                fields.flag("retired_pages/pending_retirement", "Yes", "No"),
            ]
        ),
        remapped_rows=remapped,
        pcie_link_gen_current=fields.integer("pci/pci_gpu_link_info/pcie_gen/current_link_gen"),
        pcie_link_gen_max=fields.integer("pci/pci_gpu_link_info/pcie_gen/max_link_gen"),
        pcie_link_width_current=fields.integer("pci/pci_gpu_link_info/link_widths/current_link_width", "x"),
        pcie_link_width_max=fields.integer("pci/pci_gpu_link_info/link_widths/max_link_width", "x"),
        clock_event_reasons_active=_active_reasons(reason_pairs),
        temperature_c=fields.integer("temperature/gpu_temp", "C", signed=True),
        power_draw_w=None if power_path is None else fields.decimal(power_path, "W"),
        fabric_state=fields.text("fabric/state"),
        fabric_status=fields.text("fabric/status"),
    )


def _reason_name(tag: str) -> str:
    for prefix in ("clocks_event_reason_", "clocks_throttle_reason_"):
        if tag.startswith(prefix):
            return tag[len(prefix) :]
    return tag


def _any_yes(flags: Sequence[bool | None]) -> bool | None:
    known = [flag for flag in flags if flag is not None]
    return any(known) if known else None


def _xml_ecc_uncorrectable(gpu: ET.Element, scope: str, where: str) -> int | None:
    counters = gpu.find(f"ecc_errors/{scope}")
    if counters is None:
        return None
    pairs = [(child.tag, child.text) for child in counters if child.tag in _XML_ECC_UNCORRECTABLE]
    double_bit = counters.find("double_bit/total")
    if double_bit is not None:
        pairs.append(("double_bit/total", double_bit.text))
    return _sum_counts(pairs, f"{where} <ecc_errors/{scope}>")


def _xml_mig_device(fields: _XmlFields) -> MigDevice:
    return MigDevice(
        index=fields.required_integer("index"),
        gpu_instance_id=fields.required_integer("gpu_instance_id"),
        compute_instance_id=fields.required_integer("compute_instance_id"),
        memory_total_mib=fields.required_integer("fb_memory_usage/total", "MiB"),
        sm_count=fields.integer("device_attributes/shared/multiprocessor_count"),
    )


# --------------------------------------------------------------------------------------------------
# nvidia-smi -q (text)
# --------------------------------------------------------------------------------------------------

_TEXT = "nvidia-smi -q"
_BANNER = "==============NVSMI LOG=============="
# nvidia-smi pads each key to a fixed width and then prints ": value"; a key longer than that width
# touches its colon ("Memory Max Operating T.Limit Temp Specification: 0 C", driver 610). A colon inside
# a section title has no space after it ("GPU 00000000:83:00.0").
_KEY_VALUE = re.compile(r"^(\S.*?)\s*:(\s.*)?$")
_TEXT_ECC_UNCORRECTABLE = (
    "DRAM Uncorrectable",
    "SRAM Uncorrectable",
    "SRAM Uncorrectable Parity",
    "SRAM Uncorrectable SEC-DED",
)
_TEXT_REASONS = {
    "Idle": "gpu_idle",
    "Applications Clocks Setting": "applications_clocks_setting",
    "SW Power Cap": "sw_power_cap",
    "HW Slowdown": "hw_slowdown",
    "HW Thermal Slowdown": "hw_thermal_slowdown",
    "HW Power Brake Slowdown": "hw_power_brake_slowdown",
    "Sync Boost": "sync_boost",
    "SW Thermal Slowdown": "sw_thermal_slowdown",
    "Display Clock Setting": "display_clocks_setting",
}


@dataclass
class _Node:
    """A line of indented ``key : value`` text and the lines indented under it."""

    key: str
    value: str | None
    line: int
    children: list[_Node] = field(default_factory=list)

    def find(self, *path: str) -> _Node | None:
        """The first node down ``path``; repeated keys (``MIG Device``) need :attr:`children` instead."""
        node = self
        for key in path:
            found = next((child for child in node.children if child.key == key), None)
            if found is None:
                return None
            node = found
        return node

    def get(self, *path: str) -> str | None:
        node = self.find(*path)
        return None if node is None else node.value

    def walk(self) -> Iterator[_Node]:
        for child in self.children:
            yield child
            yield from child.walk()

    def key_paths(self, skip: frozenset[str], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
        paths: set[tuple[str, ...]] = set()
        for child in self.children:
            if child.key in skip:
                continue
            path = (*prefix, child.key)
            paths.add(path)
            paths |= child.key_paths(skip, path)
        return paths


# nvidia-smi -q nests fields 5 levels deep (PCI > GPU Link Info > PCIe Generation > Max under a GPU).
_MAX_TEXT_DEPTH = 16


def _indented_tree(lines: Sequence[tuple[int, str]], tool: str) -> _Node:
    root = _Node(key="", value=None, line=0)
    stack: list[tuple[int, _Node]] = [(-1, root)]
    for number, raw in lines:
        line = raw.expandtabs(8).rstrip()
        if not line:
            continue
        indent = len(line) - len(line.lstrip(" "))
        match = _KEY_VALUE.match(line[indent:])
        if match:
            node = _Node(key=match.group(1).strip(), value=(match.group(2) or "").strip(), line=number)
        else:
            node = _Node(key=line[indent:].strip(), value=None, line=number)
        while stack[-1][0] >= indent:
            stack.pop()
        if len(stack) > _MAX_TEXT_DEPTH:
            raise ParseError(
                f"{tool}: line {number} is nested deeper than {_MAX_TEXT_DEPTH} levels; garbled output"
            )
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    for node in root.walk():
        if node.value is None and not node.children:
            raise ParseError(
                f"{tool}: line {node.line} {node.key!r} has neither a value nor fields under it;"
                " truncated or garbled output"
            )
    return root


def query_text_fields(text: str) -> dict[str, str]:
    """``nvidia-smi -q`` text as {"Section/Key": value}: the report's own lines and its first GPU's (that GPU's
    header left out of the paths), read as :func:`parse_query_text` reads them, to compare two reports line by
    line (``gpuready.lab.fidelity``). A key printed twice keeps its first value."""
    lines = text.splitlines()
    banner = next((i for i, line in enumerate(lines) if line.strip() == _BANNER), -1)
    root = _indented_tree([(i + 1, line) for i, line in enumerate(lines) if i > banner], _TEXT)
    fields: dict[str, str] = {}

    def visit(node: _Node, prefix: str) -> None:
        for child in node.children:
            path = f"{prefix}{child.key}"
            if child.value is not None:
                fields.setdefault(path, child.value)
            visit(child, f"{path}/")

    first_gpu = next((n for n in root.children if n.value is None and n.key.startswith("GPU ")), None)
    for child in root.children:
        if child.value is not None:
            fields.setdefault(child.key, child.value)
    if first_gpu is not None:
        visit(first_gpu, "")
    return fields


def parse_query_text(text: str, *, filtered: bool = False, unlisted: int = 0) -> SmiReport:
    """Read ``nvidia-smi -q`` text into the same :class:`SmiReport` as :func:`parse_query_xml`.

    ``filtered=True`` is for ``nvidia-smi -q -d PAGE_RETIREMENT,...``, whose GPU blocks hold only the
    chosen sections: fields outside them are None instead of an error. Then, as nvidia-smi prints the same
    sections for every GPU, a last GPU block with fewer fields than the first is taken as truncation.
    A full query must, for every GPU, show name, UUID, memory and the closing ``Processes`` field.
    There must be a GPU block for each of ``Attached GPUs`` but the unreachable ones (a :data:`LOST_GPU` line
    in ``text`` each) and ``unlisted`` more the caller knows are left out (unreachable GPUs whose lines went
    to stderr, GPUs an ``-i`` selection did not ask for): output cut short between two GPU blocks is an
    error, not a smaller node.
    """
    check_text(text, _TEXT)
    if not text.strip():
        raise ParseError(f"{_TEXT}: empty output")
    lines = text.splitlines()
    banner = next((i for i, line in enumerate(lines) if line.strip()), 0)
    if lines[banner].strip() != _BANNER:
        raise ParseError(f"{_TEXT}: output does not start with the {_BANNER!r} banner")
    root = _indented_tree([(i + 1, line) for i, line in enumerate(lines) if i > banner], _TEXT)
    driver = _value(root.get("KMD Version")) or _value(root.get("Driver Version"))
    if driver is None:
        raise ParseError(
            f"{_TEXT}: no 'Driver Version' line (nor 'KMD Version', its name from driver 610 on)"
        )
    attached = _int(root.get("Attached GPUs"), "", f"{_TEXT}: 'Attached GPUs'")
    if attached is None:
        raise ParseError(f"{_TEXT}: no 'Attached GPUs' line")
    blocks = [node for node in root.children if node.value is None and node.key.startswith("GPU ")]
    unlisted += sum(1 for line in lines if LOST_GPU.match(line.strip()))
    _check_gpu_count(_TEXT, attached, len(blocks), unlisted)
    if filtered and len(blocks) > 1:
        skip = frozenset({"MIG Device", "Processes"})
        missing = blocks[0].key_paths(skip) - blocks[-1].key_paths(skip)
        if missing:
            first = " > ".join(sorted(missing)[0])
            raise ParseError(
                f"{_TEXT}: {blocks[-1].key} lacks {first!r} that {blocks[0].key} has; truncated output?"
            )
    return SmiReport(
        driver_version=driver,
        cuda_version=_value(root.get("CUDA UMD Version")) or _value(root.get("CUDA Version")),
        attached_gpus=attached,
        gpus=tuple(_text_gpu(i, block, filtered) for i, block in enumerate(blocks)),
    )


class _TextFields:
    """Typed access to the fields under one text node; every error names the GPU and the field path."""

    def __init__(self, node: _Node, where: str, filtered: bool = False) -> None:
        self.node = node
        self.where = where
        self.filtered = filtered

    def _what(self, path: Sequence[str]) -> str:
        return f"{self.where} {' > '.join(path)!r}"

    def text(self, *path: str) -> str | None:
        return _value(self.node.get(*path))

    def required(self, *path: str) -> str | None:
        """A field a full query always prints; a filtered one may leave it out (then None)."""
        raw = self.node.get(*path)
        if raw is None and not self.filtered:
            raise ParseError(
                f"{self.where} has no {' > '.join(path)!r} line"
                " (output of a filtered -q -d query? pass filtered=True)"
            )
        return raw

    def integer(self, unit: str, *path: str, signed: bool = False) -> int | None:
        return _int(self.node.get(*path), unit, self._what(path), signed)

    def required_integer(self, unit: str, *path: str) -> int | None:
        return _int(self.required(*path), unit, self._what(path))

    def decimal(self, unit: str, *path: str) -> float | None:
        return _float(self.node.get(*path), unit, self._what(path))

    def flag(self, true: str, false: str, *path: str) -> bool | None:
        return _flag(self.node.get(*path), true, false, self._what(path))


def _text_gpu(index: int, block: _Node, filtered: bool) -> GpuInfo:
    where = f"{_TEXT}: {block.key} (#{index})"
    fields = _TextFields(block, where, filtered)

    reasons = block.find("Clocks Event Reasons") or block.find("Clocks Throttle Reasons")
    reason_pairs = (
        []
        if reasons is None
        else [(_TEXT_REASONS.get(n.key, n.key.lower().replace(" ", "_")), n.value) for n in reasons.walk()]
    )

    remapped: RemappedRows | None = None
    remapped_node = block.find("Remapped Rows")
    if remapped_node is not None and remapped_node.children:
        remapped = RemappedRows(
            correctable=fields.integer("", "Remapped Rows", "Correctable Error"),
            uncorrectable=fields.integer("", "Remapped Rows", "Uncorrectable Error"),
            pending=fields.flag("Yes", "No", "Remapped Rows", "Pending"),
            failure=fields.flag("Yes", "No", "Remapped Rows", "Remapping Failure Occurred"),
        )

    # "Power Draw" before driver 530, then "Average Power Draw" (what --query-gpu's power.draw reports).
    power_path = next(
        (
            (section, reading)
            for section in ("GPU Power Readings", "Power Readings")
            for reading in ("Power Draw", "Average Power Draw")
            if block.find(section, reading) is not None
        ),
        None,
    )

    pending_keys = ("Pending Page Blacklist", "Pending Page Retirement", "Pending")
    gpu = GpuInfo(
        index=index,
        pci_bus_id=fields.text("PCI", "Bus Id") or block.key.removeprefix("GPU ").strip(),
        name=_value(fields.required("Product Name")),
        uuid=_value(fields.required("GPU UUID")),
        serial=fields.text("Serial Number"),
        vbios=fields.text("VBIOS Version"),
        memory_total_mib=fields.required_integer("MiB", "FB Memory Usage", "Total"),
        memory_used_mib=fields.required_integer("MiB", "FB Memory Usage", "Used"),
        memory_free_mib=fields.required_integer("MiB", "FB Memory Usage", "Free"),
        persistence_mode=fields.flag("Enabled", "Disabled", "Persistence Mode"),
        compute_mode=fields.text("Compute Mode"),
        mig_mode_current=fields.text("MIG Mode", "Current"),
        mig_mode_pending=fields.text("MIG Mode", "Pending"),
        mig_devices=tuple(
            _text_mig_device(_TextFields(node, f"{where} MIG Device (line {node.line})"))
            for node in block.children
            if node.key == "MIG Device"
        ),
        ecc_mode_current=fields.text("ECC Mode", "Current"),
        ecc_mode_pending=fields.text("ECC Mode", "Pending"),
        ecc_uncorrectable_volatile=_text_ecc_uncorrectable(block, "Volatile", where),
        ecc_uncorrectable_aggregate=_text_ecc_uncorrectable(block, "Aggregate", where),
        retired_pages_single_bit=fields.integer("", "Retired Pages", "Single Bit ECC"),
        retired_pages_double_bit=fields.integer("", "Retired Pages", "Double Bit ECC"),
        retired_pages_pending=_any_yes(
            [fields.flag("Yes", "No", "Retired Pages", key) for key in pending_keys]
        ),
        remapped_rows=remapped,
        pcie_link_gen_current=fields.integer("", "PCI", "GPU Link Info", "PCIe Generation", "Current"),
        pcie_link_gen_max=fields.integer("", "PCI", "GPU Link Info", "PCIe Generation", "Max"),
        pcie_link_width_current=fields.integer("x", "PCI", "GPU Link Info", "Link Width", "Current"),
        pcie_link_width_max=fields.integer("x", "PCI", "GPU Link Info", "Link Width", "Max"),
        clock_event_reasons_active=_active_reasons(reason_pairs),
        temperature_c=fields.integer("C", "Temperature", "GPU Current Temp", signed=True),
        power_draw_w=None if power_path is None else fields.decimal("W", *power_path),
        fabric_state=fields.text("Fabric", "State"),
        fabric_status=fields.text("Fabric", "Status"),
    )
    if not filtered and block.find("Processes") is None:
        raise ParseError(
            f"{where} has no 'Processes' field, the last one nvidia-smi prints; truncated output"
        )
    return gpu


def _text_ecc_uncorrectable(block: _Node, scope: str, where: str) -> int | None:
    counters = block.find("ECC Errors", scope)
    if counters is None:
        return None
    pairs = [(n.key, n.value) for n in counters.children if n.key in _TEXT_ECC_UNCORRECTABLE]
    double_bit = counters.find("Double Bit", "Total")
    if double_bit is not None:
        pairs.append(("Double Bit > Total", double_bit.value))
    return _sum_counts(pairs, f"{where} 'ECC Errors > {scope}'")


def _text_mig_device(fields: _TextFields) -> MigDevice:
    def required(unit: str, *paths: tuple[str, ...]) -> int:
        for path in paths:
            value = fields.integer(unit, *path)
            if value is not None:
                return value
        raise ParseError(f"{fields.where} has no {' > '.join(paths[0])!r} value")

    return MigDevice(
        index=required("", ("Index",)),
        gpu_instance_id=required("", ("GPU Instance ID",)),
        compute_instance_id=required("", ("Compute Instance ID",)),
        memory_total_mib=required("MiB", ("Shared FB Memory Usage", "Total"), ("FB Memory Usage", "Total")),
        sm_count=fields.integer("", "Device Attributes", "Shared", "Multiprocessor count"),
    )


# --------------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu=... --format=csv
# --------------------------------------------------------------------------------------------------

_CSV = "nvidia-smi --query-gpu"
# From `nvidia-smi --help-query-gpu`: the second name is accepted on the command line, the header prints
# the first.
_CSV_ALIASES = {
    "gpu_name": "name",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "inforom.image": "inforom.img",
    "inforom.power": "inforom.pwr",
    "gpu_operation_mode.current": "gom.current",
    "gpu_operation_mode.pending": "gom.pending",
    "retired_pages.sbe": "retired_pages.single_bit_ecc.count",
    "retired_pages.dbe": "retired_pages.double_bit.count",
    "remapped_rows.sbe": "remapped_rows.correctable",
    "remapped_rows.dbe": "remapped_rows.uncorrectable",
    "gpu.power.draw.average": "power.draw.average",
    "gpu.power.draw.instant": "power.draw.instant",
    "gpu.power.requested_limit": "power.limit",
    "gpu.power.current_limit": "enforced.power.limit",
    "gpu.power.default_limit": "power.default_limit",
    "gpu.power.min_limit": "power.min_limit",
    "gpu.power.max_limit": "power.max_limit",
    "module.power.requested_limit": "module.power.limit",
    "module.power.current_limit": "module.enforced.power.limit",
    "clocks.gr": "clocks.current.graphics",
    "clocks.sm": "clocks.current.sm",
    "clocks.mem": "clocks.current.memory",
    "clocks.video": "clocks.current.video",
    "clocks.applications.gr": "clocks.applications.graphics",
    "clocks.applications.mem": "clocks.applications.memory",
    "clocks.default_applications.gr": "clocks.default_applications.graphics",
    "clocks.default_applications.mem": "clocks.default_applications.memory",
    "clocks.max.gr": "clocks.max.graphics",
    "clocks.max.mem": "clocks.max.memory",
}
# Values that look like numbers but are identifiers or versions ("0000000000000", "595.80", "9.0").
_CSV_TEXT_FIELDS = frozenset(
    {
        "timestamp",
        "driver_version",
        "kmd_version",
        "vbios_version",
        "name",
        "serial",
        "uuid",
        "compute_cap",
        "hostname",
        "fabric.clusterUuid",
    }
)
_CSV_TEXT_PREFIXES = ("pci.", "inforom.", "platform.")
_CSV_UNITS = ("MiB", "%", "W", "MHz", "us", "ms")
_HEADER_CELL = re.compile(r"^([A-Za-z_][\w.]*)(?: \[([^\]]+)\])?$")
_INT = re.compile(r"^-?[0-9]+$")
_FLOAT = re.compile(r"^-?[0-9]+\.[0-9]+$")
# Error and retirement counters: a negative one is garbled output, never a healthy 0.
_CSV_COUNTERS = ("ecc.errors.", "retired_pages.", "remapped_rows.")


def _csv_canonical(name: str) -> str:
    if name.startswith("clocks_throttle_reasons"):
        name = "clocks_event_reasons" + name[len("clocks_throttle_reasons") :]
    return _CSV_ALIASES.get(name, name)


def parse_query_gpu_csv(text: str, fields: Sequence[str]) -> list[dict[str, CsvValue]]:
    """Read ``--query-gpu=<fields> --format=csv[,noheader][,nounits]``: one dict per GPU, keyed by ``fields``.

    Values are split on ``", "`` as nvidia-smi writes them (it does not quote). A header line, when there
    is one, must name ``fields`` in order (aliases such as ``gpu_name`` for ``name`` are understood), so
    a reply to some other query is never read as this one. Units are stripped; no-value markers (``[N/A]``, ``[Not Supported]``,
    deprecated) become None; numbers become int or float, except identifiers and versions (serial,
    driver_version, pci.*, inforom.*, compute_cap ...), which stay strings. Other bracketed values such
    as ``[Unknown Error]`` or ``[GPU is lost]`` are kept as strings so that a check can report them.
    """
    check_text(text, _CSV)
    if not fields:
        raise ParseError(f"{_CSV}: no fields requested")
    wanted = [_csv_canonical(name) for name in fields]
    lines = [(i + 1, line.rstrip("\r\n")) for i, line in enumerate(text.splitlines())]
    lines = [(number, line) for number, line in lines if line.strip()]
    if not lines:
        raise ParseError(f"{_CSV}: empty output")
    units: list[str | None] = [None] * len(fields)
    first_cells = lines[0][1].split(", ")
    header = [_HEADER_CELL.match(cell.strip()) for cell in first_cells]
    header_names = [_csv_canonical(m.group(1)) if m else None for m in header]
    if header_names == wanted:
        units = [m.group(2) if m else None for m in header]
        lines = lines[1:]
    elif set(header_names) & set(wanted) - {None}:
        raise ParseError(
            f"{_CSV}: header names {', '.join(str(n) for n in header_names)} but the query asked for"
            f" {', '.join(wanted)} in that order"
        )
    rows: list[dict[str, CsvValue]] = []
    for number, line in lines:
        cells = line.split(", ")
        if len(cells) != len(fields):
            raise ParseError(
                f"{_CSV}: line {number} has {len(cells)} values for {len(fields)} fields; truncated or"
                f" garbled: {line[:80]!r}"
            )
        row = {
            name: _csv_value(canonical, cell, unit)
            for name, canonical, cell, unit in zip(fields, wanted, cells, units, strict=True)
        }
        for name, canonical in zip(fields, wanted, strict=True):
            value = row[name]
            if canonical.startswith(_CSV_COUNTERS) and isinstance(value, int | float) and value < 0:
                raise ParseError(f"{_CSV}: line {number} has {name} = {value}; a counter cannot be below 0")
        rows.append(row)
    if not rows:
        raise ParseError(f"{_CSV}: a header but no GPU lines")
    return rows


def _csv_value(canonical: str, cell: str, unit: str | None) -> CsvValue:
    value = cell.strip()
    if not value or value in _NOT_AVAILABLE:
        return None
    if canonical in _CSV_TEXT_FIELDS or canonical.startswith(_CSV_TEXT_PREFIXES):
        return value
    for suffix in (unit,) if unit else _CSV_UNITS:
        if value.endswith(f" {suffix}"):
            value = value[: -len(suffix) - 1]
            break
    if _INT.match(value) and len(value) <= 1000:
        return int(value)
    if _FLOAT.match(value):
        return float(value)
    return value


# --------------------------------------------------------------------------------------------------
# nvidia-smi -L
# --------------------------------------------------------------------------------------------------

_LIST = "nvidia-smi -L"
_LIST_GPU = re.compile(r"^GPU ([0-9]+): (.+) \(UUID: ([^)\s]+)\)$")
_LIST_MIG = re.compile(r"^\s+MIG (\S+)\s+Device\s+([0-9]+): \(UUID: ([^)\s]+)\)$")


def _check_listed(tool: str, indices: Sequence[int], uuids: Sequence[str], expected: int | None) -> None:
    """nvidia-smi lists GPUs once each, by increasing index; and all of them, when the caller knows how many
    there are (``expected``: the node's GPU count, ``Attached GPUs`` of ``-q``, the GPUs of ``-L``)."""
    for before, after in itertools.pairwise(indices):
        if after <= before:
            raise ParseError(f"{tool}: GPU {after} listed after GPU {before}; garbled or repeated output")
    if len(set(uuids)) != len(uuids):
        raise ParseError(f"{tool}: a GPU UUID is listed twice; garbled or repeated output")
    if expected is not None and len(indices) < expected:
        shown = ", ".join(map(str, indices))
        raise ParseError(
            f"{tool}: {len(indices)} GPU(s) listed (GPU {shown}) but {expected} expected: the"
            f" {expected - len(indices)} after GPU {indices[-1]} are missing; truncated output?"
        )


def parse_list(text: str, *, expected: int | None = None) -> list[ListedGpu]:
    """Read ``nvidia-smi -L``; MIG devices are attached to the GPU line above them.

    ``-L`` prints no total, so a listing cut short between two GPU lines looks complete: pass ``expected``
    (the GPUs the node should have, or that ``-q`` says are attached and reachable) and fewer GPU lines are a
    ParseError naming the missing ones. GPUs must be listed once each, by increasing index.
    """
    check_text(text, _LIST)
    gpus: list[ListedGpu] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if match := _LIST_GPU.match(line.rstrip()):
            index = _index(match.group(1), f"{_LIST}: line {number}")
            gpus.append(ListedGpu(index=index, name=match.group(2), uuid=match.group(3)))
        elif (match := _LIST_MIG.match(line.rstrip())) and gpus:
            mig_index = _index(match.group(2), f"{_LIST}: line {number}")
            device = ListedMigDevice(index=mig_index, profile=match.group(1), uuid=match.group(3))
            last = gpus[-1]
            gpus[-1] = ListedGpu(last.index, last.name, last.uuid, (*last.mig_devices, device))
        else:
            raise ParseError(
                f"{_LIST}: line {number} is neither a GPU nor a MIG device line: {line.strip()[:120]!r}"
            )
    if not gpus:
        raise ParseError(f"{_LIST}: no GPU lines")
    _check_listed(_LIST, [gpu.index for gpu in gpus], [gpu.uuid for gpu in gpus], expected)
    return gpus


# --------------------------------------------------------------------------------------------------
# nvidia-smi mig -lgip / -lgi / -lci / -lcip / -lgipp
# --------------------------------------------------------------------------------------------------


def _box_rows(text: str, tool: str, lines_per_row: int) -> list[list[list[str]]]:
    """Rows of a ``+---+`` / ``|...|`` box table below its ``|===|`` line, each as token lists per line.

    The table must be closed by a ``+---`` border: a capture cut short is an error, not fewer rows.
    """
    check_text(text, tool)
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise ParseError(f"{tool}: empty output")
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith("|=") and line.endswith("=|"))
    except StopIteration:
        raise ParseError(f"{tool}: no table header (the |====| line); not {tool} output") from None
    if not lines[-1].startswith("+-"):
        raise ParseError(f"{tool}: table is not closed by a +---+ border; truncated output")
    rows: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in lines[start + 1 :]:
        if line.startswith("+-") and line.endswith("-+"):
            if current:
                rows.append(current)
            current = []
        elif line.startswith("|") and line.endswith("|"):
            current.append(line[1:-1].split())
        else:
            raise ParseError(f"{tool}: unexpected line in table: {line!r}")
    if len(rows) == 1 and rows[0][0] and rows[0][0][0] == "No":
        return []  # "No GPU instances found" and friends
    for row in rows:
        if len(row) != lines_per_row:
            shown = " / ".join(" ".join(tokens) for tokens in row)
            raise ParseError(f"{tool}: row {shown!r} spans {len(row)} lines, expected {lines_per_row}")
    return rows


def _ints(tool: str, tokens: Sequence[str], row: Sequence[str]) -> list[int]:
    if not all(_DIGITS.fullmatch(token) for token in tokens):
        raise ParseError(f"{tool}: non-numeric column in row {' '.join(row)[:160]!r}")
    return [int(token) for token in tokens]


def _profile_name(tool: str, tokens: Sequence[str], at: int) -> str:
    if len(tokens) <= at + 1 or tokens[at] != "MIG":
        raise ParseError(f"{tool}: expected 'MIG <profile>' in row {' '.join(tokens)!r}")
    return tokens[at + 1]


def _fraction(tool: str, token: str, row: Sequence[str]) -> tuple[int, int]:
    parts = token.split("/")
    if len(parts) != 2:
        raise ParseError(f"{tool}: expected free/total in row {' '.join(row)!r}")
    free, total = _ints(tool, parts, row)
    return free, total


def _placement(tool: str, token: str, row: Sequence[str]) -> tuple[int, int]:
    parts = token.split(":")
    if len(parts) != 2:
        raise ParseError(f"{tool}: expected start:size placement in row {' '.join(row)!r}")
    start, size = _ints(tool, parts, row)
    return start, size


_GIB = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,9})?")


def parse_mig_lgip(text: str) -> list[GpuInstanceProfileRow]:
    """Read ``nvidia-smi mig -lgip``; the name drops the ``MIG`` prefix (``1g.10gb``, ``1g.10gb+me``)."""
    tool = "nvidia-smi mig -lgip"
    result = []
    for first, second in _box_rows(text, tool, 2):
        if len(first) != 10 or len(second) != 3:
            raise ParseError(f"{tool}: row {' '.join(first + second)!r} does not have 13 columns")
        memory = first[5]
        if not _GIB.fullmatch(memory):
            raise ParseError(f"{tool}: memory {memory[:40]!r} is not a number")
        memory_gib = float(memory)
        gpu, profile_id = _ints(tool, [first[0], first[3]], first)
        free, total = _fraction(tool, first[4], first)
        sm, dec, enc = _ints(tool, first[7:10], first)
        ce, jpg, ofa = _ints(tool, second, second)
        result.append(
            GpuInstanceProfileRow(
                gpu=gpu,
                name=_profile_name(tool, first, 1),
                profile_id=profile_id,
                instances_free=free,
                instances_total=total,
                memory_gib=memory_gib,
                p2p=_flag(first[6], "Yes", "No", tool),
                sm_count=sm,
                ce=ce,
                enc=enc,
                dec=dec,
                ofa=ofa,
                jpg=jpg,
            )
        )
    return result


def parse_mig_lgi(text: str) -> list[GpuInstanceRow]:
    """Read ``nvidia-smi mig -lgi``."""
    tool = "nvidia-smi mig -lgi"
    result = []
    for (row,) in _box_rows(text, tool, 1):
        if len(row) != 6:
            raise ParseError(f"{tool}: row {' '.join(row)!r} does not have 5 columns")
        gpu, profile_id, instance_id = _ints(tool, [row[0], row[3], row[4]], row)
        start, size = _placement(tool, row[5], row)
        result.append(GpuInstanceRow(gpu, _profile_name(tool, row, 1), profile_id, instance_id, start, size))
    return result


def parse_mig_lci(text: str) -> list[ComputeInstanceRow]:
    """Read ``nvidia-smi mig -lci`` (also with ``-gi N``)."""
    tool = "nvidia-smi mig -lci"
    result = []
    for (row,) in _box_rows(text, tool, 1):
        if len(row) != 7:
            raise ParseError(f"{tool}: row {' '.join(row)!r} does not have 6 columns")
        gpu, gi, profile_id, ci = _ints(tool, [row[0], row[1], row[4], row[5]], row)
        start, size = _placement(tool, row[6], row)
        result.append(ComputeInstanceRow(gpu, gi, _profile_name(tool, row, 2), profile_id, ci, start, size))
    return result


def parse_mig_lcip(text: str) -> list[ComputeInstanceProfileRow]:
    """Read ``nvidia-smi mig -lcip`` (usually with ``-gi N``)."""
    tool = "nvidia-smi mig -lcip"
    result = []
    for first, second in _box_rows(text, tool, 2):
        if len(first) != 10 or len(second) != 2:
            raise ParseError(f"{tool}: row {' '.join(first + second)!r} does not have 12 columns")
        profile = first[4]
        is_default = profile.endswith("*")
        gpu, gi, profile_id = _ints(tool, [first[0], first[1], profile.rstrip("*")], first)
        free, total = _fraction(tool, first[5], first)
        sm, dec, enc, ofa = _ints(tool, first[6:10], first)
        ce, jpg = _ints(tool, second, second)
        result.append(
            ComputeInstanceProfileRow(
                gpu=gpu,
                gpu_instance_id=gi,
                name=_profile_name(tool, first, 2),
                profile_id=profile_id,
                is_default=is_default,
                instances_free=free,
                instances_total=total,
                sm_count=sm,
                dec=dec,
                enc=enc,
                ofa=ofa,
                ce=ce,
                jpg=jpg,
            )
        )
    return result


_LGIPP = re.compile(
    r"^GPU\s+([0-9]{1,18}) Profile ID\s+([0-9]{1,18}) Placements?\s*: \{([0-9]{1,18}(?:,[0-9]{1,18})*)\}:([0-9]{1,18})$"
)


def parse_mig_lgipp(text: str) -> list[GpuInstancePlacements]:
    """Read ``nvidia-smi mig -lgipp`` (``GPU  0 Profile ID 14 Placements: {0,2,4}:2``)."""
    tool = "nvidia-smi mig -lgipp"
    check_text(text, tool)
    result = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _LGIPP.match(line.strip())
        if match is None:
            raise ParseError(f"{tool}: line {number} is not a placement line: {line.strip()[:120]!r}")
        starts = tuple(int(start) for start in match.group(3).split(","))
        result.append(
            GpuInstancePlacements(int(match.group(1)), int(match.group(2)), starts, int(match.group(4)))
        )
    if not result:
        raise ParseError(f"{tool}: empty output")
    return result


# --------------------------------------------------------------------------------------------------
# nvidia-smi nvlink -s
# --------------------------------------------------------------------------------------------------

_NVLINK = "nvidia-smi nvlink -s"
_NVLINK_LINK = re.compile(r"^Link ([0-9]{1,9}): (?:([0-9]{1,9}(?:\.[0-9]{1,9})?) GB/s|<inactive>)$")


def parse_nvlink_report(text: str, *, expected: int | None = None) -> list[NvLinkGpu]:
    """Read ``nvidia-smi nvlink -s`` keeping, per GPU, the messages printed instead of links.

    Those messages are what tells "no NVLink on this GPU" from "every link is down" from "MIG mode".
    nvidia-smi prints every link of a GPU, ``<inactive>`` ones included, so a last GPU with fewer links
    than another GPU of the same model means the output was cut short. Output cut between two GPUs has
    no such tell (the command prints no total): pass ``expected`` (the GPUs ``-q`` reports, or the node's
    count) and fewer GPUs are a ParseError naming the missing ones.
    """
    check_text(text, _NVLINK)
    gpus: list[NvLinkGpu] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if match := _LIST_GPU.match(line.rstrip()):
            index = _index(match.group(1), f"{_NVLINK}: line {number}")
            gpus.append(NvLinkGpu(index=index, name=match.group(2), uuid=match.group(3)))
            continue
        if stripped.startswith("GPU ") or not gpus:
            raise ParseError(f"{_NVLINK}: line {number} is not a complete 'GPU <n>: <name> (UUID: ...)' line")
        last = gpus[-1]
        if stripped.startswith("Link ") or "Link ".startswith(stripped):
            link = _NVLINK_LINK.match(stripped)
            if link is None or last.messages:
                raise ParseError(
                    f"{_NVLINK}: line {number} is a garbled or misplaced link line: {stripped[:120]!r}"
                )
            speed = None if link.group(2) is None else float(link.group(2))
            links = (*last.links, NvLink(int(link.group(1)), speed))
            gpus[-1] = NvLinkGpu(last.index, last.name, last.uuid, links, last.messages)
        elif last.links:
            raise ParseError(
                f"{_NVLINK}: line {number} follows the links of GPU {last.index}: {stripped[:120]!r}"
            )
        else:
            gpus[-1] = NvLinkGpu(last.index, last.name, last.uuid, last.links, (*last.messages, stripped))
    if not gpus:
        raise ParseError(f"{_NVLINK}: no GPU lines")
    last = gpus[-1]
    most = max((len(gpu.links) for gpu in gpus if gpu.name == last.name), default=0)
    if last.links and len(last.links) < most:
        raise ParseError(
            f"{_NVLINK}: GPU {last.index} lists {len(last.links)} links, another {last.name} lists"
            f" {most}; truncated output"
        )
    _check_listed(_NVLINK, [gpu.index for gpu in gpus], [gpu.uuid for gpu in gpus], expected)
    return gpus


def parse_nvlink_status(text: str, *, expected: int | None = None) -> dict[int, list[NvLink]]:
    """Read ``nvidia-smi nvlink -s`` into links per GPU index; a GPU without links maps to ``[]``."""
    return {gpu.index: list(gpu.links) for gpu in parse_nvlink_report(text, expected=expected)}
