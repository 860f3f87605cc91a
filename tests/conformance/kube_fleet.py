"""A GPU fleet on the in-process API simulator, for the node, workloads and metrics layers.

Each node is a simulator Node backed by a fake lab host root (driver files, containerd config with or without
the ``nvidia`` drop-in rendered by gpuready's own containerd_config, the emulated driver's MIG state, a hardware
file) through the lab's GPU backend, so the device plugin, GFD, vectorAdd, ``nvidia-smi -L`` and dcgm-exporter
behave as they do on a lab host. The node's labels, taints, MIG layout and device-plugin ConfigMap come from the
inventory's NodeSpec, as the deploys would make them; a test then breaks one thing and runs the suite.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config
from shims import GROUP_DATA, JOIN, PROFILE_INVENTORY

from gpuready import addons
from gpuready.containerd_config import RuntimeSettings, render_drop_in, render_main
from gpuready.lab.apiserver import ApiServer
from gpuready.lab.apiserver.gpu import attach
from gpuready.lab.apiserver.gpu_host import HostView
from gpuready.lab.hardware import make_hardware, write_hardware
from gpuready.spec import NodeSpec, load_fleet

CONTAINERD_MAIN = """\
version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
"""
NS = "gpu-system"
DRIVER = "580.178.04"


def wait_for(check: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {value!r}")
        time.sleep(0.05)


def write_host(base: Path, spec: NodeSpec, profile: str, index: int, mig: dict[int, list[str]]) -> HostView:
    """A host root as the gpu_node deploy leaves it, with the MIG instances of ``mig`` (GPU index -> profiles)."""
    root = base / spec.name / "merged"
    hw = make_hardware(profile, index)
    hw["faults"] = []
    write_hardware(base / spec.name / "machine" / "hardware.json", hw)
    for d in ("usr/bin", "usr/lib/nvidia-emu", "usr/lib/x86_64-linux-gnu", "etc/containerd/conf.d",
              "var/lib/nvidia-emu"):  # fmt: skip
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "usr/bin/nvidia-smi").write_text("#!/usr/bin/python3\n")
    (root / "usr/lib/nvidia-emu/driver-version").write_text(DRIVER + "\n")
    (root / "usr/lib/nvidia-emu/kmod-version").write_text(DRIVER + "\n")
    (root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").write_text("emulated NVML\n")
    (root / "usr/bin/nvidia-container-runtime").write_text("#!/usr/bin/python3\n")
    settings = RuntimeSettings()
    main = render_main(CONTAINERD_MAIN, settings)
    (root / "etc/containerd/config.toml").write_text(main)
    (root / "etc/containerd/conf.d/99-nvidia.toml").write_text(render_drop_in(main, settings))
    gpus = {}
    for g in hw["gpus"]:
        by_name = {p["name"]: p for p in g["mig_profiles"]}
        gis, start = [], 0
        for gi_id, name in enumerate(mig.get(g["index"], []), start=1):
            p = by_name[name]
            gis.append({"id": gi_id, "profile_id": p["profile_id"], "start": start, "size": p["placement_size"],
                        "cis": [{"id": 0, "profile_id": 0, "start": 0, "size": p["compute_slices"]}]})  # fmt: skip
            start += p["placement_size"]
        on = g["index"] in mig
        gpus[g["uuid"]] = {"mig_current": on, "mig_pending": on, "persistence": True, "gis": gis}
    state = {"boot_id": "b", "kmod": DRIVER, "gpus": gpus}
    (root / "var/lib/nvidia-emu/state.json").write_text(json.dumps(state))
    return HostView(spec.name, root, base / spec.name / "machine" / "hardware.json")


@dataclass
class KubeFleet:
    """The simulator, the inventory of its nodes, and handles to break things."""

    sim: ApiServer
    root: Path
    inventory: Path
    nodes: dict[str, NodeSpec]
    hosts: dict[str, HostView] = field(default_factory=dict)
    api: client.ApiClient | None = None

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def node(self, name: str) -> dict[str, Any]:
        return self.sim.store.get("nodes", "", name)

    def remove_nvidia_dropin(self, name: str) -> None:
        (self.hosts[name].root / "etc/containerd/conf.d/99-nvidia.toml").unlink()

    def delete_daemonset(self, name: str) -> None:
        client.AppsV1Api(self.api).delete_namespaced_daemon_set(name, NS)
        wait_for(lambda: not [p for p in self.sim.store.list("pods", NS)[0] if p["metadata"]["name"].startswith(name)],
                 what=f"{name} pods gone")  # fmt: skip

    def converged(self) -> None:
        """Every node advertises what its spec expects, carries its GFD labels, and runs a dcgm-exporter."""
        for name, spec in self.nodes.items():

            def ok(name: str = name, spec: NodeSpec = spec) -> bool:
                node = self.node(name)
                alloc = {
                    k: int(v) for k, v in node["status"]["allocatable"].items() if k.startswith("nvidia.com/")
                }
                labels = node["metadata"]["labels"]
                exporter = [p for p in self.sim.store.pods_on_node(name)
                            if p["metadata"]["name"].startswith("nvidia-dcgm-exporter")
                            and p["status"].get("phase") == "Running"]  # fmt: skip
                return (
                    {k: v for k, v in alloc.items() if v} == spec.expected_allocatable
                    and all(labels.get(k) == v for k, v in spec.expected_labels.items())
                    and bool(exporter)
                )

            wait_for(ok, what=f"{name} converged")


# (lab hardware profile, inventory data besides PROFILE_INVENTORY)
HEALTHY = [
    ("h100-sxm-8", {"node_labels": {"gpuready.io/pool": "training"}, "node_taints": ["nvidia.com/gpu=present:NoSchedule"]}),
    ("a100-80gb-4", {"gpu_sharing": "mig", "mig_strategy": "mixed",
                     "mig_layout": {0: ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]}}),
    ("l4-1", {"gpu_sharing": "time-slicing", "sharing_replicas": 4}),
]  # fmt: skip


def make_fleet(
    root: Path,
    hosts: list[tuple[str, dict[str, Any]]] = HEALTHY,
    *,
    configs: dict[str, str] | None = None,
    mig_override: dict[int, dict[int, list[str]]] | None = None,
    dcgm: bool = True,
) -> KubeFleet:
    """Start the simulator, register one node per host, deploy the add-ons; ``configs`` overrides ConfigMap keys,
    ``mig_override`` a host's (by position) MIG instances."""
    sim = ApiServer(root / "state", node_grace_period=2.0, node_monitor_period=0.2)
    sim.start()
    names = [sim.virtual.add(1, "cpu", prefix="gpu-node-")[0] for _ in hosts]
    entries = [
        (name, {**PROFILE_INVENTORY[profile], **JOIN, **data})
        for name, (profile, data) in zip(names, hosts, strict=True)
    ]
    (root / "group_data").mkdir(parents=True, exist_ok=True)
    shutil.copy(GROUP_DATA, root / "group_data" / "all.py")
    inventory = root / "inventory.py"
    inventory.write_text(f"gpu_nodes = ({entries!r}, {{}})\n")
    fleet = load_fleet(inventory)
    kube = KubeFleet(sim=sim, root=root, inventory=inventory, nodes=dict(fleet.nodes))
    for i, (name, (profile, _data)) in enumerate(zip(names, hosts, strict=True)):
        spec = fleet.nodes[name]
        mig = {g: list(layout) for g, layout in enumerate(spec.sharing.mig_layout) if layout is not None}
        mig = (mig_override or {}).get(i, mig)
        kube.hosts[name] = write_host(root / "hosts", spec, profile, i, mig)

        def label(node: dict[str, Any], spec: NodeSpec = spec) -> None:
            node["metadata"]["labels"].update(spec.node_labels)
            if spec.taints:
                node["spec"]["taints"] = [t.as_dict() for t in spec.taints]

        sim.store.modify("nodes", "", name, label)
        attach(sim, name, kube.hosts[name], grace_s=1.0)
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim.kubeconfig_path), client_configuration=cfg)
    kube.api = client.ApiClient(cfg)
    deploy_addons(kube.api, {**fleet.device_plugin_configs(), **(configs or {})}, dcgm=dcgm)
    return kube


def deploy_addons(api: client.ApiClient, configs: dict[str, str], dcgm: bool = True) -> None:
    """gpuready.addons' objects, the GPU DaemonSets on the nvidia RuntimeClass (as the add-ons deploy runs them)."""
    settings = addons.AddonSettings()
    v1, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    v1.create_namespace({"metadata": {"name": NS}})
    client.NodeV1Api(api).create_runtime_class(addons.runtime_class())
    cm = {"metadata": {"name": addons.DEVICE_PLUGIN_CONFIGMAP, "namespace": NS}, "data": configs}
    v1.create_namespaced_config_map(NS, cm)
    v1.create_namespaced_service_account(NS, {"metadata": {"name": "nvidia-device-plugin"}})
    exporter, service = addons.dcgm_exporter(settings)
    for ds in (
        addons.device_plugin(settings),
        addons.gpu_feature_discovery(settings),
        *([exporter] if dcgm else []),
    ):
        ds["spec"]["template"]["spec"]["runtimeClassName"] = "nvidia"
        apps.create_namespaced_daemon_set(NS, ds)
    v1.create_namespaced_service(NS, service)
