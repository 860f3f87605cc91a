"""The gpu layer's messages name each GPU once: "GPU 3" by index, "GPU 0000:2A:00.0" by bus id (a GPU nvidia-smi
lost), never "GPU GPU ..."."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpuready.conformance.checks import Output, gpu
from gpuready.nvidia.smi import parse_query_xml
from gpuready.spec import load_fleet

REPO = Path(__file__).resolve().parents[2]
XML = REPO / "tests" / "fixtures" / "nvidia-smi-xml"
# nvidia-smi's real message (exit 15) for a GPU whose handle the driver lost
LOST = "Unable to determine the device handle for GPU0000:2A:00.0: Unknown Error\n"


@pytest.fixture(scope="module")
def fleet():
    return load_fleet(str(REPO / "inventory" / "example.py"))


@pytest.fixture
def h100(fleet):
    return fleet.nodes["gpu-train-01.prod.example.com"]


def test_a_lost_gpu_is_named_once_by_its_bus_id(h100):
    # the capture is trimmed to one of its 4 GPUs: what a node whose other GPUs fell off the bus reports
    a100 = dataclasses.replace(h100, gpu_model="NVIDIA A100-SXM4-80GB", gpu_count=4, gpu_memory_mib=81920)
    report = parse_query_xml((XML / "telegraf__a100-sxm4-v12.xml").read_text())
    lost = gpu.lost_gpus(Output(15, "", LOST))
    problems = gpu.gpus_match_spec(a100, report, lost)
    assert problems == [
        "1 GPU(s) answer of 4 attached, the inventory says 4 "
        "(GPU 0000:2A:00.0 (Unknown Error): fallen off the bus?)"
    ]
    assert not any("GPU GPU" in problem for problem in problems)


def test_several_lost_gpus_are_each_named_once(h100):
    a100 = dataclasses.replace(h100, gpu_model="NVIDIA A100-SXM4-80GB", gpu_count=4, gpu_memory_mib=81920)
    report = parse_query_xml((XML / "telegraf__a100-sxm4-v12.xml").read_text())
    stderr = LOST + "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost\n"
    problems = gpu.gpus_match_spec(a100, report, gpu.lost_gpus(Output(15, "", stderr)))
    assert problems[0].endswith(
        "(GPU 0000:2A:00.0 (Unknown Error); GPU 0000:3B:00.0 (GPU is lost): fallen off the bus?)"
    )
