"""The Blackwell models (issue #29): the facts NVIDIA documents, checked one by one against the catalogue.

Sources (also in the docstrings of gpuready.nvidia.models and gpuready.nvidia.mig):

* NVIDIA MIG user guide, "Supported GPUs" and "Supported MIG Profiles"
  (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-gpus.html,
  https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html): compute capability, MIG
  support, the B200 and RTX PRO 6000 Blackwell profile tables (names, instance counts, copy engines, media engines).
* NVIDIA mig-parted ``deployments/systemd/config-default.yaml``: device filters and the GB200/B300 profile names.
* Public ``nvidia-smi`` tables: whole-GPU memory (MiB) and power limits.
"""

from __future__ import annotations

import pytest

from gpuready.nvidia.catalogue import (
    MODELS,
    fit_layout,
    layout_problems,
    lookup_model,
    mig_profiles,
    mig_slices,
)

BLACKWELL = {
    # name: (memory MiB, compute capability, PCI device id, SMs, power W)
    "NVIDIA B200": (183359, (10, 0), "0x290110DE", 148, 1000),
    "NVIDIA GB200": (189471, (10, 0), "0x294110DE", 152, 1200),
    "NVIDIA B300 SXM6 AC": (275040, (10, 3), "0x318210DE", 148, 1100),
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": (97887, (12, 0), "0x2BB510DE", 188, 600),
}


@pytest.mark.parametrize("name", sorted(BLACKWELL))
def test_whole_gpu_facts(name: str) -> None:
    m = MODELS[name]
    assert (m.memory_mib, m.compute_capability, m.pci_device_id, m.sm_count, m.power_limit_w) == BLACKWELL[
        name
    ]
    assert m.family == "blackwell" and m.mig_capable


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("B200", "NVIDIA B200"),
        ("gb200", "NVIDIA GB200"),
        ("B300", "NVIDIA B300 SXM6 AC"),
        ("NVIDIA-B300-SXM6-AC", "NVIDIA B300 SXM6 AC"),
        ("RTX-PRO-6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition"),
        ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "NVIDIA RTX PRO 6000 Blackwell Server Edition"),
    ],
)
def test_aliases_and_gfd_labels(alias: str, name: str) -> None:
    assert lookup_model(alias).name == name


# the guide's B200 table: profile -> (instances, copy engines, OFA); memory slices from its memory fractions
B200_GUIDE = {
    "1g.23gb": (7, 2, 0, 1),
    "1g.23gb+me": (1, 2, 1, 1),
    "1g.45gb": (4, 2, 0, 2),
    "2g.45gb": (3, 3, 0, 2),
    "3g.90gb": (2, 6, 0, 4),
    "4g.90gb": (1, 8, 0, 4),
    "7g.180gb": (1, 16, 1, 8),
}
# the guide's RTX PRO 6000 Blackwell table: profile -> (instances, CE, NVDEC, NVENC, JPEG, OFA, memory slices of 4)
RTX_PRO_GUIDE = {
    "1g.24gb": (4, 1, 1, 1, 1, 0, 1),
    "1g.24gb+me": (1, 1, 1, 1, 1, 1, 1),
    "1g.24gb+gfx": (4, 1, 1, 1, 1, 0, 1),
    "1g.24gb+me.all": (1, 1, 4, 4, 4, 1, 1),
    "1g.24gb-me": (4, 1, 0, 0, 0, 0, 1),
    "2g.48gb": (2, 2, 2, 2, 2, 0, 2),
    "2g.48gb+gfx": (2, 2, 2, 2, 2, 0, 2),
    "2g.48gb+me.all": (1, 2, 4, 4, 4, 1, 2),
    "2g.48gb-me": (2, 2, 0, 0, 0, 0, 2),
    "4g.96gb": (1, 4, 4, 4, 4, 1, 4),
    "4g.96gb+gfx": (1, 4, 4, 4, 4, 1, 4),
}


def test_b200_profiles_as_the_guide_has_them() -> None:
    profiles = mig_profiles("B200")
    assert list(profiles) == list(B200_GUIDE)
    for name, (instances, ce, ofa, slices) in B200_GUIDE.items():
        p = profiles[name]
        assert (p.max_instances, p.copy_engines, p.ofa, p.memory_slices) == (instances, ce, ofa, slices), name
    assert mig_slices("B200") == (7, 8)


def test_rtx_pro_6000_profiles_as_the_guide_has_them() -> None:
    profiles = mig_profiles("RTX-PRO-6000")
    assert list(profiles) == list(RTX_PRO_GUIDE)
    for name, row in RTX_PRO_GUIDE.items():
        p = profiles[name]
        got = (p.max_instances, p.copy_engines, p.decoders, p.encoders, p.jpeg, p.ofa, p.memory_slices)
        assert got == row, name
    assert mig_slices("RTX-PRO-6000") == (4, 4)
    # +me.all takes every media engine: only -me instances may share the GPU with it
    assert fit_layout("RTX-PRO-6000", ["1g.24gb+me.all", "1g.24gb-me", "2g.48gb-me"]) is not None
    assert any("decoders" in p for p in layout_problems("RTX-PRO-6000", ["1g.24gb+me.all", "1g.24gb"]))
    assert profiles["1g.24gb+me.all"].resource_name == "nvidia.com/mig-1g.24gb.me.all"


@pytest.mark.parametrize(
    ("model", "names"),
    [
        ("GB200", ["1g.23gb", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb"]),
        ("B300", ["1g.34gb", "1g.67gb", "2g.67gb", "3g.135gb", "4g.135gb", "7g.269gb"]),
    ],
)
def test_gb200_and_b300_profiles_from_mig_parted(model: str, names: list[str]) -> None:
    assert list(mig_profiles(model)) == names
    # mig-parted's all-balanced layouts for these parts fit
    small, two, three = names[0], names[2], names[3]
    assert fit_layout(model, [small, small, two, three]) is not None


def test_each_profile_fits_in_the_gpus_memory() -> None:
    for name in BLACKWELL:
        gpu = MODELS[name]
        for p in mig_profiles(name).values():
            gb = int(p.name.split("g.", 1)[1].split("gb")[0])
            # the name's GB is decimal, rounded: the instance holds about that much, never more than the GPU
            assert 0.9 * gb * 1000**3 < p.memory_mib * 1024**2 < 1.1 * gb * 1000**3, p.name
            assert p.memory_mib < gpu.memory_mib


def test_gpuready_models_lists_them(capsys: pytest.CaptureFixture[str]) -> None:
    from gpuready import cli

    assert cli.main(["models"]) == 0
    out = capsys.readouterr().out
    for name in BLACKWELL:
        assert name in out
    assert "1g.23gb+me" in out and "4g.96gb+gfx" in out and "7g.269gb" in out


@pytest.mark.parametrize(
    ("model", "layout"),
    [
        ("B200", ["3g.90gb", "2g.45gb", "1g.23gb", "1g.23gb"]),
        ("RTX-PRO-6000", ["2g.48gb", "1g.24gb", "1g.24gb"]),
    ],
)
def test_a_blackwell_mig_pool_in_an_inventory(tmp_path, model: str, layout: list[str]) -> None:
    from test_spec import write_inventory

    from gpuready.deploy import plan
    from gpuready.spec import load_fleet

    fleet = load_fleet(
        write_inventory(tmp_path, gpu_model=model, gpu_count=2, gpu_sharing="mig", mig_layout={0: layout})
    )
    (node,) = fleet.nodes.values()
    profiles = mig_profiles(model)
    for name in set(layout):
        resource = profiles[name].resource_name
        assert node.expected_allocatable[resource] == layout.count(name)
        assert node.expected_labels[resource + ".memory"] == str(profiles[name].memory_mib)
    assert lookup_model(model).name in plan.render_text(fleet)
