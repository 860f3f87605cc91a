"""Bandwidth floors: theoretical PCIe/NVLink figures, floors below them, inventory overrides."""

from __future__ import annotations

import pytest

from gpuready.lab import hardware
from gpuready.nvidia import bandwidth
from gpuready.nvidia.bandwidth import Floors, floors_for


@pytest.mark.parametrize(
    ("gen", "width", "gbps"),
    [
        (1, 16, 4.0),
        (2, 16, 8.0),
        (3, 16, 15.754),
        (4, 16, 31.508),
        (5, 16, 63.015),
        (6, 16, 118.0),
        (4, 8, 15.754),
        (3, 1, 0.985),
    ],
)
def test_pcie_theoretical(gen: int, width: int, gbps: float) -> None:
    assert bandwidth.pcie_theoretical_gbps(gen, width) == pytest.approx(gbps, abs=1e-3)


@pytest.mark.parametrize(
    ("gen", "healthy_measured"),
    [
        (3, 13.11),  # DCGM pcie plugin, Gen3 x16 (microsoft/VirtualClient capture)
        (4, 25.94),  # nvbandwidth host_to_device, Gen4 x16 (Azure/azurehpc-health-checks test data)
        (5, 55.6),  # DCGM 4.4.1 pcie plugin rx on B200 (NVIDIA/DCGM#253)
    ],
)
def test_pcie_floor_is_below_theoretical_and_below_healthy_measurements(
    gen: int, healthy_measured: float
) -> None:
    floor = bandwidth.pcie_floor_gbps(gen, 16)
    assert floor == pytest.approx(0.7 * bandwidth.pcie_theoretical_gbps(gen, 16))
    assert floor < healthy_measured < bandwidth.pcie_theoretical_gbps(gen, 16)
    # A link trained at half width cannot reach the floor of the full link.
    assert bandwidth.pcie_theoretical_gbps(gen, 8) < floor


def test_pcie_floor_fraction() -> None:
    assert bandwidth.DEFAULT_PCIE_FRACTION == 0.7
    assert bandwidth.pcie_floor_gbps(5, 16, fraction=0.8) == pytest.approx(50.412, abs=1e-3)
    for bad in (0, -0.1, 1.5, True, "0.7"):
        with pytest.raises(ValueError, match="fraction"):
            bandwidth.pcie_floor_gbps(5, 16, fraction=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("gen", "width"), [(0, 16), (7, 16), (5, 3), (5, 0), (True, 16)])
def test_pcie_bad_link_is_rejected(gen: int, width: int) -> None:
    with pytest.raises(ValueError, match="PCIe"):
        bandwidth.pcie_theoretical_gbps(gen, width)


@pytest.mark.parametrize(
    ("architecture", "generation"),
    [
        ("Hopper", 4),
        ("Ampere", 3),
        ("Volta", 2),
        ("Blackwell", 5),
        (" hopper ", 4),
        ("Ada Lovelace", None),
        ("Turing", None),
        ("", None),
    ],
)
def test_nvlink_generation(architecture: str, generation: int | None) -> None:
    assert bandwidth.nvlink_generation(architecture) == generation


def test_nvlink_figures() -> None:
    assert bandwidth.nvlink_theoretical_gbps(4, 18) == 450.0  # H100: "900 GB/s" bidirectional
    assert bandwidth.nvlink_theoretical_gbps(3, 12) == 300.0  # A100: "600 GB/s"
    assert bandwidth.nvlink_theoretical_gbps(2, 6) == 150.0  # V100: "300 GB/s"
    assert bandwidth.nvlink_theoretical_gbps(5, 18) == 900.0  # B200: "1.8 TB/s"
    # 8x H100 measured 370-373 GB/s GPU to GPU with nvbandwidth; the floor sits below that.
    assert bandwidth.nvlink_peer_floor_gbps(4, 18) == pytest.approx(315.0)
    assert bandwidth.nvlink_peer_floor_gbps(4, 18) < 370.0 < 450.0
    with pytest.raises(ValueError, match="NVLink generation"):
        bandwidth.nvlink_peer_floor_gbps(1, 4)
    with pytest.raises(ValueError, match="NVLink count"):
        bandwidth.nvlink_peer_floor_gbps(4, 0)


def test_floors_for_nvswitch_and_pcie_only_models() -> None:
    h100 = floors_for("Hopper", 5, 16, 18)
    assert h100 == Floors(
        h2d_gbps=pytest.approx(44.11, abs=0.01), d2h_gbps=pytest.approx(44.11, abs=0.01), peer_gbps=315.0
    )
    l40s = floors_for("Ada Lovelace", 4, 16, 0)
    assert l40s.peer_gbps is None
    assert l40s.h2d_gbps == l40s.d2h_gbps == pytest.approx(22.06, abs=0.01)
    # An NVLink architecture without links (a PCIe card) has no peer floor either.
    assert floors_for("Hopper", 5, 16, 0).peer_gbps is None


@pytest.mark.parametrize("profile", sorted(hardware.PROFILES))
def test_every_lab_profile_has_floors_below_its_links(profile: str) -> None:
    gpu = hardware.make_hardware(profile, 0)["gpus"][0]
    floors = floors_for(gpu["architecture"], gpu["max_pcie_gen"], gpu["max_pcie_width"], gpu["nvlink_links"])
    assert 0 < floors.h2d_gbps < bandwidth.pcie_theoretical_gbps(gpu["max_pcie_gen"], gpu["max_pcie_width"])
    assert (floors.peer_gbps is not None) == (gpu["nvlink_links"] > 0)


def test_overrides_replace_defaults() -> None:
    floors = floors_for("Hopper", 5, 16, 18, overrides={"h2d_gbps": 52, "peer_gbps": 335.0})
    assert floors.h2d_gbps == 52.0
    assert floors.d2h_gbps == pytest.approx(44.11, abs=0.01)
    assert floors.peer_gbps == 335.0
    assert floors_for("Ada Lovelace", 4, 16, 0, overrides={"peer_gbps": 20}).peer_gbps == 20.0


def test_unknown_override_key_names_key_and_allowed_keys() -> None:
    with pytest.raises(ValueError) as err:
        floors_for("Hopper", 5, 16, 18, overrides={"h2d": 50.0})
    assert (
        str(err.value)
        == "unknown bandwidth floor override 'h2d'; allowed keys: h2d_gbps, d2h_gbps, peer_gbps"
    )


@pytest.mark.parametrize("value", [0, -1.0, "52", None, True])
def test_bad_override_value(value: object) -> None:
    with pytest.raises(ValueError, match="'d2h_gbps' must be a positive number of GB/s"):
        floors_for("Hopper", 5, 16, 18, overrides={"d2h_gbps": value})  # type: ignore[dict-item]
