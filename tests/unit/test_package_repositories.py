"""The node deploy adds every package repository first and refreshes the apt lists once (tasks.repos): which
repositories a node's tasks install from, with which pins, on every node shape of the example inventory. The
single refresh itself (facts in, commands out) is tests/operations/apt.lists; on a lab host, test_lab_deploy and
test_lab_os (a fresh deploy, then a second one that changes nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuready.deploy.tasks import repos
from gpuready.spec import load_fleet

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("diag", [False, True])
def test_each_repository_serves_the_pins_of_every_task_that_installs_from_it(diag: bool) -> None:
    fleet = load_fleet(REPO / "inventory" / "example.py", {"diag_tools": diag})
    for name, node in fleet.nodes.items():
        wanted = repos.task_pins(node)
        packages = node.apt_packages
        assert list(wanted) == ["cuda", "nvidia-container-toolkit", "kubernetes"], name
        assert wanted["cuda"] == packages["driver"] + (packages["diag"] if diag else []), name
        assert wanted["nvidia-container-toolkit"] == packages["toolkit"], name
        assert wanted["kubernetes"] == packages["kubernetes"], name
        # containerd comes from the distribution's repository: none of these
        assert not set(packages["containerd"]) & {pin for pins in wanted.values() for pin in pins}, name
        assert set(wanted) <= set(repos.KNOBS) and set(repos.KNOBS) == set(repos.REPOSITORIES)


def test_a_driver_from_the_distribution_needs_no_cuda_repository_unless_dcgm_does() -> None:
    for diag in (False, True):
        override = {"diag_tools": diag, "nvidia_driver_source": "distribution"}
        for name, node in load_fleet(REPO / "inventory" / "example.py", override).nodes.items():
            wanted = repos.task_pins(node)
            assert ("cuda" in wanted) == diag, name
            assert not set(node.apt_packages["driver"]) & set(wanted.get("cuda", [])), name
