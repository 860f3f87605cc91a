"""The virtual nodes the lab registers for KWOK: what KWOK needs of them, checked without a cluster (the cluster
tests run them: tests/kube)."""

from __future__ import annotations

import pytest
import yaml

from gpuready.lab.cluster import kwok


@pytest.mark.parametrize("profile", sorted(kwok.PROFILES))
def test_a_virtual_node_is_kwoks_and_survives_its_templates(profile: str) -> None:
    node = kwok.node_object("vn-0001", profile, 1, "v1.36.3", "10.213.128.2")
    assert node["metadata"]["annotations"] == {kwok.ANNOTATION: kwok.MANAGED}
    assert node["status"]["capacity"] == kwok.PROFILES[profile]["capacity"]
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "vn-0001"
    # KWOK's node-initialize writes each nodeInfo value unquoted into YAML: each must read back as the same string
    # (an all-digit machineID came back a number, and KWOK refused the node: "cannot unmarshal number")
    for key, value in node["status"]["nodeInfo"].items():
        if value:
            assert yaml.safe_load(f"{key}: {value}") == {key: value}, (key, value)


def test_an_unknown_profile_is_refused_with_the_known_ones() -> None:
    with pytest.raises(
        ValueError, match=r"unknown virtual node profile 'h200'; known: a100-pcie-4, cpu, dgx-h100"
    ):
        kwok.node_object("vn-0001", "h200", 1, "v1.36.3", "10.213.128.2")


@pytest.mark.parametrize(("grace", "seconds"), [("40s", 40), ("6s", 6), ("300s", 40), ("0.5s", 1)])
def test_the_lease_lasts_the_grace_period_at_most_a_kubelets(grace: str, seconds: int) -> None:
    # KWOK renews every quarter of it, so a live virtual node renews well inside the node-monitor grace period
    assert kwok.lease_seconds(grace) == seconds
