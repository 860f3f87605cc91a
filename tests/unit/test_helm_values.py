"""``gpuready values``: the spec as Helm values for NVIDIA's device plugin, dcgm-exporter and GPU Operator charts.

Every key path written is checked against the key set of the chart version recorded in
gpuready/deploy/chart_keys.py (the version docs/helm-values.md names); each sharing mode maps to the device-plugin
config the spec derives; taints become tolerations; what a chart cannot express comes back as a warning."""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

import pytest
import yaml

from gpuready.deploy import chart_keys, helm_values
from gpuready.deploy.chart_keys import CHARTS, DCGM_EXPORTER, DEVICE_PLUGIN, GPU_OPERATOR
from gpuready.spec import load_fleet

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventory" / "example.py"
DOCS = REPO / "docs" / "helm-values.md"
JOIN = {
    "kube_api_endpoint": "10.0.0.1:6443",
    "kube_ca_cert_hash": "sha256:" + "ab" * 32,
    "kube_join_token_file": "/nonexistent/token",
}
A100 = {"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_count": 2}

# One pool per sharing mode, plus DRA and extra taints: what every key-set and mapping test renders.
POOLS = {
    "whole": ({"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "node_labels": {"pool": "whole"}}, 2),
    "ts": (
        {"gpu_model": "NVIDIA L4", "gpu_count": 1, "gpu_sharing": "time-slicing", "sharing_replicas": 4,
         "node_labels": {"pool": "ts"},
         "node_taints": ["nvidia.com/gpu=present:NoSchedule", "dedicated=inference:NoExecute", "gpu-only:NoSchedule"]},
        1,
    ),
    "mps": (
        {"gpu_model": "NVIDIA L4", "gpu_count": 1, "gpu_sharing": "mps", "sharing_replicas": 2,
         "node_labels": {"pool": "mps"}},
        1,
    ),
    "migsingle": (
        {**A100, "gpu_sharing": "mig", "mig_strategy": "single", "mig_layout": ["3g.40gb", "3g.40gb"],
         "node_labels": {"pool": "migsingle"}},
        1,
    ),
    "migmixed": (
        {**A100, "gpu_sharing": "mig", "mig_strategy": "mixed", "mig_layout": ["3g.40gb", "2g.20gb", "1g.10gb"],
         "mig_sharing": "time-slicing", "mig_sharing_replicas": 2, "node_labels": {"pool": "migmixed"}},
        1,
    ),
    "dra": ({"gpu_model": "NVIDIA L4", "gpu_count": 2, "gpu_allocation": "dra", "node_labels": {"pool": "dra"}}, 1),
}  # fmt: skip


def write_fleet(tmp_path: Path, pools: dict, fleet_wide: dict | None = None) -> Path:
    """An inventory of pyinfra groups, one per pool (hosts <pool>-<i>), with the real group_data beside it."""
    (tmp_path / "group_data").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "inventory" / "group_data" / "all.py", tmp_path / "group_data" / "all.py")
    lines = []
    for name, (data, count) in pools.items():
        hosts = [f"{name}-{i}" for i in range(1, count + 1)]
        group_data = {**JOIN, **data, **(fleet_wide or {})}
        lines.append(f"{name} = ({hosts!r}, {group_data!r})")
    path = tmp_path / "inv.py"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def rendered(tmp_path):
    return helm_values.render(load_fleet(write_fleet(tmp_path, POOLS)))


def fleets(tmp_path):
    """Every fleet the key-set test renders: the example, the one of every mode, and variants of knobs."""
    yield load_fleet(EXAMPLE)
    yield load_fleet(write_fleet(tmp_path / "all", POOLS))
    yield load_fleet(
        write_fleet(
            tmp_path / "variants",
            {k: POOLS[k] for k in ("ts", "migmixed")},
            {
                "nvidia_cdi": False,
                "containerd_nvidia_default_runtime": True,
                "device_plugin_image": "registry.example.com/nvidia/k8s-device-plugin@sha256:" + "a" * 64,
                "gfd_image": "registry.example.com/nvidia/gfd:v0.20.0@sha256:" + "b" * 64,
                "dcgm_exporter_image": "registry.example.com:5000/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04",
                "gpu_resource_quotas": {"ml": 4},
                "priority_classes": {"gpu-high": 1000},
                "addons_nfd": False,
            },
        )
    )


# --- the recorded key sets ------------------------------------------------------------------------------------------


def test_every_key_written_is_in_the_recorded_chart_version(tmp_path):
    checked = set()
    for fleet in fleets(tmp_path):
        for v in helm_values.render(fleet).values:
            assert helm_values.unknown_keys(v) == [], f"{v.chart.chart} {v.chart.version} (pool {v.pool})"
            checked |= {(v.chart.chart, ".".join(p)) for p in helm_values.key_paths(v.values)}
    # every chart was exercised, with the keys that carry the spec
    for chart, path in [
        ("nvidia-device-plugin", "config.map.time-slicing-4"),
        ("nvidia-device-plugin", "devicePlugin.enabled"),
        ("nvidia-device-plugin", "nfd.worker.tolerations"),
        ("dcgm-exporter", "kubernetesDRA.enabled"),
        ("gpu-operator", "mig.strategy"),
        ("gpu-operator", "draDriver.version"),
        ("gpu-operator", "node-feature-discovery.worker.tolerations"),
    ]:
        assert (chart, path) in checked


def test_the_key_check_catches_a_key_the_chart_does_not_have():
    assert DEVICE_PLUGIN.unknown(("migStrategy",)) is None
    # config.map is free-form
    assert DEVICE_PLUGIN.unknown(("config", "map", "anything-a-user-names")) is None
    assert DEVICE_PLUGIN.unknown(("nodeSelector", "pool")) is None
    # the config file's key, not the chart's
    assert DEVICE_PLUGIN.unknown(("sharing", "timeSlicing")) == "sharing"
    assert DEVICE_PLUGIN.unknown(("gfd", "enable")) == "gfd.enable"  # a typo below a recorded key
    assert GPU_OPERATOR.unknown(("devicePlugin", "config", "data", "x")) is None
    assert GPU_OPERATOR.unknown(("mig", "strategy")) is None
    # the device plugin chart's name, not this one's
    assert GPU_OPERATOR.unknown(("migStrategy",)) == "migStrategy"
    assert DCGM_EXPORTER.unknown(("kubernetes", "enableDRA")) == "kubernetes.enableDRA"
    bad = helm_values.Values(DCGM_EXPORTER, {"image": {"digest": "sha256:x"}, "tolerations": []}, "p", ["n"])
    assert helm_values.unknown_keys(bad) == ["image.digest"]


def test_recorded_facts_name_their_source():
    for chart in CHARTS.values():
        assert re.fullmatch(r"[0-9a-f]{40}", chart.commit)
        assert chart.source.startswith("github.com/NVIDIA/") and chart.source.endswith("values.yaml")
        assert chart.helm_repo.startswith("https://")
        assert len(chart.keys) > 50
    assert (DEVICE_PLUGIN.version, DCGM_EXPORTER.version, GPU_OPERATOR.version) == (
        "0.20.0",
        "4.8.2",
        "v26.7.0",
    )
    # nfd.enabled is the Chart.yaml condition of the NFD dependency, recorded with the values.yaml keys
    assert "nfd.enabled" in DEVICE_PLUGIN.keys
    assert chart_keys.CHARTS["gpu-operator"] is GPU_OPERATOR


def test_the_docs_name_the_recorded_chart_versions():
    text = DOCS.read_text()
    for chart in CHARTS.values():
        assert f"`{chart.chart}` | {chart.version} |" in text, chart.chart
        assert chart.commit in text


def test_the_default_images_are_the_chart_versions_docs_name():
    """The device plugin chart recorded is the version of gpuready's default device plugin image."""
    fleet = load_fleet(EXAMPLE)
    node = next(iter(fleet.nodes.values()))
    assert node.images.device_plugin.endswith(f":v{DEVICE_PLUGIN.version}")
    assert f"-{DCGM_EXPORTER.version}-" in node.images.dcgm_exporter


# --- pools and sharing modes ----------------------------------------------------------------------------------------


def test_pools_are_named_by_their_pool_label(rendered):
    assert [p.name for p in rendered.pools] == list(POOLS)
    assert [p.name for p in helm_values.pools(load_fleet(EXAMPLE))] == [
        "training",
        "inference-mig",
        "inference-shared",
    ]


def test_a_pool_without_a_pool_label_is_named_by_model_and_config(tmp_path):
    pools = {"a": ({"gpu_model": "NVIDIA L4", "gpu_count": 1, "gpu_sharing": "time-slicing"}, 1)}
    (pool,) = helm_values.pools(load_fleet(write_fleet(tmp_path, pools)))
    assert pool.name == "l4-time-slicing-4"


@pytest.mark.parametrize("pool", ["whole", "ts", "mps", "migsingle", "migmixed"])
def test_each_pool_gets_its_own_config_and_selector(rendered, pool):
    node = next(p for p in rendered.pools if p.name == pool).node
    values = rendered.get("nvidia-device-plugin", pool).values
    key = node.device_plugin_config_key
    assert values["config"] == {
        "map": {key: yaml.safe_dump(node.device_plugin_config, sort_keys=False)},
        "default": key,
    }
    assert yaml.safe_load(values["config"]["map"][key]) == node.device_plugin_config
    assert values["nvidiaDriverRoot"] == "/"  # the chart then mounts it at /driver-root (CDI specs need it)
    assert values["nodeSelector"]["pool"] == pool
    assert values["nodeSelector"]["nvidia.com/device-plugin.config"] == key
    assert values["gfd"] == {"enabled": True}
    assert "devicePlugin" not in values  # the chart's default: enabled


def test_time_slicing(rendered):
    config = yaml.safe_load(
        rendered.get("nvidia-device-plugin", "ts").values["config"]["map"]["time-slicing-4"]
    )
    assert config["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert config["flags"]["migStrategy"] == "none"


def test_mps_maps_to_the_mps_config_and_says_the_chart_runs_its_daemon(rendered):
    v = rendered.get("nvidia-device-plugin", "mps")
    config = yaml.safe_load(v.values["config"]["map"]["mps-2"])
    assert config["sharing"] == {
        "mps": {"renameByDefault": False, "resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}
    }
    assert any("MPS control daemon" in w for w in v.warnings)


@pytest.mark.parametrize(("pool", "strategy"), [("migsingle", "single"), ("migmixed", "mixed")])
def test_mig_strategy_and_layout_warning(rendered, pool, strategy):
    v = rendered.get("nvidia-device-plugin", pool)
    (key,) = v.values["config"]["map"]
    config = yaml.safe_load(v.values["config"]["map"][key])
    assert config["flags"]["migStrategy"] == strategy
    assert key.startswith(f"mig-{strategy}")
    (warning,) = [w for w in v.warnings if w.startswith("mig_layout")]
    assert "3g.40gb" in warning and "gpu_node.py" in warning


def test_mig_mixed_time_slices_its_mig_devices(rendered):
    config = yaml.safe_load(
        rendered.get("nvidia-device-plugin", "migmixed").values["config"]["map"]["mig-mixed-time-slicing-2"]
    )
    names = [r["name"] for r in config["sharing"]["timeSlicing"]["resources"]]
    assert names == ["nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"]


def test_operator_mig_strategy_is_one_value_and_a_conflict_is_a_warning(rendered, tmp_path):
    op = rendered.get("gpu-operator")
    assert op.values["mig"] == {"strategy": "single"}  # the first MIG pool's
    assert op.values["migManager"] == {"enabled": False}
    assert any("mig_strategy differs between pools" in w for w in op.warnings)
    one = helm_values.render(load_fleet(write_fleet(tmp_path / "one", {"m": POOLS["migmixed"]}))).get(
        "gpu-operator"
    )
    assert one.values["mig"] == {"strategy": "mixed"}
    assert not any("differs" in w for w in one.warnings)


def test_operator_has_every_pools_config_and_leaves_driver_and_toolkit_to_the_node_deploy(rendered):
    op = rendered.get("gpu-operator").values
    data = op["devicePlugin"]["config"]["data"]
    expected = {p.node.device_plugin_config_key for p in rendered.pools if not p.node.dra}
    assert set(data) == expected
    assert op["devicePlugin"]["config"]["create"] is True
    assert op["driver"] == {"enabled": False} and op["toolkit"] == {"enabled": False}
    assert op["cdi"] == {"enabled": True}
    assert op["devicePlugin"]["repository"] == "nvcr.io/nvidia" and op["devicePlugin"]["version"] == "v0.20.0"


# --- taints, DRA, images ----------------------------------------------------------------------------------------------


def test_tolerations_follow_the_pools_taints(rendered):
    expected = [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoExecute"},
        {"key": "gpu-only", "operator": "Exists", "effect": "NoSchedule"},
    ]
    assert rendered.get("nvidia-device-plugin", "ts").values["tolerations"] == expected
    assert rendered.get("dcgm-exporter", "ts").values["tolerations"] == expected
    assert rendered.get("dcgm-exporter", "whole").values["tolerations"] == expected[:1]
    op = rendered.get("gpu-operator").values
    assert op["daemonsets"]["tolerations"] == expected  # the union over the pools, once each
    nfd_workers = op["node-feature-discovery"]["worker"]["tolerations"]
    assert nfd_workers[1:] == expected and nfd_workers[0]["key"] == "node-role.kubernetes.io/control-plane"


def test_nfd_is_installed_once_and_tolerates_every_pool(rendered):
    first = rendered.get("nvidia-device-plugin", "whole").values["nfd"]
    assert first["enabled"] is True
    assert {"key": "gpu-only", "operator": "Exists", "effect": "NoSchedule"} in first["worker"]["tolerations"]
    for pool in list(POOLS)[1:]:
        v = rendered.get("nvidia-device-plugin", pool)
        assert v.values["nfd"] == {"enabled": False}
        assert any("installed once, by pool whole" in w for w in v.warnings)


def test_nfd_follows_addons_nfd(tmp_path):
    # a cluster that runs its own NFD: no release installs another, the operator's nfd.enabled is false
    off = helm_values.render(load_fleet(write_fleet(tmp_path, POOLS, {"addons_nfd": False})))
    for pool in POOLS:
        v = off.get("nvidia-device-plugin", pool)
        assert v.values["nfd"] == {"enabled": False}
        assert helm_values.NFD_OFF in v.warnings
    op = off.get("gpu-operator")
    assert op.values["nfd"] == {"enabled": False} and "node-feature-discovery" not in op.values
    assert helm_values.NFD_OFF in op.warnings
    assert not [u for v in off.values if (u := helm_values.unknown_keys(v))]


def test_a_dra_pool_runs_gfd_only_and_dcgm_maps_pods_through_dra(rendered):
    v = rendered.get("nvidia-device-plugin", "dra")
    assert v.values["devicePlugin"] == {"enabled": False} and "config" not in v.values
    assert any("no DRA driver" in w for w in v.warnings)
    assert rendered.get("dcgm-exporter", "dra").values["kubernetesDRA"] == {"enabled": True}
    assert "kubernetesDRA" not in rendered.get("dcgm-exporter", "ts").values
    op = rendered.get("gpu-operator")
    assert op.values["gpuCluster"] == {"deployCR": True}
    assert op.values["draDriver"]["version"] == "v0.4.1"
    assert any("nvidia.com/gpu.deploy.device-plugin=false" in w for w in op.warnings)


def test_images_runtime_class_and_inexpressible_knobs_are_warnings(tmp_path):
    (fleet,) = list(fleets(tmp_path))[2:]
    r = helm_values.render(fleet)
    dp = r.get("nvidia-device-plugin", "ts")
    # digest only
    assert dp.values["image"] == {"repository": "registry.example.com/nvidia/k8s-device-plugin"}
    assert any("pinned by digest only" in w for w in dp.warnings)
    assert any(w.startswith("gfd_image") for w in dp.warnings)
    assert "runtimeClassName" not in dp.values  # containerd_nvidia_default_runtime
    dcgm = r.get("dcgm-exporter", "ts").values
    assert dcgm["image"] == {
        "repository": "registry.example.com:5000/dcgm-exporter",
        "tag": "4.5.3-4.8.2-ubuntu22.04",
    }
    op = r.get("gpu-operator")
    assert op.values["cdi"] == {"enabled": False}
    # the operator takes a digest as version
    assert op.values["devicePlugin"]["version"] == "sha256:" + "a" * 64
    assert op.values["gfd"] == {
        "repository": "registry.example.com/nvidia",
        "image": "gfd",
        "version": "v0.20.0",
    }
    assert any(w.startswith("gfd_image") and "not both" in w for w in op.warnings)
    fleet_warnings = r.warnings
    assert any(w.startswith("gpu_resource_quotas") for w in fleet_warnings)
    assert any(w.startswith("priority_classes") for w in fleet_warnings)


def test_runtime_class_when_nvidia_is_not_the_default_runtime(rendered):
    assert rendered.get("nvidia-device-plugin", "whole").values["runtimeClassName"] == "nvidia"
    assert rendered.get("dcgm-exporter", "whole").values["runtimeClassName"] == "nvidia"


def test_pools_a_selector_cannot_tell_apart_are_a_warning(tmp_path):
    same = {"gpu_model": "NVIDIA L4", "gpu_count": 1}
    pools = {"a": (same, 1), "b": ({**same, "node_taints": ["x=y:NoSchedule"]}, 1)}
    r = helm_values.render(load_fleet(write_fleet(tmp_path, pools)))
    assert [p.name for p in r.pools] == ["l4-default", "l4-default-2"]
    assert any("also selects node(s) b-1" in w for w in r.warnings)
    assert not helm_values.render(load_fleet(EXAMPLE)).warnings


def test_mixed_cdi_is_a_warning(tmp_path):
    pools = {"a": ({**POOLS["ts"][0], "nvidia_cdi": False}, 1), "b": (POOLS["whole"][0], 1)}
    op = helm_values.render(load_fleet(write_fleet(tmp_path, pools))).get("gpu-operator")
    assert op.values["cdi"] == {"enabled": False}
    assert any("nvidia_cdi differs between pools" in w for w in op.warnings)


def test_image_parsing():
    parse = helm_values.Image.parse
    assert parse("nvcr.io/nvidia/k8s-device-plugin:v0.20.0") == helm_values.Image(
        "nvcr.io/nvidia/k8s-device-plugin", "v0.20.0", None
    )
    assert parse("localhost:5000/dp").tag is None
    both = parse("r.io/a/b:1@sha256:" + "c" * 64)
    assert both.chart_tag() == "1@sha256:" + "c" * 64
    assert both.operator_parts() == ("r.io/a", "b", "1")


# --- files and the subcommand -----------------------------------------------------------------------------------------


def test_files_per_chart_and_pool_with_a_header_naming_the_chart_version(rendered, tmp_path):
    out = tmp_path / "values"
    written = helm_values.write(rendered, out)
    assert sorted(p.relative_to(out).as_posix() for p in written) == sorted(
        [f"{pool}/{chart}.yaml" for pool in POOLS for chart in ("nvidia-device-plugin", "dcgm-exporter")]
        + ["gpu-operator.yaml"]
    )
    for v in rendered.values:
        text = (out / v.relative_path).read_text()
        assert text.startswith(
            f"# Helm values for NVIDIA's {v.chart.chart} chart, version {v.chart.version} "
        )
        assert f"--version {v.chart.version} --namespace gpu-system" in text
        assert yaml.safe_load(text) == v.values
        assert "&id" not in text  # no YAML anchors
        for w in v.warnings:
            assert f"# WARNING: {w}\n" in text
    mps = (out / "mps" / "nvidia-device-plugin.yaml").read_text()
    assert "    mps-2: |\n      version: v1\n" in mps  # the config as a block, readable


def run_cli(argv):
    parser = argparse.ArgumentParser()
    helm_values.add_arguments(parser)
    return helm_values.run(parser.parse_args(argv))


def test_run_writes_the_files_and_prints_warnings(tmp_path, capsys):
    assert run_cli([str(EXAMPLE), "--out", str(tmp_path / "v")]) == 0
    out, err = capsys.readouterr()
    assert str(tmp_path / "v" / "training" / "nvidia-device-plugin.yaml") in out.splitlines()
    assert "gpuready values: WARNING: gpu-operator: driver.enabled and toolkit.enabled are false" in err
    assert run_cli([str(EXAMPLE), "--out", str(tmp_path / "w"), "--chart", "gpu-operator"]) == 0
    assert [p.name for p in (tmp_path / "w").iterdir()] == ["gpu-operator.yaml"]


def test_run_bad_inventory_exits_2(tmp_path, capsys):
    (tmp_path / "inv.py").write_text("pool = [('n1', {'gpu_model': 'NVIDIA L4', 'gpu_count': 0})]\n")
    assert run_cli([str(tmp_path / "inv.py"), "--out", str(tmp_path / "v")]) == 2
    assert "gpu_count = 0" in capsys.readouterr().err
    assert not (tmp_path / "v").exists()
