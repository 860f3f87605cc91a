"""Bandwidth floors: the least a healthy GPU must move, host<->device over PCIe and GPU<->GPU over NVLink.

The diag layer of the conformance suite measures copies (``nvbandwidth``, ``bandwidthTest`` or DCGM's ``pcie``
plugin) and compares them with a floor from here. A floor is a fraction of the link's theoretical
unidirectional bandwidth, so it follows what the link *should* be (the catalogue's maximum PCIe generation and
width, the model's NVLink count) and not what it trained at: a GPU that came up at Gen4 x8 instead of Gen5 x16
fails the floor, which is the point. Pure: no I/O.

**PCIe theoretical figures** (unidirectional, per PCI-SIG signalling rates and line encodings):

* Gen1 2.5 GT/s and Gen2 5 GT/s use 8b/10b (8 data bits per 10 line bits): 0.25 / 0.5 GB/s per lane.
* Gen3 8 GT/s, Gen4 16 GT/s, Gen5 32 GT/s use 128b/130b: 0.985 / 1.969 / 3.938 GB/s per lane, so x16 is
  15.75 / 31.51 / 63.02 GB/s.
* Gen6 64 GT/s uses PAM4 and FLIT mode (no line code; fixed 256-byte flits). Raw x16 is 128 GB/s per direction;
  each flit carries 236 bytes of TLP payload next to 6 bytes of data-link payload, 8 bytes of CRC and 6 of
  FEC, so the figure used here is 128 x 236/256 = 118.0 GB/s per direction for x16. (Flit layout as summarised
  at glennklockwood.com/garden/PCIe-Gen6 from PCI-SIG and Synopsys material. Choosing 236/256 instead of
  242/256 (which would count the DLP bytes) keeps the Gen6 figure comparable to the "data only" figures of the
  128b/130b generations.)

**Why 0.7 of theoretical for PCIe** (``DEFAULT_PCIE_FRACTION``). Pinned-memory copies on healthy hosts reach
about 0.82-0.88 of the theoretical figure; TLP headers and flow control take the rest:

* Gen3 x16 (15.75): DCGM's pcie plugin measured 13.15 GB/s GPU->host and 13.11 host->GPU on a 16 GB board
  (microsoft/VirtualClient, ``Examples/DCGMI/DCGMIIncorrectresults.json``; copied to
  tests/fixtures/dcgm-diag/); Azure's health checks require 10 GB/s on V100 nodes (Azure/azurehpc-health-checks
  ``conf/nc24s_v3.conf``: ``check_gpu_bw 10``).
* Gen4 x16 (31.51): nvbandwidth measured 25.9-26.0 GB/s in both directions (Azure/azurehpc-health-checks
  ``test/data/nvbandwidth_v0.10_output.txt``); Azure requires 24 GB/s on A100 nodes
  (``conf/nd96amsr_a100_v4.conf``: ``check_cuda_bw 24``).
* Gen5 x16 (63.02): DCGM 4.4.1's pcie plugin measured 55.6 GB/s rx and 57.2 GB/s tx on 8x B200
  (NVIDIA/DCGM#253, nvvs log); Azure requires 52 GB/s on H100 nodes (``conf/nd96isr_h100_v5.conf``:
  ``check_cuda_bw 52``; the same ~52 GB/s noted in ../shared/reference/gpu-stack-2026.md).

0.7 sits below every healthy measurement above (with ~15% margin for a busy host or a NUMA-remote CPU) and
far above what a real fault gives: a link trained at half width or one generation down delivers at most 0.5 of
the floor's theoretical figure, and the lab's ``slow-gpu`` fault (40% of normal rate) lands at ~0.35. It is
below Azure's per-SKU numbers (0.63-0.83 of theoretical) on purpose: these are defaults for any model, and the
inventory can raise them per pool (``overrides``).

**NVLink** (per link, per direction; NVIDIA's product figures are bidirectional sums): NVLink 2 (Volta,
V100) 25 GB/s x 6 links = 150 GB/s; NVLink 3 (Ampere, A100) 25 GB/s x 12 = 300 GB/s; NVLink 4 (Hopper,
H100/H200) 25 GB/s x 18 = 450 GB/s ("900 GB/s" bidirectional); NVLink 5 (Blackwell, B200/GB200) 50 GB/s x 18
= 900 GB/s ("1.8 TB/s"). ``nvidia-smi nvlink -s`` prints the per-link signalling rate (25 GB/s on A100,
26.562 GB/s on H100; tests/fixtures/nvidia-smi-text and captures/), slightly above the data rate used here.

**Why 0.7 for NVLink too** (``DEFAULT_NVLINK_FRACTION``): a GPU-to-GPU copy through NVSwitch (all links)
measures ~0.82 of the figure above on 8x H100 (nvbandwidth ``device_to_device_memcpy_read_ce`` 370-373 GB/s,
AlizeeChen11/azurehpc-health-checks ``customTests/debugging-test-failure.md``, whose failing example read
162 GB/s against Azure's 335 GB/s floor) and ~0.92 on the Gen4 host of the Azure nvbandwidth capture above
(276 GB/s, presumably A100 against 300). 0.7 of 450 = 315 GB/s keeps the same margin as PCIe and still fails a
GPU that lost half its links.

A floor is only a default: ``floors_for(..., overrides=...)`` takes the inventory's numbers where a pool's
measured baseline is known.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "DEFAULT_NVLINK_FRACTION",
    "DEFAULT_PCIE_FRACTION",
    "FLOOR_KEYS",
    "NVLINK_LINK_GBPS",
    "PCIE_GT_PER_S",
    "Floors",
    "floors_for",
    "nvlink_generation",
    "nvlink_peer_floor_gbps",
    "nvlink_theoretical_gbps",
    "pcie_floor_gbps",
    "pcie_theoretical_gbps",
]

DEFAULT_PCIE_FRACTION = 0.7
DEFAULT_NVLINK_FRACTION = 0.7

# Transfer rate per lane in GT/s, by PCIe generation.
PCIE_GT_PER_S: dict[int, float] = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}

# Data bits per line bit: 8b/10b for Gen1-2, 128b/130b for Gen3-5, 236 TLP bytes per 256-byte flit for Gen6.
_PCIE_EFFICIENCY: dict[int, float] = {
    1: 8 / 10,
    2: 8 / 10,
    3: 128 / 130,
    4: 128 / 130,
    5: 128 / 130,
    6: 236 / 256,
}

_PCIE_WIDTHS = (1, 2, 4, 8, 12, 16, 32)

# GB/s per link per direction, by NVLink generation (see the module docstring).
NVLINK_LINK_GBPS: dict[int, float] = {2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}

# GPU architecture (as GPU feature discovery / the lab hardware file spell it) -> NVLink generation.
_NVLINK_BY_ARCH: dict[str, int] = {"volta": 2, "ampere": 3, "hopper": 4, "blackwell": 5}

FLOOR_KEYS = ("h2d_gbps", "d2h_gbps", "peer_gbps")


def _check_fraction(fraction: float) -> None:
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ValueError(f"fraction must be a number in (0, 1], got {fraction!r}")


def pcie_theoretical_gbps(gen: int, width: int) -> float:
    """Unidirectional theoretical bandwidth in GB/s (10^9 bytes/s) of a PCIe link of ``gen`` and ``width``.

    >>> round(pcie_theoretical_gbps(4, 16), 2)
    31.51
    """
    if isinstance(gen, bool) or gen not in PCIE_GT_PER_S:
        raise ValueError(f"unknown PCIe generation {gen!r}; known generations: 1-6")
    if isinstance(width, bool) or width not in _PCIE_WIDTHS:
        raise ValueError(
            f"invalid PCIe link width {width!r}; allowed widths: {', '.join(map(str, _PCIE_WIDTHS))}"
        )
    return PCIE_GT_PER_S[gen] * _PCIE_EFFICIENCY[gen] * width / 8


def pcie_floor_gbps(gen: int, width: int, fraction: float = DEFAULT_PCIE_FRACTION) -> float:
    """The least a healthy pinned host<->device copy must reach on that link (``fraction`` of theoretical)."""
    _check_fraction(fraction)
    return pcie_theoretical_gbps(gen, width) * fraction


def nvlink_generation(architecture: str) -> int | None:
    """NVLink generation of an architecture's SXM parts ("Hopper" -> 4); None for architectures without one.

    Matching ignores case and surrounding blanks. Turing and Ada Lovelace (T4, L4, L40S) have no NVLink; nor
    do unknown names.
    """
    return _NVLINK_BY_ARCH.get(architecture.strip().lower()) if isinstance(architecture, str) else None


def nvlink_theoretical_gbps(generation: int, links: int) -> float:
    """Unidirectional GB/s of ``links`` NVLinks of ``generation`` together (what NVSwitch lets one peer use)."""
    if isinstance(generation, bool) or generation not in NVLINK_LINK_GBPS:
        raise ValueError(
            f"unknown NVLink generation {generation!r}; known generations: "
            f"{', '.join(map(str, sorted(NVLINK_LINK_GBPS)))}"
        )
    if isinstance(links, bool) or not isinstance(links, int) or links < 1:
        raise ValueError(f"NVLink count must be a positive integer, got {links!r}")
    return NVLINK_LINK_GBPS[generation] * links


def nvlink_peer_floor_gbps(generation: int, links: int, fraction: float = DEFAULT_NVLINK_FRACTION) -> float:
    """The least a GPU-to-GPU copy over NVSwitch (all ``links``) must reach: ``fraction`` of theoretical."""
    _check_fraction(fraction)
    return nvlink_theoretical_gbps(generation, links) * fraction


@dataclass(frozen=True)
class Floors:
    """Floors for one GPU model in GB/s; ``peer_gbps`` is None where there is no NVLink to measure."""

    h2d_gbps: float
    d2h_gbps: float
    peer_gbps: float | None


def _override_value(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"bandwidth floor override {key!r} must be a positive number of GB/s, got {value!r}")
    return float(value)


def floors_for(
    architecture: str,
    max_pcie_gen: int,
    max_pcie_width: int,
    nvlink_links: int,
    overrides: Mapping[str, float] | None = None,
) -> Floors:
    """Floors for a GPU of ``architecture`` whose link should train at ``max_pcie_gen`` x ``max_pcie_width``.

    Host->device and device->host share the PCIe floor (both directions have the same theoretical rate). The
    peer floor comes from NVLink when the architecture has it and the model has links (``nvlink_links`` > 0);
    otherwise it is None: peer copies between PCIe cards go through the root complex or host memory and
    depend on the platform too much for a default. ``overrides`` (from the inventory) replaces any of
    ``h2d_gbps``, ``d2h_gbps``, ``peer_gbps``; another key raises ValueError naming it and the allowed keys.
    """
    overrides = dict(overrides or {})
    unknown = sorted(k for k in overrides if k not in FLOOR_KEYS)
    if unknown:
        raise ValueError(
            f"unknown bandwidth floor override {unknown[0]!r}; allowed keys: {', '.join(FLOOR_KEYS)}"
        )
    if isinstance(nvlink_links, bool) or not isinstance(nvlink_links, int) or nvlink_links < 0:
        raise ValueError(f"NVLink count must be an integer >= 0, got {nvlink_links!r}")
    pcie = pcie_floor_gbps(max_pcie_gen, max_pcie_width)
    generation = nvlink_generation(architecture)
    peer = nvlink_peer_floor_gbps(generation, nvlink_links) if generation and nvlink_links > 0 else None
    given = {key: _override_value(key, value) for key, value in overrides.items()}
    return Floors(
        h2d_gbps=given.get("h2d_gbps", pcie),
        d2h_gbps=given.get("d2h_gbps", pcie),
        peer_gbps=given.get("peer_gbps", peer),
    )
