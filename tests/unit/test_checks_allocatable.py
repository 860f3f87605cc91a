"""node/test_allocatable's messages: what a short allocatable says about the device plugin and the kubelet."""

from __future__ import annotations

from pathlib import Path

from gpuready.conformance.checks.node import gpu_resources
from gpuready.spec import load_fleet

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "example.py"
H100 = "gpu-train-01.prod.example.com"  # 8 whole GPUs


def node_object(capacity: int, allocatable: int) -> dict:
    return {
        "status": {
            "capacity": {"nvidia.com/gpu": str(capacity)},
            "allocatable": {"nvidia.com/gpu": str(allocatable)},
        }
    }


def test_healthy_node_has_no_problem():
    node = load_fleet(EXAMPLE).nodes[H100]
    assert gpu_resources(node, node_object(8, 8), "allocatable") == []


def test_none_allocatable_names_the_kubelet_dropping_a_running_plugin():
    node = load_fleet(EXAMPLE).nodes[H100]
    [problem] = gpu_resources(node, node_object(8, 0), "allocatable")
    assert problem.startswith("allocatable nvidia.com/gpu = 0, expected 8")
    assert "none of the 8 in capacity is usable" in problem
    assert "kubernetes/kubernetes#121994: delete the node's device plugin pod" in problem


def test_some_unhealthy_counts_them():
    node = load_fleet(EXAMPLE).nodes[H100]
    [problem] = gpu_resources(node, node_object(8, 7), "allocatable")
    assert "1 of 8 in capacity marked unhealthy by the device plugin" in problem
    assert "121994" not in problem
