"""Each lab fault is defined once, in gpuready.lab.faults: its row in FAULTS names it and declares its effects,
and every renderer (the Go machine package behind the mock NVML and CUDA and the static tools, and, through its
``lab-view``, kernel_files and the lab's dcgm-exporter) reads the effects, never a fault's name. The effects of
several faults are combined once, by the Go package."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from static_tools import static_tools

from gpuready.lab import faults, hardware
from gpuready.lab.emulator import nvemu
from gpuready.lab.faults import EFFECT_FIELDS, FAULTS, Effects

LAB = Path(faults.__file__).parent
MACHINE_GO = LAB / "silicon" / "machine" / "machine.go"
GO_RENDERERS = sorted(p for p in (LAB / "silicon").rglob("*.go") if not p.name.endswith("_test.go"))


def _sources() -> list[Path]:
    return sorted(p for p in LAB.rglob("*") if p.suffix in (".py", ".go") and p != Path(faults.__file__))


def test_no_fault_name_outside_the_catalogue():
    found = [
        f"{path.relative_to(LAB)}:{text.count(chr(10), 0, m.start()) + 1}: {name}"
        for path in _sources()
        for text in [path.read_text()]
        for name in FAULTS
        for m in re.finditer(re.escape(name), text)
    ]
    assert not found, "fault names outside faults.py (render effects instead):\n" + "\n".join(found)


def _go_fields() -> dict[str, str]:
    """json tag -> Go field name of machine.Effects."""
    body = re.search(r"type Effects struct \{(.*?)\n\}", MACHINE_GO.read_text(), re.S)
    assert body, "machine.go has no Effects struct"
    return {tag: name for name, tag in re.findall(r'^\s*(\w+)\s+\S+\s+`json:"(\w+)"`', body.group(1), re.M)}


def test_go_decodes_every_effect():
    assert sorted(_go_fields()) == sorted(EFFECT_FIELDS)


@pytest.mark.parametrize("field", EFFECT_FIELDS)
def test_each_effect_is_rendered(field):
    # the Go silicon module (package machine behind the mock NVML and CUDA, and the static tools: nvidia-smi,
    # dcgmi, nvbandwidth) reads it outside machine's Effects struct and the combining of effects
    go_name = _go_fields()[field]
    text = "\n".join(
        re.sub(
            r"type Effects struct \{.*?\n\}|func \(c Effects\) combine.*?\n\}", "", p.read_text(), flags=re.S
        )
        for p in GO_RENDERERS
    )
    go = re.search(rf"\.{go_name}\b", text)
    assert go, f"effect {field!r}: the Go machine package ignores it"


def _injected(name: str):
    def inject(profile: str) -> dict | None:
        try:
            return faults.apply_fault(hardware.make_hardware(profile, 0), name, None)
        except faults.FaultError:
            return None

    return inject


def _view(tmp_path: Path, hw: dict) -> dict:
    """The machine as kernel_files and the lab's dcgm-exporter read it: package machine's View (lab-view)."""
    hardware.write_hardware(tmp_path / "hardware.json", hw)
    return nvemu.read_view(Path(static_tools()), tmp_path / "hardware.json", None, "boot-1")


@pytest.mark.parametrize("name", FAULTS)
def test_each_fault_has_effects_and_injects_them(name, tmp_path):
    spec = FAULTS[name]
    assert spec.effects != Effects(), f"{name} does nothing"
    host_only = {"fabric_failed", "driver_mismatch"}
    changed = {f.name for f in dataclasses.fields(Effects) if getattr(spec.effects, f.name) != f.default}
    assert (changed <= host_only) == (not spec.per_gpu), (name, changed)
    hw = next(h for h in map(_injected(name), hardware.PROFILES) if h is not None)
    (line,) = hw["faults"]
    assert line["effects"] == spec.effects.as_dict()
    view = _view(tmp_path, hw)
    on = view["host_effects"] if line["gpu"] is None else view["gpus"][line["gpu"]]["effects"]
    assert on == spec.effects.as_dict()


def test_without_a_fault_every_effect_reads_its_default(tmp_path):
    """Package machine's healthy Effects are the dataclass defaults, field for field, on the host and every GPU."""
    view = _view(tmp_path, hardware.make_hardware("h100-sxm-8", 0))
    assert view["host_effects"] == Effects().as_dict()
    assert all(g["effects"] == Effects().as_dict() for g in view["gpus"])
    assert list(view["host_effects"]) == list(EFFECT_FIELDS)


def test_effects_combine(tmp_path):
    """Two fault lines on one GPU: flags OR, counts add, the worst link and bandwidth, the largest XID."""
    a = Effects(xid=48, ecc_uncorrected=1, dbe_remapped=1)
    b = Effects(ecc_uncorrected=2, bandwidth_factor=0.4, pcie_gen_drop=2, pcie_width_divisor=2, xid=31)
    hw = hardware.make_hardware("h100-sxm-8", 0)
    hw["faults"] = [
        {"fault": "a", "gpu": 1, "effects": a.as_dict()},
        {"fault": "b", "gpu": 1, "effects": b.as_dict()},
    ]
    view = _view(tmp_path, hw)
    both = Effects(**view["gpus"][1]["effects"])
    assert (both.xid, both.ecc_uncorrected, both.dbe_remapped) == (48, 3, 1)
    assert (both.bandwidth_factor, both.pcie_gen_drop, both.pcie_width_divisor) == (0.4, 2, 2)
    assert view["gpus"][1]["xids"] == [48, 31]
    assert Effects(**view["gpus"][0]["effects"]) == Effects()


@pytest.mark.parametrize("name", FAULTS)
def test_the_kernel_logs_the_xid_of_the_effects(name):
    spec = FAULTS[name]
    assert spec.xid_log.split(",")[0] == (str(spec.effects.xid) if spec.effects.xid else "")
