"""Whole-GPU models: what nvidia-smi, NVML and GPU feature discovery report for each supported part.

The deploys, the conformance suite and the lab emulators must agree on every number here (an emulated H100 must
report the memory the real one reports, or the conformance suite's ``nvidia.com/gpu.memory`` expectation is
wrong on real hardware), so each value is taken from a real capture where one exists.

Where the values come from (facts only; no code was copied):

* ``name``, ``memory_mib``, ``pci_device_id``, ``power_limit_w``, PCIe generation/width, compute capability:
  - NVIDIA H100 80GB HBM3: ``/work/shared/fixtures/captures/*h100*`` (driver 590.48.01, ``-q`` and
    ``--query-gpu``) and ``nvidia-smi-text/gpud__nvidia-smi-query.535.183.01.out.0.valid``: 81559 MiB,
    0x233010DE, 700 W, PCIe gen 5 x16, 9.0.
  - NVIDIA L40S: ``captures/*l40s*`` (595.80): 46068 MiB, 0x26B910DE, 350 W, gen 4 x16, 8.9.
  - Tesla T4: ``nvidia-smi-xml/telegraf__tesla-t4.xml``: 15360 MiB, 0x1EB810DE, 70 W, gen 3 x16.
  - NVIDIA A100-SXM4-80GB: ``nvidia-smi-xml/telegraf__a100-sxm4-v12.xml``: 81920 MiB, 0x20B210DE, gen 4 x16.
    That board reports a 500 W limit (a high-power HGX variant); the catalogue keeps NVIDIA's 400 W datasheet
    default, which is what most A100 80GB SXM boards report.
  - NVIDIA A100-SXM4-80GB NVLinks: ``nvidia-smi-text/gpud__nvidia-smi.nvlink.status.a100`` (12 links).
  - Public ``nvidia-smi`` tables and ``-q`` output found with the code search (driver versions noted):
    NVIDIA H200 143771 MiB / 700 W / 0x233510DE (570.86.15, 580.159.03; the device id also from
    k8s-mig-manager's changelog "Add H200 with PCI ID 0x233510DE"); NVIDIA H100 NVL 95830 MiB / 400 W
    (560.35.03); NVIDIA H100 PCIe 81559 MiB / 350 W (570.169); NVIDIA A30 24576 MiB / 165 W (535.183.01);
    NVIDIA L4 23034 MiB / 72 W; NVIDIA A100 80GB PCIe 81920 MiB / 300 W (515.86.01);
    NVIDIA A100-SXM4-40GB and NVIDIA A100-PCIE-40GB 40960 MiB (R525 and later; older drivers print 40536/40537)
    at 400 W / 250 W; A100-PCIE-40GB device id 0x20F110DE from a real ``nvidia-smi -a``.
  - Other PCI device ids (A100-SXM4-40GB 0x20B010DE, A100 80GB PCIe 0x20B510DE, A30 0x20B710DE,
    H100 PCIe 0x233110DE, H100 NVL 0x232110DE, L4 0x27B810DE): NVIDIA mig-parted's ``config-default.yaml``
    device filters and the PCI ID database.
* ``sm_count``: NVIDIA datasheets, cross-checked with the 7g profile's SM count in real ``mig -lgip`` output
  (A100 98 of 108 usable under MIG, H100 SXM/NVL 132, H100 PCIe 114).
* ``family``: GPU feature discovery's ``getArchFamily`` in k8s-device-plugin ``internal/lm/resource.go``
  (compute 7.5 turing, 8.0 ampere, 8.9 ada-lovelace, 9.x hopper).
* ``nvlink_links``: NVLinks on the SXM parts (A100 12, H100/H200 18). H100 NVL is sold bridged in pairs
  (600 GB/s = 12 NVLink4 links); the other PCIe cards' bridges are optional accessories and modelled as absent.
* Blackwell (issue #29). Which parts have MIG, their compute capability and nominal memory: NVIDIA's MIG user
  guide, "Supported GPUs" (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-gpus.html: B200 10.0
  180GB, GB200 10.0 186GB, RTX PRO 6000 Blackwell Server Edition 12.0 96GB, each with MIG). B300 is not in that
  table yet; its MIG profiles are in NVIDIA mig-parted's ``deployments/systemd/config-default.yaml`` (device filter
  0x318210DE), so it is MIG-capable here. PCI device ids from the same mig-parted file's device filters (B200
  0x290110DE, GB200 0x294110DE, B300 0x318210DE, RTX PRO 6000 Blackwell 0x2BB510DE). Memory and power limit from
  public ``nvidia-smi`` tables found with the code search: NVIDIA B200 183359 MiB / 1000 W (570.172.08,
  595.71.05), NVIDIA GB200 189471 MiB / 1200 W (580.95.05), NVIDIA B300 SXM6 AC 275040 MiB / 1100 W (the name the
  driver prints), NVIDIA RTX PRO 6000 Blackwell Server Edition 97887 MiB / 600 W. SM counts from public CUDA
  device queries: B200 148, B300 SXM6 AC 148, GB200 152, RTX PRO 6000 Blackwell Server Edition 188; B300's
  compute capability 10.3 from the same queries (``sm_103``). ``family``: GFD's ``getArchFamily`` maps compute
  major 10 and 12 to ``blackwell``. NVLinks: 18 fifth-generation links (1.8 TB/s) on B200, GB200 and B300; the RTX
  PRO 6000 has none. **Not seen in a capture:** the PCIe generation (gen 5 x16 on B200, GB200 and the RTX PRO 6000,
  gen 6 x16 on B300, from NVIDIA's product pages), and GB200's power limit varies with the board's configuration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuModel:
    """One GPU product as the NVIDIA tools report it; fields are documented in the module docstring."""

    name: str
    aliases: tuple[str, ...]
    memory_mib: int
    family: str
    compute_capability: tuple[int, int]
    mig_capable: bool
    pci_device_id: str
    sm_count: int
    nvlink_links: int
    power_limit_w: int
    max_pcie_gen: int
    max_pcie_width: int


class UnknownModelError(KeyError):
    """A model name or alias the catalogue does not know; the message lists what it does know.

    A KeyError so ``except KeyError`` callers work, but with a readable ``str`` (KeyError's own would quote it).
    """

    def __init__(self, name: str) -> None:
        allowed = "; ".join(f"{m.name} ({', '.join(m.aliases)})" for m in MODELS.values())
        super().__init__(f"unknown GPU model {name!r}; known models (aliases): {allowed}")
        self.name = name

    def __str__(self) -> str:
        return str(self.args[0])


def _model(
    name: str,
    aliases: tuple[str, ...],
    memory_mib: int,
    family: str,
    cc: tuple[int, int],
    mig: bool,
    device_id: str,
    sms: int,
    nvlinks: int,
    power_w: int,
    pcie: tuple[int, int],
) -> GpuModel:
    return GpuModel(name, aliases, memory_mib, family, cc, mig, device_id, sms, nvlinks, power_w, *pcie)


_ALL = (
    _model("Tesla T4", ("T4", "Tesla-T4", "NVIDIA-T4"), 15360, "turing", (7, 5), False, "0x1EB810DE", 40, 0, 70, (3, 16)),
    _model("NVIDIA L4", ("L4", "L4-24GB"), 23034, "ada-lovelace", (8, 9), False, "0x27B810DE", 58, 0, 72, (4, 16)),
    _model("NVIDIA L40S", ("L40S", "L40S-48GB"), 46068, "ada-lovelace", (8, 9), False, "0x26B910DE", 142, 0, 350, (4, 16)),
    _model(
        "NVIDIA A100-SXM4-40GB",
        ("A100-SXM4-40GB", "A100-SXM-40GB", "A100-40GB-SXM", "A100-40GB-SXM4"),
        40960, "ampere", (8, 0), True, "0x20B010DE", 108, 12, 400, (4, 16),
    ),
    _model(
        "NVIDIA A100-SXM4-80GB",
        ("A100-SXM4-80GB", "A100-SXM-80GB", "A100-80GB-SXM", "A100-80GB-SXM4"),
        81920, "ampere", (8, 0), True, "0x20B210DE", 108, 12, 400, (4, 16),
    ),
    _model(
        "NVIDIA A100-PCIE-40GB",
        ("A100-PCIE-40GB", "A100-40GB-PCIE"),
        40960, "ampere", (8, 0), True, "0x20F110DE", 108, 0, 250, (4, 16),
    ),
    _model(
        "NVIDIA A100 80GB PCIe",
        ("A100-PCIE-80GB", "A100-80GB-PCIE"),
        81920, "ampere", (8, 0), True, "0x20B510DE", 108, 0, 300, (4, 16),
    ),
    _model("NVIDIA A30", ("A30", "A30-24GB", "A30-PCIE-24GB"), 24576, "ampere", (8, 0), True, "0x20B710DE", 56, 0, 165, (4, 16)),
    _model(
        "NVIDIA H100 80GB HBM3",
        ("H100-SXM5-80GB", "H100-SXM", "H100-SXM5", "H100-80GB-HBM3", "H100-80GB-SXM"),
        81559, "hopper", (9, 0), True, "0x233010DE", 132, 18, 700, (5, 16),
    ),
    _model(
        "NVIDIA H100 PCIe",
        ("H100-PCIE", "H100-PCIE-80GB", "H100-80GB-PCIE"),
        81559, "hopper", (9, 0), True, "0x233110DE", 114, 0, 350, (5, 16),
    ),
    _model(
        "NVIDIA H100 NVL",
        ("H100-NVL", "H100-NVL-94GB", "H100-94GB-NVL"),
        95830, "hopper", (9, 0), True, "0x232110DE", 132, 12, 400, (5, 16),
    ),
    _model(
        "NVIDIA H200",
        ("H200", "H200-SXM", "H200-SXM5", "H200-141GB", "H200-SXM5-141GB"),
        143771, "hopper", (9, 0), True, "0x233510DE", 132, 18, 700, (5, 16),
    ),
    _model(
        "NVIDIA B200",
        ("B200", "B200-SXM", "B200-SXM6", "B200-180GB", "HGX-B200"),
        183359, "blackwell", (10, 0), True, "0x290110DE", 148, 18, 1000, (5, 16),
    ),
    _model(
        "NVIDIA GB200",
        ("GB200", "GB200-186GB", "GB200-NVL72"),
        189471, "blackwell", (10, 0), True, "0x294110DE", 152, 18, 1200, (5, 16),
    ),
    _model(
        "NVIDIA B300 SXM6 AC",
        ("B300", "B300-SXM6", "B300-SXM6-AC", "B300-288GB", "HGX-B300"),
        275040, "blackwell", (10, 3), True, "0x318210DE", 148, 18, 1100, (6, 16),
    ),
    _model(
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        ("RTX-PRO-6000", "RTX-PRO-6000-Blackwell", "RTX-PRO-6000-SE", "RTX-PRO-6000-Blackwell-SE"),
        97887, "blackwell", (12, 0), True, "0x2BB510DE", 188, 0, 600, (5, 16),
    ),
)  # fmt: skip

MODELS: dict[str, GpuModel] = {m.name: m for m in _ALL}


def _key(text: str) -> str:
    """Spelling-insensitive lookup key: case, and spaces versus '-' or '_', do not matter in an inventory."""
    return re.sub(r"[\s_-]+", "-", text.strip()).lower()


def _index() -> dict[str, GpuModel]:
    index: dict[str, GpuModel] = {}
    for model in MODELS.values():
        for spelling in (model.name, sanitise_label_part(model.name), *model.aliases):
            key = _key(spelling)
            other = index.setdefault(key, model)
            if other is not model:  # an alias two models share would make inventories ambiguous
                raise AssertionError(
                    f"catalogue spelling {spelling!r} names both {other.name} and {model.name}"
                )
    return index


def lookup_model(name_or_alias: str) -> GpuModel:
    """The model an inventory names: nvidia-smi's name, the GFD product label, or an alias (any case)."""
    model = _INDEX.get(_key(name_or_alias)) if isinstance(name_or_alias, str) else None
    if model is None:
        raise UnknownModelError(name_or_alias)
    return model


def sanitise_label_part(text: str) -> str:
    """GPU feature discovery's ``sanitise``: drop characters outside ``[A-Za-z0-9-_. ]``, join words with '-'."""
    return "-".join(re.sub(r"[^A-Za-z0-9\-_. ]", "", text).split())


def product_label(model_name: str, mig_profile: str | None = None) -> str:
    """The ``nvidia.com/gpu.product`` value GFD publishes for a model (``<model>-MIG-<profile>`` for MIG).

    A known alias is first resolved to the name nvidia-smi prints, since GFD labels what the driver reports;
    an unknown name is sanitised as given so a GPU the catalogue lacks still gets GFD's label. Like GFD this
    drops characters it does not allow, so ``1g.10gb+me`` becomes ``1g.10gbme``. The ``-SHARED`` suffix
    depends on the sharing config and is the caller's to add.
    """
    try:
        name = lookup_model(model_name).name
    except UnknownModelError:
        name = model_name
    parts = [name] if mig_profile is None else [name, "MIG", mig_profile]
    return "-".join(sanitise_label_part(p) for p in parts if p)


_INDEX = _index()
