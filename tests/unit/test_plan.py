"""``gpuready plan``: the three example pools, JSON output, and exit 2 with the SpecError text on a bad inventory."""

from __future__ import annotations

import json
import shutil
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


def test_plan_names_known_vulnerabilities_of_the_pins(tmp_path, capsys):
    data = {
        "gpu_model": "NVIDIA L4",
        "gpu_count": 1,
        "kube_join": False,
        "nvidia_container_toolkit_version": "1.17.3",
        "nvidia_driver_version": "580.178.04",
        "nvidia_cdi": False,  # CDI mode refuses a toolkit without the refresh units (tested below)
    }
    (tmp_path / "group_data").mkdir()
    shutil.copy(Path(EXAMPLE).parent / "group_data" / "all.py", tmp_path / "group_data" / "all.py")
    (tmp_path / "inv.py").write_text(f"pool = [('n1', {data!r})]\n")
    assert main(["plan", str(tmp_path / "inv.py")]) == 0  # a warning: the plan is still printed
    err = capsys.readouterr().err
    assert (
        "nvidia_container_toolkit_version = '1.17.3' (n1): NVIDIA Container Toolkit 1.17.3 is affected by"
        in err
    )
    assert "CVE-2025-23266" in err and "(fixed in 1." in err
    assert "nvidia_driver_version" not in err  # 580.178.04 has no advisory in the table
    assert main(["plan", str(tmp_path / "inv.py"), "--json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["security_warnings"]
    assert len(warnings) == 1 and "CVE-2025-23266" in warnings[0]


def test_plan_refuses_a_toolkit_cdi_mode_cannot_use(tmp_path, capsys):
    """CDI mode (the default) needs the refresh units (1.18+) and refuses 1.18.0, whose containerd drop-in
    overwrote the user's imports."""
    (tmp_path / "group_data").mkdir()
    shutil.copy(Path(EXAMPLE).parent / "group_data" / "all.py", tmp_path / "group_data" / "all.py")
    for version, words in (
        ("1.18.0", "overwrites the top-level imports"),
        ("1.17.3", "needs toolkit >= 1.18.1"),
    ):
        data = {"gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": False}
        data["nvidia_container_toolkit_version"] = version
        inventory = tmp_path / f"inv_{version.replace('.', '_')}.py"
        inventory.write_text(f"pool = [('n1', {data!r})]\n")
        assert main(["plan", str(inventory)]) == 2
        err = capsys.readouterr().err
        assert f"host n1: nvidia_container_toolkit_version = '{version}': with nvidia_cdi = True:" in err
        assert words in err and "set nvidia_cdi = False" in err
