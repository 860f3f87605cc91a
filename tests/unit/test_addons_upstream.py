"""The add-ons against what the real components need on a real cluster (issue #29, item 2).

Each fact is the upstream chart's, carried over with its source (no chart is vendored):

* k8s-device-plugin v0.19.3, ``deployments/helm/nvidia-device-plugin/templates/daemonset-device-plugin.yml`` and
  ``daemonset-gfd.yml`` (the init container and sidecar of ``config-manager``, ``shareProcessNamespace``, the
  ``cdi-root``/``mps-root``/``mps-shm`` volumes, the plugin's env), ``templates/_helpers.tpl`` (``requiresCapSysAdmin``
  and ``addMigMonitorDevices`` when a MIG strategy is possible), ``values.yaml`` (``config.fallbackStrategies:
  [named, single]``, ``mps.root: /run/nvidia/mps``), ``cmd/config-manager/main.go`` (defaults ``SEND_SIGNAL=true``,
  ``PROCESS_TO_SIGNAL=nvidia-device-plugin``; ``findPidToSignal`` matches ``cmdline[0]`` of the processes it sees).
* dra-driver-nvidia-gpu v0.4.1, ``deployments/helm/dra-driver-nvidia-gpu/templates/controller.yaml`` (rendered only
  with ``resources.computeDomains.enabled``) and ``templates/rbac-controller.yaml``.
* Kubernetes: a pod lands on a node only when it tolerates each NoSchedule/NoExecute taint (key, effect, and value
  unless ``operator: Exists``); the DaemonSet controller adds only the node-condition and unschedulable tolerations.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from inventories import write_inventory

from gpuready.deploy import addons, plan
from gpuready.deploy.addons import AddonSettings, render_all
from gpuready.spec import load_fleet

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventory" / "example.py"
JOIN = {
    "kube_api_endpoint": "10.0.0.1:6443",
    "kube_ca_cert_hash": "sha256:" + "ab" * 32,
    "kube_join_token_file": "/nonexistent/token",
}
DAEMONSETS = ("nvidia-device-plugin", "gpu-feature-discovery", "nvidia-dcgm-exporter")
DRA_PLUGIN = "nvidia-dra-driver-gpu-kubelet-plugin"


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    """Kubernetes' rule, written out here (not gpuready's helper), so a bug in one cannot hide in the other."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("key") and t["key"] != taint["key"]:
            continue
        if t.get("operator") == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def pod_specs(manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        m["metadata"]["name"]: m["spec"]["template"]["spec"] for m in manifests if m["kind"] == "DaemonSet"
    }


@pytest.fixture
def tainted(tmp_path):
    """Two pools: a plain L4 pool (default taint) and an A100 MIG pool on dra with two extra taints."""
    (tmp_path / "group_data").mkdir()
    (tmp_path / "group_data" / "all.py").write_text(
        (REPO / "inventory" / "group_data" / "all.py").read_text()
    )
    plain = {"gpu_model": "NVIDIA L4", "gpu_count": 1, **JOIN}
    team = {
        "gpu_model": "NVIDIA L4",
        "gpu_count": 2,
        **JOIN,
        "node_taints": ["nvidia.com/gpu=present:NoSchedule", "team=ml:NoSchedule", "maintenance:NoExecute"],
    }
    path = write_inventory(tmp_path / "inv.py", [("node-1", plain), ("node-2", team), ("node-3", team)])
    return load_fleet(path)


def test_a_pool_with_extra_taints_gets_every_addon(tainted):
    specs = pod_specs(render_all(tainted, AddonSettings()))
    assert set(DAEMONSETS) <= set(specs)
    for node in tainted.nodes.values():
        for taint in (t.as_dict() for t in node.taints):
            for name in DAEMONSETS:
                assert tolerates(specs[name]["tolerations"], taint), (name, node.name, taint)


def test_the_dra_kubelet_plugin_tolerates_the_pools_taints(tmp_path):
    (tmp_path / "group_data").mkdir()
    (tmp_path / "group_data" / "all.py").write_text(
        (REPO / "inventory" / "group_data" / "all.py").read_text()
    )
    data = {
        "gpu_model": "NVIDIA L4",
        "gpu_count": 1,
        **JOIN,
        "gpu_allocation": "dra",
        "node_taints": ["dedicated=gpu:NoSchedule"],
    }
    fleet = load_fleet(write_inventory(tmp_path / "inv.py", [("node-1", data)]))
    specs = pod_specs(render_all(fleet, AddonSettings()))
    assert tolerates(
        specs[DRA_PLUGIN]["tolerations"], {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    )
    assert not tolerates(
        specs[DRA_PLUGIN]["tolerations"], {"key": "dedicated", "value": "x", "effect": "NoSchedule"}
    )


def test_tolerations_are_exactly_the_pools_taints(tainted):
    tolerations = addons.gpu_tolerations(tainted)
    assert tolerations[0] == {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    # nvidia.com/gpu=present is covered by the Exists one; the others are tolerated as they are, once each
    assert tolerations[1:] == [
        {"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
        {"key": "maintenance", "operator": "Exists", "effect": "NoExecute"},
    ]
    assert not tolerates(tolerations, {"key": "team", "value": "other", "effect": "NoSchedule"})
    assert addons.untolerated_taints(tainted, tolerations) == {}


def test_plan_warns_what_a_workload_must_tolerate_and_nothing_for_the_addons(tainted):
    warnings = plan.addon_warnings(tainted)
    assert warnings == [
        "node-2, node-3: taint team=ml:NoSchedule, maintenance:NoExecute: the add-ons tolerate it, but a GPU "
        "workload lands there only with its own toleration for it (the nvidia RuntimeClass adds only nvidia.com/gpu)"
    ]
    assert json.loads(plan.render_json(tainted))["addon_warnings"] == warnings
    assert f"warning: {warnings[0]}" in plan.render_text(tainted)


def test_plan_warns_when_an_addon_would_not_land(tainted, monkeypatch):
    monkeypatch.setattr(
        addons, "gpu_tolerations", lambda fleet=None: [dict(t) for t in addons.GPU_TOLERATIONS]
    )
    (warning, _) = plan.addon_warnings(tainted)
    assert warning.startswith(
        "node-2, node-3: the GPU add-ons (device plugin, GFD, NFD worker, dcgm-exporter"
    )
    assert "do not tolerate team=ml:NoSchedule, maintenance:NoExecute and would not run there" in warning


def test_no_plan_warning_for_the_default_taint():
    assert plan.addon_warnings(load_fleet(EXAMPLE)) == []


# --- the device plugin and GFD pods as the chart has them ------------------------------------------------------


@pytest.fixture(scope="module")
def example_specs():
    return pod_specs(render_all(load_fleet(EXAMPLE), AddonSettings()))


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize("name", ["nvidia-device-plugin", "gpu-feature-discovery"])
def test_config_manager_init_and_sidecar(example_specs, name):
    spec = example_specs[name]
    assert spec["shareProcessNamespace"] is True  # the sidecar's SIGHUP must find the program's process
    (init,) = spec["initContainers"]
    main, sidecar = spec["containers"]  # the program first: see deploy/addons.py _plugin_pod
    assert init["command"] == sidecar["command"] == ["config-manager"]
    assert main["command"] == [name]
    common = {
        "KUBECONFIG": "",
        "NODE_NAME": {"fieldRef": {"fieldPath": "spec.nodeName"}},
        "NODE_LABEL": "nvidia.com/device-plugin.config",
        "CONFIG_FILE_SRCDIR": "/available-configs",
        "CONFIG_FILE_DST": "/config/config.yaml",
        "FALLBACK_STRATEGIES": "named,single",
    }
    assert (
        env(init).items()
        >= {**common, "ONESHOT": "true", "SEND_SIGNAL": "false", "PROCESS_TO_SIGNAL": ""}.items()
    )
    assert env(sidecar).items() >= {
        **common, "ONESHOT": "false", "SEND_SIGNAL": "true", "SIGNAL": "1", "PROCESS_TO_SIGNAL": name,
    }.items()  # fmt: skip
    assert env(main)["CONFIG_FILE"] == "/config/config.yaml"
    # the init container and the sidecar see the ConfigMap and write the link the program reads
    for container in (init, sidecar, main):
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["available-configs"] == "/available-configs" and mounts["config"] == "/config"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["available-configs"]["configMap"]["name"] == addons.DEVICE_PLUGIN_CONFIGMAP
    assert volumes["config"] == {"name": "config", "emptyDir": {}}


def test_device_plugin_mounts_the_hosts_cdi_and_mps_dirs(example_specs):
    spec = example_specs["nvidia-device-plugin"]
    main = spec["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in main["volumeMounts"]}
    volumes = {v["name"]: v["hostPath"] for v in spec["volumes"] if "hostPath" in v}
    assert mounts["cdi-root"] == "/var/run/cdi"
    assert volumes["cdi-root"] == {"path": "/var/run/cdi", "type": "DirectoryOrCreate"}
    assert mounts["mps-root"] == "/mps" and volumes["mps-root"] == {
        "path": "/run/nvidia/mps",
        "type": "DirectoryOrCreate",
    }
    assert mounts["mps-shm"] == "/dev/shm" and volumes["mps-shm"] == {"path": "/run/nvidia/mps/shm"}
    assert mounts["device-plugin"] == "/var/lib/kubelet/device-plugins"
    # the driver root, read-only at /driver-root (the chart's nvidiaDriverRoot "/"): NVIDIA's real plugin exits in
    # CDI mode without it ("failed to locate libcuda.so"), found by tests/lab/test_lab_real_device_plugin.py
    assert mounts["driver-root"] == "/driver-root" and volumes["driver-root"] == {
        "path": "/",
        "type": "Directory",
    }
    assert next(m for m in main["volumeMounts"] if m["name"] == "driver-root")["readOnly"] is True
    values = env(main)
    assert values["NVIDIA_DRIVER_ROOT"] == "/"
    assert values["MPS_ROOT"] == "/run/nvidia/mps"
    assert (
        values["NVIDIA_VISIBLE_DEVICES"] == "all"
        and values["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    )


def test_mig_monitor_and_sys_admin_only_where_a_pool_uses_mig(example_specs, tmp_path):
    # the example fleet has an A100 MIG pool
    for name in ("nvidia-device-plugin", "gpu-feature-discovery"):
        init, main, sidecar = example_specs[name]["initContainers"][0], *example_specs[name]["containers"]
        assert env(main)["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
        assert main["securityContext"] == {"capabilities": {"add": ["SYS_ADMIN"]}}
        for helper in (init, sidecar):
            assert helper["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            }
    (tmp_path / "group_data").mkdir()
    (tmp_path / "group_data" / "all.py").write_text(
        (REPO / "inventory" / "group_data" / "all.py").read_text()
    )
    fleet = load_fleet(
        write_inventory(tmp_path / "inv.py", [("node-1", {"gpu_model": "NVIDIA L4", "gpu_count": 1, **JOIN})])
    )
    specs = pod_specs(render_all(fleet, AddonSettings()))
    for name in ("nvidia-device-plugin", "gpu-feature-discovery"):
        main = specs[name]["containers"][0]
        assert "NVIDIA_MIG_MONITOR_DEVICES" not in env(main)
        assert main["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }


def test_gfd_knows_its_node_namespace_and_pod(example_specs):
    values = env(example_specs["gpu-feature-discovery"]["containers"][0])
    assert values["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert values["NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert values["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_everything_still_validates(tainted):
    for manifest in render_all(tainted, AddonSettings()):
        kubernetes_validate.validate(manifest, "1.34.0", strict=True)


# --- the MPS control daemon (the chart's templates/daemonset-mps-control-daemon.yml) ----------------------------


def fleet_of(tmp_path: Path, hosts: list[tuple[str, dict[str, Any]]]):
    (tmp_path / "group_data").mkdir(exist_ok=True)
    (tmp_path / "group_data" / "all.py").write_text(
        (REPO / "inventory" / "group_data" / "all.py").read_text()
    )
    return load_fleet(write_inventory(tmp_path / "inv.py", hosts))


def test_mps_pools_get_the_mps_control_daemon(tmp_path):
    mps = {"gpu_model": "NVIDIA L4", "gpu_count": 2, **JOIN, "gpu_sharing": "mps", "sharing_replicas": 4}
    fleet = fleet_of(
        tmp_path, [("node-1", mps), ("node-2", {"gpu_model": "NVIDIA L4", "gpu_count": 1, **JOIN})]
    )
    manifests = render_all(fleet, AddonSettings())
    spec = pod_specs(manifests)[addons.MPS_CONTROL_DAEMON]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true", "nvidia.com/mps.capable": "true"}
    assert spec["hostPID"] is True and "shareProcessNamespace" not in spec  # mps.enableHostPID: true
    assert spec["affinity"] == pod_specs(manifests)["nvidia-device-plugin"]["affinity"]  # not on dra nodes
    mounts, init = spec["initContainers"]
    assert mounts["command"] == ["mps-control-daemon", "mount-shm"] and mounts["securityContext"] == {
        "privileged": True
    }
    assert mounts["volumeMounts"] == [
        {"name": "mps-root", "mountPath": "/mps", "mountPropagation": "Bidirectional"}
    ]
    assert init["command"] == ["config-manager"] and env(init)["ONESHOT"] == "true"
    main, sidecar = spec["containers"]
    assert (
        env(sidecar)["PROCESS_TO_SIGNAL"] == "/usr/bin/mps-control-daemon" and env(sidecar)["SIGNAL"] == "1"
    )
    # the chart runs [mps-control-daemon], so the sidecar's /usr/bin/... never matches the daemon's cmdline[0]
    # (found on the lab's real kubelet: "error finding pid: no process found", the sidecar restarting)
    assert main["command"] == [env(sidecar)["PROCESS_TO_SIGNAL"]]
    assert main["securityContext"] == {"privileged": True}
    assert env(main)["CONFIG_FILE"] == "/config/config.yaml"
    assert {m["name"]: m["mountPath"] for m in main["volumeMounts"]}.items() >= {
        "mps-shm": "/dev/shm", "mps-root": "/mps", "config": "/config",
    }.items()  # fmt: skip
    volumes = {v["name"]: v.get("hostPath") for v in spec["volumes"]}
    assert volumes["mps-root"] == {"path": "/run/nvidia/mps", "type": "DirectoryOrCreate"}
    assert volumes["mps-shm"] == {"path": "/run/nvidia/mps/shm"}
    for manifest in manifests:
        kubernetes_validate.validate(manifest, "1.34.0", strict=True)


def test_no_mps_control_daemon_without_an_mps_pool(tmp_path):
    fleet = fleet_of(tmp_path, [("node-1", {"gpu_model": "NVIDIA L4", "gpu_count": 1, **JOIN})])
    assert addons.MPS_CONTROL_DAEMON not in pod_specs(render_all(fleet, AddonSettings()))
    assert addons.MPS_CONTROL_DAEMON not in pod_specs(render_all(load_fleet(EXAMPLE), AddonSettings()))


def test_the_mps_control_daemon_is_not_taken_for_the_device_plugin(tmp_path):
    from gpuready.conformance.checks import node as node_checks

    mps = {"gpu_model": "NVIDIA L4", "gpu_count": 2, **JOIN, "gpu_sharing": "mps", "sharing_replicas": 4}
    fleet = fleet_of(tmp_path, [("node-1", mps)])
    (spec,) = fleet.nodes.values()
    daemon = next(
        m for m in render_all(fleet, AddonSettings()) if m["metadata"]["name"] == addons.MPS_CONTROL_DAEMON
    )
    pod = {
        "metadata": {"name": f"{addons.MPS_CONTROL_DAEMON}-x7k2p", "namespace": "gpu-addons"},
        "spec": daemon["spec"]["template"]["spec"],
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    problems = node_checks.addon_pod_ready(spec, [pod], "device plugin")
    assert problems == [
        "no device plugin pod on the node (is its DaemonSet deployed and does it select this node?)"
    ]


def test_config_manager_finds_its_default_config_in_every_fleet(tmp_path):
    """config-manager's first read of the node label is "" (``SyncableConfig.Get`` returns before the informer has
    listed the Node: ``cmd/config-manager/main.go``), so every init container and sidecar first selects
    ``DEFAULT_CONFIG``; a ConfigMap without that key fails them with "specified config  does not exist" (found by
    the real config-manager on a real-kubelet lab host). A fleet of time-sliced L4s has no plain node, so no node
    config is keyed "default" of its own."""
    sliced = {
        "gpu_model": "NVIDIA L4",
        "gpu_count": 1,
        **JOIN,
        "gpu_sharing": "time-slicing",
        "sharing_replicas": 4,
    }
    for fleet in (fleet_of(tmp_path, [("node-1", sliced)]), load_fleet(EXAMPLE)):
        manifests = render_all(fleet, AddonSettings())
        (configmap,) = [
            m
            for m in manifests
            if m["kind"] == "ConfigMap" and m["metadata"]["name"] == addons.DEVICE_PLUGIN_CONFIGMAP
        ]
        for name, spec in pod_specs(manifests).items():
            for container in [*spec.get("initContainers", []), *spec["containers"]]:
                if container.get("command") == ["config-manager"]:
                    assert env(container)["DEFAULT_CONFIG"] in configmap["data"], (
                        name,
                        sorted(configmap["data"]),
                    )
    # where no node has a plain config of its own, the default is a plain one: whole GPUs, no MIG, CDI names
    data = render_all(fleet_of(tmp_path, [("node-1", sliced)]), AddonSettings())
    default = next(
        m
        for m in data
        if m["kind"] == "ConfigMap" and m["metadata"]["name"] == addons.DEVICE_PLUGIN_CONFIGMAP
    )
    assert yaml.safe_load(default["data"]["default"]) == {
        "version": "v1",
        "flags": {"migStrategy": "none", "plugin": {"deviceListStrategy": "cdi-cri"}},
    }
