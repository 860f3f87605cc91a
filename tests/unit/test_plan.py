"""``gpuready plan``: the three example pools, JSON output, and exit 2 with the SpecError text on a bad inventory."""

from __future__ import annotations

import json
from pathlib import Path

from gpuready.cli import main

EXAMPLE = str(Path(__file__).resolve().parents[2] / "inventory" / "example.py")


def test_plan_prints_the_three_pools(capsys):
    assert main(["plan", EXAMPLE]) == 0
    out = capsys.readouterr().out
    assert "8 GPU node(s) in 3 distinct plan(s)" in out
    assert "(4 nodes)" in out  # the H100 training pool is one block
    assert "allocatable  nvidia.com/gpu=8\n" in out
    assert "allocatable  nvidia.com/gpu=4\n" in out
    assert "label        nvidia.com/gpu.product=NVIDIA-L4-SHARED" in out
    assert "allocatable  nvidia.com/mig-1g.10gb=8, nvidia.com/mig-2g.20gb=4, nvidia.com/mig-3g.40gb=4" in out


def test_plan_json(capsys):
    assert main(["plan", EXAMPLE, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    node = plan["nodes"]["gpu-infer-l4-01.prod.example.com"]
    assert node["expect"]["allocatable"] == {"nvidia.com/gpu": 4}
    assert node["join"]["labels"]["nvidia.com/device-plugin.config"] == "time-slicing-4"
    assert sorted(plan["device_plugin_configs"]) == ["default", "mig-mixed", "time-slicing-4"]


def test_plan_bad_inventory_exits_2_with_the_problems(tmp_path, capsys):
    (tmp_path / "inv.py").write_text("pool = [('n1', {'gpu_model': 'NVIDIA L4', 'gpu_count': 0})]\n")
    assert main(["plan", str(tmp_path / "inv.py")]) == 2
    err = capsys.readouterr().err
    assert "host n1: gpu_count = 0: must be an integer >= 1" in err
