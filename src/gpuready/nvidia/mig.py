"""MIG GPU-instance profiles per model, and the placement rules that decide whether a layout fits one GPU.

The inventory names a MIG layout per GPU ("3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb"); the spec must reject a layout
the driver would refuse *before* a deploy touches a node, the deploy creates it in an order that cannot strand
slices, the lab's nvidia-smi emulator prints the same ``mig -lgip``/``-lgipp`` tables and MIG device attributes
as the real driver, and the conformance suite expects the device plugin's ``nvidia.com/mig-*`` resources.

Placement model (what ``nvidia-smi mig -lgipp`` prints, and what NVML enforces): a GPU has a row of slots
(8 on A100/H100/H200/B200/GB200/B300, 4 on A30 and the RTX PRO 6000 Blackwell); each profile may start only at its listed slots and covers ``placement_size``
slots (its memory slices); instances may not overlap; each profile has a per-GPU maximum ("Instances Total").
Compute slices (7 or 4) are bounded as a sum. Media engines are a shared pool whose size is the full-GPU
profile's count: this is why only one ``+me`` instance (the one holding the single OFA/JPEG) can exist, and why
A30's ``1g.6gb+me`` and ``2g.12gb+me`` exclude each other.

Where the tables come from (facts only; no code was copied). Memory, SMs and engines change a little between
driver branches, so each table is taken from one real capture (its driver noted) and ``memory_gib`` is
``memory_mib / 1024`` printed as ``-lgip`` prints it (two decimals):

* A100 40GB (SXM4 and PCIe): ``/work/shared/fixtures/nvidia-smi-mig/openforbc__a100-pcie-40gb_mig-lgip.txt``
  and ``-lgipp.txt``; ``1g.10gb`` (id 15, placements {0,2,4,6}:2) from another public A100-PCIE-40GB
  ``-lgip`` capture of the same driver era whose other rows equal the fixture's.
* A100 80GB (SXM4 and PCIe): a public ``-lgip`` on an Azure NC A100 v4 (A100 80GB PCIe, driver 515.86.01;
  the same values appear in several other public captures), MIG device memory 40192 MiB for 3g.40gb in the
  same capture; ``1g.20gb`` (id 15, 14 SMs, 19968 MiB, 1 CE, 1 DEC) from the four MIG devices in
  ``nvidia-smi-xml/telegraf__a100-sxm4-v12.xml`` (A100-SXM4-80GB, 535.54.03).
* A30: a public ``-lgip``/``-lgipp``/``-lgi`` session on an NVIDIA A30 (535.183.01) with MIG device memory
  5952 MiB (1g.6gb) and 11968 MiB (2g.12gb) in its ``nvidia-smi`` table.
* H100 80GB HBM3 (SXM): ``nvidia-smi-mig/stackhpc-slurm-appliance__4x-h100-sxm5-80gb_mig-lgip.txt`` (also
  quoted in gpu-stack-facts.md section 11) and the MIG devices of ``captures/*h100-mig*`` (590.48.01:
  3g.40gb 40448 MiB / 60 SMs, 2g.20gb 20096 MiB / 32 SMs, 1g.10gb 9984 MiB / 16 SMs).
* H100 PCIe: a public ``-lgip`` on a Scaleway H100 PCIe (570.169) with its 1g.10gb MIG devices (9984 MiB).
* H100 NVL: a public Azure HPC guide (``-lgip``, ``-lgipp`` and MIG device table, 560.35.03), also quoted in
  gpu-stack-facts.md section 11.
* H200 141GB: ``device/h200__580.159.04/nvidia-smi-mig-lgip.txt`` and ``-lgipp.txt``, captured by
  ``scripts/device-check.sh`` on a lent H200 (driver 580.159.04, MIG off): every row and placement. (The table was
  NVIDIA's guide plus the H100 pattern before; the capture confirmed each value.)
* ``+me`` profiles, ``p2p``: every real capture above prints ``P2P No``.
* Blackwell (issue #29). No real ``-lgip`` was found for any Blackwell part, so these tables are the documented
  facts plus estimates, each marked; replace them with a real ``-lgip``/``-lgipp`` when one is at hand.

  - B200: NVIDIA's MIG user guide, "Supported MIG Profiles", B200 table
    (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html): profiles 1g.23gb (7
    instances), 1g.23gb+me (1), 1g.45gb (4, two memory slices), 2g.45gb (3), 3g.90gb (2), 4g.90gb (1), 7g.180gb
    (1); memory fractions 1/8, 2/8, 4/8, full (the H100 geometry: 8 memory slots, 7 compute slices); copy
    engines 2, 2, 2, 3, 6, 8, 16; OFA only on +me and 7g. The guide lists 1 NVDEC/1 JPEG on every profile, which
    cannot be per-instance counts of one pool (seven 1g instances would need seven), so the decoders and JPEG
    units follow the H100 pattern (1, 1, 1, 2, 3, 4, 7). SMs: 18 on 1g.23gb from a public CUDA device query of a
    "NVIDIA B200 MIG 1g.23gb"; **estimated:** the other SM counts (18 per compute slice, 7g = all 148).
  - GB200: profile names from NVIDIA mig-parted ``deployments/systemd/config-default.yaml`` ("GB200 HGX":
    1g.23gb, 1g.47gb, 2g.47gb, 3g.93gb, 4g.93gb, 7g.186gb; device filter 0x294110DE); instance counts, engines and
    placements **as B200** (same GB100 die and 8-slot geometry), 7g SMs = all 152.
  - B300 SXM6 AC: profile names from mig-parted's config (device filter 0x318210DE: 1g.34gb, 2g.67gb, 3g.135gb in
    ``all-balanced``) and a public mig-parted config for P6-B300 listing 1g.34gb (x7), 1g.67gb (x4), 2g.67gb (x3),
    3g.135gb (x2), 4g.135gb (x1), 7g.269gb (x1); engines and placements **as B200**. No ``+me`` profile is listed
    for GB200 or B300, so none is offered (a layout asking for one is refused, never created wrongly).
  - RTX PRO 6000 Blackwell Server Edition: the guide's RTX PRO 6000 Blackwell table (same URL): 4 memory slots
    and 4 compute slices; 1g.24gb, 1g.24gb+gfx and 1g.24gb-me (4 instances each), 1g.24gb+me and 1g.24gb+me.all
    (1), 2g.48gb, 2g.48gb+gfx and 2g.48gb-me (2), 2g.48gb+me.all (1), 4g.96gb and 4g.96gb+gfx (1), with their
    NVDEC/NVENC/JPEG/OFA and copy-engine counts as the table gives them (``+me.all`` takes every media engine, so
    it shares the GPU only with ``-me`` instances). Placements as A30's 4-slot row. **Estimated:** SMs (47 per
    compute slice of 188) and, for the ``+gfx``, ``-me`` and ``+me.all`` profiles, the profile ids (unique here,
    not NVIDIA's).

  **Estimated for every Blackwell table:** each profile's MiB, from the whole GPU's memory in the H100 80GB
  proportions (9984, 20096, 40448, 81152 of 81559 MiB for 1, 2, 4 and 8 slots; A30's 5952, 11968, 24000 of 24576
  for the 4-slot RTX PRO), rounded to 128 MiB; and the profile ids, H100's (19, 20, 15, 14, 9, 5, 0) and A30's
  (14, 21, 5, 0). A real node's GFD ``mig-*.memory`` label may differ by a few hundred MiB until a capture replaces
  them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuready.nvidia.models import UnknownModelError, lookup_model

RESOURCE_PREFIX = "nvidia.com/mig-"


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile as ``nvidia-smi mig -lgip``/``-lgipp`` and the MIG device attributes show it."""

    name: str
    profile_id: int
    compute_slices: int
    memory_slices: int
    memory_mib: int
    memory_gib: float
    max_instances: int
    placements: tuple[int, ...]
    placement_size: int
    sm_count: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg: int
    ofa: int
    p2p: bool

    @property
    def resource_name(self) -> str:
        """The device plugin's mixed-strategy resource; it turns '+' into '.' (``internal/rm/rm.go``)."""
        return RESOURCE_PREFIX + self.name.replace("+", ".")

    @property
    def media_extensions(self) -> bool:
        return self.name.endswith("+me")

    @property
    def compute_instance_profile_id(self) -> int:
        """Id of the default compute instance (all of the GPU instance's slices), starred in ``-lcip``."""
        return _CI_PROFILE_ID_BY_SLICES[self.compute_slices]


# NVML_COMPUTE_INSTANCE_PROFILE_{1,2,3,4,7,8,6}_SLICE are 0..6 in that order.
_CI_PROFILE_ID_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


@dataclass(frozen=True)
class _MigTable:
    slots: int  # placement slots = memory slices
    compute_slices: int
    profiles: tuple[MigProfile, ...]

    def by_name(self) -> dict[str, MigProfile]:
        return {p.name: p for p in self.profiles}

    @property
    def full(self) -> MigProfile:
        """The whole-GPU profile: its engine counts are the GPU's pools."""
        return max(self.profiles, key=lambda p: (p.compute_slices, p.memory_slices))


class NotMigCapableError(ValueError):
    """The model has no MIG mode (T4, L4, L40S, ...)."""


class UnknownMigProfileError(KeyError):
    """A profile name the model does not have; the message lists the model's profiles."""

    def __str__(self) -> str:
        return str(self.args[0])


_ENGINES = (
    ("copy_engines", "copy engines"),
    ("decoders", "decoders"),
    ("encoders", "encoders"),
    ("jpeg", "JPEG decoders"),
    ("ofa", "OFA units"),
)

# Start slots and size by placement class, from -lgipp (8-slot GPUs) and the A30 session (4 slots).
_S8 = {
    "1": ((0, 1, 2, 3, 4, 5, 6), 1),
    "1x2": ((0, 2, 4, 6), 2),
    "2": ((0, 2, 4), 2),
    "3": ((0, 4), 4),
    "4": ((0,), 4),
    "7": ((0,), 8),
}
_S4 = {"1": ((0, 1, 2, 3), 1), "2": ((0, 2), 2), "4": ((0,), 4)}

_Row = tuple[str, int, int, int, int, int, int, int, int, int, str]


def _table(
    slots: int, compute: int, placement_classes: dict[str, tuple[tuple[int, ...], int]], rows: list[_Row]
) -> _MigTable:
    """Build a table from ``-lgip``-shaped rows: name, id, total, MiB, SM, CE, DEC, ENC, JPEG, OFA, placement class."""
    profiles = []
    for name, pid, total, mib, sms, ce, dec, enc, jpg, ofa, cls in rows:
        starts, size = placement_classes[cls]
        profiles.append(
            MigProfile(
                name=name,
                profile_id=pid,
                compute_slices=int(name.split("g.", 1)[0]),
                memory_slices=size,
                memory_mib=mib,
                memory_gib=float(f"{mib / 1024:.2f}"),
                max_instances=total,
                placements=starts,
                placement_size=size,
                sm_count=sms,
                copy_engines=ce,
                decoders=dec,
                encoders=enc,
                jpeg=jpg,
                ofa=ofa,
                p2p=False,
            )
        )
    return _MigTable(slots, compute, tuple(profiles))


# name,           id, total,  MiB,    SM, CE, DEC, ENC, JPG, OFA, placement
_A100_40GB = _table(8, 7, _S8, [
    ("1g.5gb",      19, 7,   4864,   14, 1, 0, 0, 0, 0, "1"),
    ("1g.5gb+me",   20, 1,   4864,   14, 1, 1, 0, 1, 1, "1"),
    ("1g.10gb",     15, 4,   9984,   14, 1, 1, 0, 0, 0, "1x2"),
    ("2g.10gb",     14, 3,   9984,   28, 2, 1, 0, 0, 0, "2"),
    ("3g.20gb",      9, 2,  20096,   42, 3, 2, 0, 0, 0, "3"),
    ("4g.20gb",      5, 1,  20096,   56, 4, 2, 0, 0, 0, "4"),
    ("7g.40gb",      0, 1,  40448,   98, 7, 5, 0, 1, 1, "7"),
])  # fmt: skip

_A100_80GB = _table(8, 7, _S8, [
    ("1g.10gb",     19, 7,   9728,   14, 1, 0, 0, 0, 0, "1"),
    ("1g.10gb+me",  20, 1,   9728,   14, 1, 1, 0, 1, 1, "1"),
    ("1g.20gb",     15, 4,  19968,   14, 1, 1, 0, 0, 0, "1x2"),
    ("2g.20gb",     14, 3,  19968,   28, 2, 1, 0, 0, 0, "2"),
    ("3g.40gb",      9, 2,  40192,   42, 3, 2, 0, 0, 0, "3"),
    ("4g.40gb",      5, 1,  40192,   56, 4, 2, 0, 0, 0, "4"),
    ("7g.80gb",      0, 1,  80896,   98, 7, 5, 0, 1, 1, "7"),
])  # fmt: skip

_A30 = _table(4, 4, _S4, [
    ("1g.6gb",      14, 4,   5952,   14, 1, 1, 0, 0, 0, "1"),
    ("1g.6gb+me",   21, 1,   5952,   14, 1, 1, 0, 1, 1, "1"),
    ("2g.12gb",      5, 2,  11968,   28, 2, 2, 0, 0, 0, "2"),
    ("2g.12gb+me",   6, 1,  11968,   28, 2, 2, 0, 1, 1, "2"),
    ("4g.24gb",      0, 1,  24000,   56, 4, 4, 0, 1, 1, "4"),
])  # fmt: skip

_H100_SXM = _table(8, 7, _S8, [
    ("1g.10gb",     19, 7,   9984,   16, 1, 1, 0, 1, 0, "1"),
    ("1g.10gb+me",  20, 1,   9984,   16, 1, 1, 0, 1, 1, "1"),
    ("1g.20gb",     15, 4,  20096,   26, 1, 1, 0, 1, 0, "1x2"),
    ("2g.20gb",     14, 3,  20096,   32, 2, 2, 0, 2, 0, "2"),
    ("3g.40gb",      9, 2,  40448,   60, 3, 3, 0, 3, 0, "3"),
    ("4g.40gb",      5, 1,  40448,   64, 4, 4, 0, 4, 0, "4"),
    ("7g.80gb",      0, 1,  81152,  132, 8, 7, 0, 7, 1, "7"),
])  # fmt: skip

_H100_PCIE = _table(8, 7, _S8, [
    ("1g.10gb",     19, 7,   9984,   14, 1, 1, 0, 1, 0, "1"),
    ("1g.10gb+me",  20, 1,   9984,   14, 1, 1, 0, 1, 1, "1"),
    ("1g.20gb",     15, 4,  20096,   14, 1, 1, 0, 1, 0, "1x2"),
    ("2g.20gb",     14, 3,  20096,   30, 2, 2, 0, 2, 0, "2"),
    ("3g.40gb",      9, 2,  40448,   46, 3, 3, 0, 3, 0, "3"),
    ("4g.40gb",      5, 1,  40448,   62, 4, 4, 0, 4, 0, "4"),
    ("7g.80gb",      0, 1,  81152,  114, 8, 7, 0, 7, 1, "7"),
])  # fmt: skip

_H100_NVL = _table(8, 7, _S8, [
    ("1g.12gb",     19, 7,  11008,   16, 1, 1, 0, 1, 0, "1"),
    ("1g.12gb+me",  20, 1,  11008,   16, 1, 1, 0, 1, 1, "1"),
    ("1g.24gb",     15, 4,  22144,   26, 1, 1, 0, 1, 0, "1x2"),
    ("2g.24gb",     14, 3,  22144,   32, 2, 2, 0, 2, 0, "2"),
    ("3g.47gb",      9, 2,  47488,   60, 3, 3, 0, 3, 0, "3"),
    ("4g.47gb",      5, 1,  47488,   64, 4, 4, 0, 4, 0, "4"),
    ("7g.94gb",      0, 1,  95360,  132, 8, 7, 0, 7, 1, "7"),
])  # fmt: skip

_H200 = _table(8, 7, _S8, [
    ("1g.18gb",     19, 7,  16384,   16, 1, 1, 0, 1, 0, "1"),
    ("1g.18gb+me",  20, 1,  16384,   16, 1, 1, 0, 1, 1, "1"),
    ("1g.35gb",     15, 4,  33280,   26, 1, 1, 0, 1, 0, "1x2"),
    ("2g.35gb",     14, 3,  33280,   32, 2, 2, 0, 2, 0, "2"),
    ("3g.71gb",      9, 2,  71424,   60, 3, 3, 0, 3, 0, "3"),
    ("4g.71gb",      5, 1,  71424,   64, 4, 4, 0, 4, 0, "4"),
    ("7g.141gb",     0, 1, 143360,  132, 8, 7, 0, 7, 1, "7"),
])  # fmt: skip

# Blackwell: see the module docstring for which values are NVIDIA's and which are estimates.
# name,           id, total,  MiB,    SM, CE, DEC, ENC, JPG, OFA, placement
_B200 = _table(8, 7, _S8, [
    ("1g.23gb",     19, 7,  22400,   18,  2, 1, 0, 1, 0, "1"),
    ("1g.23gb+me",  20, 1,  22400,   18,  2, 1, 0, 1, 1, "1"),
    ("1g.45gb",     15, 4,  45184,   18,  2, 1, 0, 1, 0, "1x2"),
    ("2g.45gb",     14, 3,  45184,   36,  3, 2, 0, 2, 0, "2"),
    ("3g.90gb",      9, 2,  90880,   54,  6, 3, 0, 3, 0, "3"),
    ("4g.90gb",      5, 1,  90880,   72,  8, 4, 0, 4, 0, "4"),
    ("7g.180gb",     0, 1, 182400,  148, 16, 7, 0, 7, 1, "7"),
])  # fmt: skip

_GB200 = _table(8, 7, _S8, [
    ("1g.23gb",     19, 7,  23168,   18,  2, 1, 0, 1, 0, "1"),
    ("1g.47gb",     15, 4,  46720,   18,  2, 1, 0, 1, 0, "1x2"),
    ("2g.47gb",     14, 3,  46720,   36,  3, 2, 0, 2, 0, "2"),
    ("3g.93gb",      9, 2,  93952,   54,  6, 3, 0, 3, 0, "3"),
    ("4g.93gb",      5, 1,  93952,   72,  8, 4, 0, 4, 0, "4"),
    ("7g.186gb",     0, 1, 188544,  152, 16, 7, 0, 7, 1, "7"),
])  # fmt: skip

_B300 = _table(8, 7, _S8, [
    ("1g.34gb",     19, 7,  33664,   18,  2, 1, 0, 1, 0, "1"),
    ("1g.67gb",     15, 4,  67712,   18,  2, 1, 0, 1, 0, "1x2"),
    ("2g.67gb",     14, 3,  67712,   36,  3, 2, 0, 2, 0, "2"),
    ("3g.135gb",     9, 2, 136448,   54,  6, 3, 0, 3, 0, "3"),
    ("4g.135gb",     5, 1, 136448,   72,  8, 4, 0, 4, 0, "4"),
    ("7g.269gb",     0, 1, 273664,  148, 16, 7, 0, 7, 1, "7"),
])  # fmt: skip

_RTX_PRO_6000 = _table(4, 4, _S4, [
    ("1g.24gb",         14, 4,  23680,   47, 1, 1, 1, 1, 0, "1"),
    ("1g.24gb+me",      21, 1,  23680,   47, 1, 1, 1, 1, 1, "1"),
    ("1g.24gb+gfx",     22, 4,  23680,   47, 1, 1, 1, 1, 0, "1"),
    ("1g.24gb+me.all",  23, 1,  23680,   47, 1, 4, 4, 4, 1, "1"),
    ("1g.24gb-me",      24, 4,  23680,   47, 1, 0, 0, 0, 0, "1"),
    ("2g.48gb",          5, 2,  47616,   94, 2, 2, 2, 2, 0, "2"),
    ("2g.48gb+gfx",     25, 2,  47616,   94, 2, 2, 2, 2, 0, "2"),
    ("2g.48gb+me.all",  26, 1,  47616,   94, 2, 4, 4, 4, 1, "2"),
    ("2g.48gb-me",      27, 2,  47616,   94, 2, 0, 0, 0, 0, "2"),
    ("4g.96gb",          0, 1,  95616,  188, 4, 4, 4, 4, 1, "4"),
    ("4g.96gb+gfx",     28, 1,  95616,  188, 4, 4, 4, 4, 1, "4"),
])  # fmt: skip

_TABLES: dict[str, _MigTable] = {
    "NVIDIA A100-SXM4-40GB": _A100_40GB,
    "NVIDIA A100-PCIE-40GB": _A100_40GB,
    "NVIDIA A100-SXM4-80GB": _A100_80GB,
    "NVIDIA A100 80GB PCIe": _A100_80GB,
    "NVIDIA A30": _A30,
    "NVIDIA H100 80GB HBM3": _H100_SXM,
    "NVIDIA H100 PCIe": _H100_PCIE,
    "NVIDIA H100 NVL": _H100_NVL,
    "NVIDIA H200": _H200,
    "NVIDIA B200": _B200,
    "NVIDIA GB200": _GB200,
    "NVIDIA B300 SXM6 AC": _B300,
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": _RTX_PRO_6000,
}


def _table_for(model: str) -> tuple[str, _MigTable]:
    resolved = lookup_model(model)
    table = _TABLES.get(resolved.name)
    if table is None:
        raise NotMigCapableError(f"{resolved.name} does not support MIG")
    return resolved.name, table


def mig_profiles(model: str) -> dict[str, MigProfile]:
    """The model's GPU-instance profiles by name, in ``-lgip`` order (model name or alias)."""
    return _table_for(model)[1].by_name()


def mig_slices(model: str) -> tuple[int, int]:
    """(compute slices, memory slices) of the whole GPU: (7, 8) on A100/H100/H200, (4, 4) on A30."""
    table = _table_for(model)[1]
    return table.compute_slices, table.slots


def _spelling_hint(name: str, known: dict[str, MigProfile]) -> str:
    """Suggest the canonical name for 'MIG 1g.10gb', '1G.10GB' or the resource spelling '1g.10gb.me'."""
    text = re.sub(r"^(nvidia\.com/)?mig[\s-]+", "", name.strip(), flags=re.IGNORECASE).lower()
    text = re.sub(r"\.me$", "+me", text)
    return f" (did you mean '{text}'?)" if text in known and text != name else ""


def _unknown(model_name: str, name: str, known: dict[str, MigProfile]) -> str:
    return (
        f"unknown MIG profile '{name}' for {model_name}{_spelling_hint(name, known)}; "
        f"its profiles are: {', '.join(known)}"
    )


def _search(table: _MigTable, wanted: list[MigProfile]) -> list[tuple[str, int]] | None:
    """Place every instance on the slot row; larger instances first, as NVIDIA advises, then backtrack."""
    order = sorted(wanted, key=lambda p: (-p.placement_size, -p.compute_slices, len(p.placements), p.name))
    chosen: list[tuple[str, int]] = []

    def place(i: int, used: int) -> bool:
        if i == len(order):
            return True
        profile = order[i]
        # Identical instances are interchangeable: give them increasing starts so each set is tried once.
        lowest = chosen[-1][1] + 1 if i and order[i - 1] is profile else 0
        mask = (1 << profile.placement_size) - 1
        for start in profile.placements:
            span = mask << start
            if start >= lowest and not used & span:
                chosen.append((profile.name, start))
                if place(i + 1, used | span):
                    return True
                chosen.pop()
        return False

    return list(chosen) if place(0, 0) else None


def _count_problems(model_name: str, table: _MigTable, wanted: list[MigProfile]) -> list[str]:
    """Per-profile maximums and slice totals; the engine pools only when those pass (their excess is implied)."""
    problems = []
    for profile in table.profiles:
        n = sum(1 for p in wanted if p is profile)
        if n > profile.max_instances:
            problems.append(
                f"{n} x {profile.name} requested but {model_name} allows at most "
                f"{profile.max_instances} {profile.name} instance{'s' if profile.max_instances > 1 else ''}"
            )
    compute, memory = sum(p.compute_slices for p in wanted), sum(p.memory_slices for p in wanted)
    if compute > table.compute_slices or memory > table.slots:
        problems.append(
            f"the layout asks for {compute} compute and {memory} memory slices but {model_name} has "
            f"{table.compute_slices} compute and {table.slots} memory slices"
        )
    if problems:
        return problems
    for attr, label in _ENGINES:
        need, have = sum(getattr(p, attr) for p in wanted), getattr(table.full, attr)
        if need > have:
            users = ", ".join(sorted({p.name for p in wanted if getattr(p, attr)}))
            problems.append(f"the layout needs {need} {label} ({users}) but {model_name} has {have} in all")
    return problems


def fit_layout(model: str, profiles: list[str]) -> list[tuple[str, int]] | None:
    """Place the GPU instances on one GPU: ``[(profile, start_slot)]`` largest first, or None if they cannot fit.

    The result is the creation order the deploy should use and the ``-lgi`` ``Start`` each instance gets.
    The order of ``profiles`` does not matter. Raises UnknownMigProfileError for a name the model lacks and
    NotMigCapableError for a model without MIG.
    """
    model_name, table = _table_for(model)
    known = table.by_name()
    for name in profiles:
        if name not in known:
            raise UnknownMigProfileError(_unknown(model_name, name, known))
    wanted = [known[name] for name in profiles]
    if _count_problems(model_name, table, wanted):
        return None
    return _search(table, wanted)


def layout_problems(model: str, profiles: list[str]) -> list[str]:
    """Why a MIG layout cannot be created on one GPU of ``model``, in words; empty when it can."""
    try:
        model_name, table = _table_for(model)
    except (UnknownModelError, NotMigCapableError) as exc:
        return [str(exc)]
    known = table.by_name()
    unknown = list(dict.fromkeys(name for name in profiles if name not in known))
    if unknown:
        return [_unknown(model_name, name, known) for name in unknown]
    wanted = [known[name] for name in profiles]
    problems = _count_problems(model_name, table, wanted)
    if not problems and _search(table, wanted) is None:
        layout = ", ".join(
            f"{p.name} at {{{','.join(map(str, p.placements))}}}:{p.placement_size}"
            for p in sorted(set(wanted), key=lambda p: -p.placement_size)
        )
        problems.append(f"the instances fit the slice totals but no placement avoids overlap ({layout})")
    return problems


def placement_conflicts(model: str, placed: list[tuple[str, int]]) -> list[str]:
    """Why already-placed instances (``-lgi`` Start values) are invalid: bad start slot or overlap."""
    model_name, table = _table_for(model)
    known = table.by_name()
    problems = []
    spans = []
    for name, start in placed:
        if name not in known:
            raise UnknownMigProfileError(_unknown(model_name, name, known))
        profile = known[name]
        if start not in profile.placements:
            problems.append(
                f"{name} cannot start at slot {start}; valid starts are {list(profile.placements)}"
            )
        spans.append((start, start + profile.placement_size, name))
    reach: tuple[int, int, str] | None = None  # the span reaching furthest right so far
    for span in sorted(spans):
        if reach and span[0] < reach[1]:
            problems.append(f"{reach[2]} at slot {reach[0]} overlaps {span[2]} at slot {span[0]}")
        if reach is None or span[1] > reach[1]:
            reach = span
    return problems
