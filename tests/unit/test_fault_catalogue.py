"""Each lab fault is defined once, in gpuready.lab.faults: its row in FAULTS names it and declares its effects,
and every renderer (the emulated tools, the node agent, kernel_files, the Go machine package behind the mock
NVML and CUDA) reads the effects, never a fault's name."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("name", FAULTS)
def test_each_fault_has_effects_and_injects_them(name):
    spec = FAULTS[name]
    assert spec.effects != Effects(), f"{name} does nothing"
    host_only = {"fabric_failed", "driver_mismatch"}
    changed = {f.name for f in dataclasses.fields(Effects) if getattr(spec.effects, f.name) != f.default}
    assert (changed <= host_only) == (not spec.per_gpu), (name, changed)
    hw = next(h for h in map(_injected(name), hardware.PROFILES) if h is not None)
    (line,) = hw["faults"]
    assert line["effects"] == spec.effects.as_dict()
    assert faults.combined_effects(hw, line["gpu"]) == spec.effects
    # a line written by hand, without effects, has its catalogue row's
    assert faults.effects_of({"fault": name, "gpu": line["gpu"]}) == spec.effects


def test_the_emulated_tools_combine_every_effect_from_its_no_fault_value():
    """nvemu.COMBINE is the one table of combining rules (faults.Effects.combined uses it): every effect, and its
    value without a fault is the dataclass default."""
    assert list(nvemu.COMBINE) == list(EFFECT_FIELDS)
    assert {name: none for name, (_rule, none) in nvemu.COMBINE.items()} == Effects().as_dict()


def test_effects_combine():
    a = Effects(xid=48, ecc_uncorrected=1, dbe_remapped=1)
    b = Effects(ecc_uncorrected=2, bandwidth_factor=0.4, pcie_gen_drop=2, pcie_width_divisor=2)
    both = Effects.combined([a, b])
    assert (both.xid, both.ecc_uncorrected, both.dbe_remapped) == (48, 3, 1)
    assert (both.bandwidth_factor, both.pcie_gen_drop, both.pcie_width_divisor) == (0.4, 2, 2)
    assert Effects.combined([]) == Effects()


@pytest.mark.parametrize("name", FAULTS)
def test_the_kernel_logs_the_xid_of_the_effects(name):
    spec = FAULTS[name]
    assert spec.xid_log.split(",")[0] == (str(spec.effects.xid) if spec.effects.xid else "")
