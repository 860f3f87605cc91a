"""The fleet spec: derived expectations on the example inventory, and one bad inventory per validation rule."""

from __future__ import annotations

import shutil
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from gpuready.spec import SpecError, load_fleet
from gpuready.spec.knobs import KNOBS

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventory" / "example.py"

JOIN = {
    "kube_api_endpoint": "10.0.0.1:6443",
    "kube_ca_cert_hash": "sha256:" + "ab" * 32,
    "kube_join_token_file": "/nonexistent/token",
}


def write_inventory(tmp_path: Path, **host_data) -> Path:
    """An inventory of one host ``node-1`` with the project's real group_data defaults beside it. Fleet-wide knobs
    go to the pool's group data, as a user must put them."""
    (tmp_path / "group_data").mkdir(exist_ok=True)
    shutil.copy(REPO / "inventory" / "group_data" / "all.py", tmp_path / "group_data" / "all.py")
    data = {"gpu_model": "NVIDIA L4", "gpu_count": 1, **JOIN, **host_data}
    fleet = {k: data.pop(k) for k in list(data) if k in KNOBS and KNOBS[k].fleet_wide}
    path = tmp_path / "inv.py"
    path.write_text(f"pool = ([('node-1', {data!r})], {fleet!r})\n")
    return path


def problems_of(path: Path) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_fleet(path)
    return info.value.problems


# --- the example inventory ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def example():
    return load_fleet(EXAMPLE)


def test_example_has_three_pools(example):
    models = {n.gpu_model for n in example.nodes.values()}
    assert models == {"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA L4"}
    assert len(example.nodes) == 8


def test_h100_whole_gpus(example):
    node = example.nodes["gpu-train-01.prod.example.com"]
    assert node.nvswitch is True
    assert node.expected_allocatable == {"nvidia.com/gpu": 8}
    assert node.expected_labels == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.memory": str(node.model.memory_mib),
    }
    assert "nvidia-fabricmanager=580.178.04-1" in node.apt_packages["driver"]
    # CDI mode (the default): devices reach the container as CDI names through the CRI
    assert node.device_plugin_config == {
        "version": "v1",
        "flags": {"migStrategy": "none", "plugin": {"deviceListStrategy": "cdi-cri"}},
    }
    assert node.runtime_class is None and node.device_plugin_config_key == "default"
    legacy = replace(node, knobs={**node.knobs, "nvidia_cdi": False})
    assert legacy.device_plugin_config["flags"]["plugin"] == {"deviceListStrategy": "envvar"}
    assert legacy.runtime_class == "nvidia" and legacy.device_plugin_config_key == "default-envvar"


def test_l4_time_slicing(example):
    node = example.nodes["gpu-infer-l4-01.prod.example.com"]
    assert node.expected_allocatable == {"nvidia.com/gpu": 4}
    labels = node.expected_labels
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-L4-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert node.device_plugin_config["sharing"]["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/gpu", "replicas": 4}
    ]
    assert node.node_labels["nvidia.com/device-plugin.config"] == "time-slicing-4"
    assert not any("fabricmanager" in p for p in node.apt_packages["driver"])


def test_a100_mixed_mig(example):
    node = example.nodes["gpu-infer-a100-01.prod.example.com"]
    # 4 GPUs, each 3g.40gb + 2g.20gb + 2x 1g.10gb
    assert node.expected_allocatable == {
        "nvidia.com/mig-1g.10gb": 8,
        "nvidia.com/mig-2g.20gb": 4,
        "nvidia.com/mig-3g.40gb": 4,
    }
    labels = node.expected_labels
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig-1g.10gb.count"] == "8"
    assert labels["nvidia.com/mig-3g.40gb.product"] == "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"
    assert node.device_plugin_config["flags"]["migStrategy"] == "mixed"


def test_device_plugin_configmap_one_key_per_config(example):
    configs = example.device_plugin_configs()
    assert sorted(configs) == ["default", "mig-mixed", "time-slicing-4"]
    assert yaml.safe_load(configs["time-slicing-4"])["sharing"]["timeSlicing"]["renameByDefault"] is False
    for text in configs.values():
        assert yaml.safe_load(text)["version"] == "v1"


# --- derived expectations for other modes ---------------------------------------------------------------------------


def test_rename_drops_shared_suffix(tmp_path):
    fleet = load_fleet(
        write_inventory(
            tmp_path, gpu_count=2, gpu_sharing="time-slicing", sharing_replicas=3, sharing_rename=True
        )
    )
    node = fleet.nodes["node-1"]
    assert node.expected_allocatable == {"nvidia.com/gpu.shared": 6}
    assert node.expected_labels["nvidia.com/gpu.product"] == "NVIDIA-L4"


def test_mps_forces_fail_requests_greater_than_one(tmp_path):
    node = load_fleet(write_inventory(tmp_path, gpu_sharing="mps", sharing_replicas=2)).nodes["node-1"]
    assert node.device_plugin_config["sharing"]["mps"]["resources"] == [
        {"name": "nvidia.com/gpu", "replicas": 2}
    ]
    assert node.expected_labels["nvidia.com/gpu.sharing-strategy"] == "mps"


def test_mig_single(tmp_path):
    inv = write_inventory(
        tmp_path,
        gpu_model="NVIDIA H100 80GB HBM3",
        gpu_count=2,
        gpu_sharing="mig",
        mig_strategy="single",
        mig_layout=["1g.10gb"] * 7,
    )
    node = load_fleet(inv).nodes["node-1"]
    assert node.expected_allocatable == {"nvidia.com/gpu": 14}
    assert node.expected_labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    assert node.expected_labels["nvidia.com/gpu.count"] == "14"


def test_mig_mixed_per_gpu_keeps_whole_gpus(tmp_path):
    inv = write_inventory(
        tmp_path,
        gpu_model="NVIDIA A100-SXM4-80GB",
        gpu_count=4,
        gpu_sharing="mig",
        mig_layout={0: ["7g.80gb"], 1: ["3g.40gb", "3g.40gb"]},
    )
    node = load_fleet(inv).nodes["node-1"]
    assert node.expected_allocatable == {
        "nvidia.com/mig-3g.40gb": 2,
        "nvidia.com/mig-7g.80gb": 1,
        "nvidia.com/gpu": 2,
    }


def test_mig_time_slicing_of_mig_devices(tmp_path):
    inv = write_inventory(
        tmp_path,
        gpu_model="NVIDIA A100-SXM4-80GB",
        gpu_count=1,
        gpu_sharing="mig",
        mig_layout=["3g.40gb", "3g.40gb"],
        mig_sharing="time-slicing",
        mig_sharing_replicas=2,
    )
    node = load_fleet(inv).nodes["node-1"]
    assert node.expected_allocatable == {"nvidia.com/mig-3g.40gb": 4}
    assert node.device_plugin_config["sharing"]["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/mig-3g.40gb", "replicas": 2}
    ]
    assert node.expected_labels["nvidia.com/mig-3g.40gb.product"].endswith("-SHARED")


# --- validation: one bad inventory per rule, asserting the message ------------------------------------------------


def test_unknown_model_with_mig(tmp_path):
    (problem,) = problems_of(
        write_inventory(tmp_path, gpu_model="NVIDIA Z9000", gpu_sharing="mig", mig_layout=["1g.10gb"])
    )
    assert "inv.py: host node-1: gpu_model = 'NVIDIA Z9000'" in problem
    assert "unknown GPU model" in problem and "MIG needs a known model" in problem


def test_unknown_model_without_memory(tmp_path):
    (problem,) = problems_of(write_inventory(tmp_path, gpu_model="NVIDIA Z9000"))
    assert "gpu_memory_mib" in problem


def test_unknown_model_allowed_with_memory(tmp_path):
    node = load_fleet(write_inventory(tmp_path, gpu_model="NVIDIA Z9000", gpu_memory_mib=1000)).nodes[
        "node-1"
    ]
    assert node.expected_labels["nvidia.com/gpu.product"] == "NVIDIA-Z9000"
    assert node.expected_labels["nvidia.com/gpu.memory"] == "1000"


def test_mig_profile_the_model_does_not_have(tmp_path):
    problems = problems_of(
        write_inventory(tmp_path, gpu_model="NVIDIA A100-SXM4-80GB", gpu_sharing="mig", mig_layout=["1g.5gb"])
    )
    assert len(problems) == 1
    assert "mig_layout = ['1g.5gb']" in problems[0] and "1g.5gb" in problems[0]
    assert "GPU 0 (NVIDIA A100-SXM4-80GB)" in problems[0]


def test_mig_layout_that_does_not_fit(tmp_path):
    problems = problems_of(
        write_inventory(
            tmp_path, gpu_model="NVIDIA A100-SXM4-80GB", gpu_sharing="mig", mig_layout=["4g.40gb", "4g.40gb"]
        )
    )
    assert any("4g.40gb" in p for p in problems)


def test_mig_layout_over_profile_maximum(tmp_path):
    problems = problems_of(
        write_inventory(
            tmp_path, gpu_model="NVIDIA A100-SXM4-80GB", gpu_sharing="mig", mig_layout=["1g.10gb"] * 8
        )
    )
    assert problems and all("host node-1: mig_layout" in p for p in problems)


def test_mig_on_non_mig_model(tmp_path):
    (problem,) = problems_of(write_inventory(tmp_path, gpu_sharing="mig", mig_layout=["1g.10gb"]))
    assert "NVIDIA L4 does not support MIG" in problem


def test_mig_single_with_mixed_profiles(tmp_path):
    (problem,) = problems_of(
        write_inventory(
            tmp_path,
            gpu_model="NVIDIA A100-SXM4-80GB",
            gpu_sharing="mig",
            mig_strategy="single",
            mig_layout=["3g.40gb", "2g.20gb"],
        )
    )
    assert "mig_strategy 'single' needs every GPU MIG-enabled with one and the same profile" in problem


@pytest.mark.parametrize("replicas", [1, 0, "4"])
def test_time_slicing_replicas_below_two(tmp_path, replicas):
    (problem,) = problems_of(write_inventory(tmp_path, gpu_sharing="time-slicing", sharing_replicas=replicas))
    assert f"sharing_replicas = {replicas!r}: time-slicing needs an integer >= 2" in problem


def test_mps_with_mig(tmp_path):
    (problem,) = problems_of(
        write_inventory(
            tmp_path,
            gpu_model="NVIDIA A100-SXM4-80GB",
            gpu_sharing="mig",
            mig_layout=["7g.80gb"],
            mig_sharing="mps",
        )
    )
    assert "mig_sharing = 'mps': MPS is not supported on MIG devices" in problem


def test_driver_version_outside_branch(tmp_path):
    (problem,) = problems_of(write_inventory(tmp_path, nvidia_driver_version="570.86.15"))
    assert "nvidia_driver_version = '570.86.15': is outside nvidia_driver_branch '580'" in problem


def test_malformed_driver_version(tmp_path):
    (problem,) = problems_of(write_inventory(tmp_path, nvidia_driver_version="latest"))
    assert "must look like 580.178.04" in problem


@pytest.mark.parametrize(
    ("labels", "needle"),
    [
        ({"bad key!": "x"}, "the name part must be at most 63 characters"),
        ({"Example.COM/pool": "x"}, "the prefix must be a DNS subdomain"),
        ({"pool": "has space"}, "a value must be empty or at most 63 characters"),
        ({"pool": "x" * 64}, "a value must be empty or at most 63 characters"),
    ],
)
def test_malformed_labels(tmp_path, labels, needle):
    (problem,) = problems_of(write_inventory(tmp_path, node_labels=labels))
    assert "host node-1: node_labels" in problem and needle in problem


@pytest.mark.parametrize(
    ("taint", "needle"),
    [
        ("nvidia.com/gpu=present", "a taint is 'key[=value]:Effect'"),
        (
            "nvidia.com/gpu=present:NoRun",
            "effect 'NoRun' is not one of NoSchedule, PreferNoSchedule, NoExecute",
        ),
        ("bad key:NoSchedule", "the name part"),
    ],
)
def test_malformed_taints(tmp_path, taint, needle):
    (problem,) = problems_of(write_inventory(tmp_path, node_taints=[taint]))
    assert f"node_taints = {taint!r}" in problem and needle in problem


@pytest.mark.parametrize("count", [0, -1, 1.5, None])
def test_non_positive_gpu_count(tmp_path, count):
    problems = problems_of(write_inventory(tmp_path, gpu_count=count))
    assert any(f"gpu_count = {count!r}: must be an integer >= 1" in p for p in problems)


def test_missing_join_settings(tmp_path):
    inv = write_inventory(tmp_path, kube_api_endpoint=None, kube_ca_cert_hash="md5:abc")
    problems = problems_of(inv)
    assert any("kube_api_endpoint = None: a node that joins needs the API endpoint" in p for p in problems)
    assert any("kube_ca_cert_hash = 'md5:abc'" in p for p in problems)


def test_no_join_needs_no_join_settings(tmp_path):
    inv = write_inventory(tmp_path, kube_join=False, kube_api_endpoint=None, kube_ca_cert_hash=None)
    assert load_fleet(inv).nodes["node-1"].join.enabled is False


def test_every_problem_reported_at_once(tmp_path):
    inv = write_inventory(
        tmp_path, gpu_count=0, gpu_sharing="time-slicing", sharing_replicas=1, node_taints=["x:Never"]
    )
    problems = problems_of(inv)
    assert len(problems) == 3


def test_default_value_names_group_data_file(tmp_path):
    # the bad value comes from group_data/all.py, so the message must send the user there
    (tmp_path / "group_data").mkdir()
    all_py = (REPO / "inventory" / "group_data" / "all.py").read_text()
    (tmp_path / "group_data" / "all.py").write_text(all_py.replace('"580.178.04"', '"999.1.1"'))
    data = {"gpu_model": "NVIDIA L4", "gpu_count": 1, **JOIN}
    (tmp_path / "inv.py").write_text(f"pool = ([('node-1', {data!r})], {{}})\n")
    (problem,) = problems_of(tmp_path / "inv.py")
    assert problem.startswith(f"{tmp_path / 'group_data' / 'all.py'}: host node-1: nvidia_driver_version")


def test_missing_inventory_file(tmp_path):
    (problem,) = problems_of(tmp_path / "nope.py")
    assert "does not exist" in problem


def test_inventory_with_python_error(tmp_path):
    (tmp_path / "inv.py").write_text(textwrap.dedent("pool = [undefined_name]\n"))
    (problem,) = problems_of(tmp_path / "inv.py")
    assert "NameError" in problem


def test_mig_media_extension_profile_label_follows_gfd_sanitising(tmp_path):
    inv = write_inventory(
        tmp_path, gpu_model="NVIDIA H100 80GB HBM3", gpu_count=1, gpu_sharing="mig", mig_layout=["1g.10gb+me"]
    )
    node = load_fleet(inv).nodes["node-1"]
    assert node.expected_allocatable == {"nvidia.com/mig-1g.10gb.me": 1}
    assert node.expected_labels["nvidia.com/mig-1g.10gb.me.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gbme"


def test_diag_knobs_default(tmp_path):
    node = load_fleet(write_inventory(tmp_path)).nodes["node-1"]
    assert (node.diag.dcgm_level, dict(node.diag.floors)) == (1, {})


def test_diag_knobs_override(tmp_path):
    inventory = write_inventory(
        tmp_path, diag_dcgm_level=2, diag_bandwidth_floors={"h2d_gbps": 20, "peer_gbps": 300.5}
    )
    node = load_fleet(inventory).nodes["node-1"]
    assert (node.diag.dcgm_level, dict(node.diag.floors)) == (2, {"h2d_gbps": 20.0, "peer_gbps": 300.5})


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"diag_dcgm_level": 4}, "diag_dcgm_level = 4: must be 1, 2 or 3"),
        ({"diag_dcgm_level": True}, "diag_dcgm_level = True: must be 1, 2 or 3"),
        ({"diag_bandwidth_floors": {"h2d": 20}}, "unknown key 'h2d': allowed h2d_gbps, d2h_gbps, peer_gbps"),
        ({"diag_bandwidth_floors": {"d2h_gbps": -1}}, "d2h_gbps must be a number of GB/s > 0, not -1"),
        ({"diag_bandwidth_floors": [20]}, "diag_bandwidth_floors = [20]: must be a dict"),
    ],
)
def test_bad_diag_knobs_are_refused_naming_host_key_and_value(tmp_path, data, words):
    problems = problems_of(write_inventory(tmp_path, **data))
    assert len(problems) == 1 and "host node-1:" in problems[0] and words in problems[0], problems


def test_the_first_device_plugin_config_drops_no_resource_the_node_config_advertises(example, tmp_path):
    """config-manager starts every plugin on ``default`` before the node's own key (Fleet.device_plugin_configs);
    on a MIG ``mixed`` node a ``none`` default would register ``nvidia.com/gpu`` for the MIG GPUs, which the
    kubelet keeps in capacity for 5 minutes after the node's config drops it. Where every MIG pool is ``mixed``
    the default is ``mixed`` too; otherwise it stays ``none``."""
    default = yaml.safe_load(example.device_plugin_configs()["default"])
    assert default["flags"] == {"migStrategy": "mixed", "plugin": {"deviceListStrategy": "cdi-cri"}}
    plain = load_fleet(write_inventory(tmp_path, gpu_count=2))
    assert yaml.safe_load(plain.device_plugin_configs()["default"])["flags"]["migStrategy"] == "none"
