"""Image CUDA versus driver CUDA: the tag parser, the branch table, the gpu-layer check and the plan warning."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpuready.conformance.checks import CannotCheck, gpu
from gpuready.nvidia import cuda
from gpuready.nvidia.smi import SmiReport
from gpuready.spec import load_fleet

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "example.py"


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04", (12, 5)),
        ("nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", (12, 4)),
        ("registry.example.com:5000/nvidia/cuda:13.0.1-runtime-ubuntu24.04", (13, 0)),
        ("registry.example.com:5000/mirror/cuda-sample:vectoradd-cuda11.7.1", (11, 7)),
        ("nvcr.io/nvidia/cuda@sha256:" + "a" * 64, None),
        ("docker.io/library/busybox:1.36", None),
    ],
)
def test_image_cuda_from_the_tag(image: str, version: tuple[int, int] | None) -> None:
    assert cuda.image_cuda(image) == version


def test_driver_branch_to_cuda() -> None:
    assert cuda.driver_cuda("580.178.04") == (13, 0)
    assert cuda.driver_cuda("570.195.03") == (12, 8)
    assert cuda.driver_cuda("550.163.01") == (12, 4)
    assert cuda.driver_cuda("596.10") == (13, 2)  # a newer branch than the table: at least the newest known
    assert cuda.driver_cuda("470.256.02") is None
    assert cuda.parse("13.0") == (13, 0) and cuda.parse(None) is None


def test_gpu_check_compares_each_image_with_nvidia_smi() -> None:
    node = next(iter(load_fleet(str(EXAMPLE)).nodes.values()))
    report = SmiReport(driver_version="550.163.01", cuda_version="12.4", attached_gpus=0, gpus=())
    assert gpu.image_cuda(node, report) == [
        f"vectoradd_image {node.images.vectoradd} needs CUDA 12.5, the driver here supports CUDA 12.4 "
        "(nvidia-smi, driver 550.163.01)"
    ]
    assert gpu.image_cuda(node, replace(report, cuda_version="13.0")) == []
    with pytest.raises(CannotCheck, match="no CUDA version"):
        gpu.image_cuda(node, replace(report, cuda_version=None))


def test_plan_warns_once_per_driver_and_image_when_the_pin_is_too_old() -> None:
    fleet = load_fleet(str(EXAMPLE))
    assert fleet.cuda_warnings() == []
    old = next(iter(fleet.nodes.values()))
    fleet.nodes[old.name] = replace(old, versions=replace(old.versions, driver="550.163.01"))
    assert fleet.cuda_warnings() == [
        f"vectoradd_image = {old.images.vectoradd!r} needs CUDA 12.5, but nvidia_driver_version = '550.163.01' "
        f"({old.name}) supports CUDA 12.4 at most: its pods would fail there"
    ]
