"""A GPU fleet on the lab's real control plane, for the node, workloads and metrics layers.

Each node is a virtual node the lab's node agent registers and heartbeats (tests/conftest.py's `virtual_nodes`),
given GPU behaviour from a fake lab host root (driver files, containerd config with or without the ``nvidia``
drop-in rendered by gpuready's own containerd_config, the emulated driver's MIG state, a hardware file) through
the agent's ``attach_host``, so the device plugin, GFD, vectorAdd, ``nvidia-smi -L`` and dcgm-exporter behave as
they do on a lab host. The node's labels and taints are patched from the inventory's NodeSpec as the join would
make them; gpuready's add-ons (``addons.render_all``) are server-side applied as the add-ons deploy does, into a
namespace of the fleet's own, and the real DaemonSet controller and scheduler put their pods on the nodes. A
test then breaks one thing and runs the suite.
"""

from __future__ import annotations

import json
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from host_roots import make_host, write_cdi_spec
from inventories import write_inventory
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from polling import wait_for
from shims import GROUP_DATA, JOIN, PROFILE_INVENTORY, FakeNode

from gpuready import kube
from gpuready.conformance import SUITE_DIR
from gpuready.conformance.workloads import NAMESPACE_PREFIX
from gpuready.deploy import addons
from gpuready.lab.agent import control
from gpuready.lab.hardware import make_hardware
from gpuready.spec import NodeSpec, load_fleet

WAIT_S = 120.0  # two cores shared with other test sessions: the real controllers take their time


def write_host(
    base: Path, name: str, profile: str, index: int, mig: dict[int, list[str]], cdi: bool = True
) -> tuple[Path, Path]:
    """A host root as the gpu_node deploy leaves it (persistence on), with the MIG instances of ``mig``, in CDI
    or runtime-class mode."""
    return make_host(base, name, profile, index, mig=mig, persistence=True, cdi=cdi)


@dataclass
class KubeFleet:
    """The fleet's nodes on the lab cluster, its inventory, its add-ons namespace, and handles to break things."""

    lab: Any  # tests/conftest.py's LabCluster
    api: client.ApiClient
    root: Path
    inventory: Path
    namespace: str  # where its add-ons run
    nodes: dict[str, NodeSpec]
    hosts: dict[str, Path] = field(default_factory=dict)  # node -> host root
    runs_before: set[str] = field(default_factory=set)  # the suite's run namespaces before this fleet's runs
    stand_ins: dict[str, FakeNode] = field(default_factory=dict)  # node -> its stand-in host (make_fleet)

    @property
    def kubeconfig(self) -> Path:
        return self.lab.kubeconfig

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def node(self, name: str) -> dict[str, Any]:
        return json.loads(self.core.read_node(name, _preload_content=False).data)

    def pods(self, namespace: str | None = None, node: str | None = None) -> list[dict[str, Any]]:
        selector = f"spec.nodeName={node}" if node else ""
        if namespace is None:
            raw = self.core.list_pod_for_all_namespaces(field_selector=selector, _preload_content=False)
        else:
            raw = self.core.list_namespaced_pod(namespace, field_selector=selector, _preload_content=False)
        return json.loads(raw.data)["items"]

    def run_namespaces(self) -> set[str]:
        """The conformance suite's per-run namespaces that exist now (terminating ones included)."""
        return {
            ns.metadata.name
            for ns in self.core.list_namespace().items
            if ns.metadata.name.startswith(NAMESPACE_PREFIX)
        }

    def remove_nvidia_dropin(self, name: str) -> None:
        (self.hosts[name] / "etc/containerd/conf.d/99-nvidia.toml").unlink()

    def stale_cdi_spec(self, name: str, leave_out: tuple[str, ...]) -> None:
        """The toolkit's spec without these device names, as after a change nobody refreshed it for."""
        state = json.loads((self.hosts[name] / "var/lib/nvidia-emu/state.json").read_text())
        hw = json.loads((self.hosts[name].parent / "machine" / "hardware.json").read_text())
        write_cdi_spec(self.hosts[name], hw, state, leave_out)

    def stop_kubelet(self, name: str) -> None:
        """The node's kubelet stops heartbeating; the real node lifecycle controller marks it NotReady."""
        self.lab.stop_heartbeat(name)

    def delete_daemonset(self, name: str) -> None:
        """Delete one add-on DaemonSet and wait until the garbage collector and the kubelets removed its pods."""
        client.AppsV1Api(self.api).delete_namespaced_daemon_set(name, self.namespace)
        wait_for(
            lambda: not [p for p in self.pods(self.namespace) if p["metadata"]["name"].startswith(name)],
            what=f"{name} pods gone",
        )

    def converged(self, skip: tuple[str, ...] = ()) -> None:
        """Every node (but `skip`) advertises what its spec expects, carries its GFD labels, and runs a
        dcgm-exporter."""
        for name, spec in self.nodes.items():
            if name in skip:
                continue

            def ok(name: str = name, spec: NodeSpec = spec) -> bool:
                node = self.node(name)
                alloc = {
                    k: int(v) for k, v in node["status"]["allocatable"].items() if k.startswith("nvidia.com/")
                }
                labels = node["metadata"]["labels"]
                exporter = [
                    p
                    for p in self.pods(self.namespace, name)
                    if p["metadata"]["name"].startswith("nvidia-dcgm-exporter")
                    and p["status"].get("phase") == "Running"
                ]
                return (
                    {k: v for k, v in alloc.items() if v} == spec.expected_allocatable
                    and all(labels.get(k) == v for k, v in spec.expected_labels.items())
                    and bool(exporter)
                )

            wait_for(ok, what=f"{name} converged")

    def delete(self) -> None:
        """Remove the add-ons namespace (the nodes go with the test's `virtual_nodes`)."""
        try:
            self.core.delete_namespace(self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise


# (lab hardware profile, inventory data besides PROFILE_INVENTORY)
HEALTHY = [
    (
        "h100-sxm-8",
        {
            "node_labels": {"gpuready.io/pool": "training"},
            "node_taints": ["nvidia.com/gpu=present:NoSchedule"],
        },
    ),
    (
        "a100-80gb-4",
        {
            "gpu_sharing": "mig",
            "mig_strategy": "mixed",
            "mig_layout": {0: ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]},
        },
    ),
    ("l4-1", {"gpu_sharing": "time-slicing", "sharing_replicas": 4}),
]


def make_fleet(
    lab: Any,
    api: client.ApiClient,
    add_nodes: Callable[..., list[str]],
    root: Path,
    hosts: list[tuple[str, dict[str, Any]]] = HEALTHY,
    *,
    configs: dict[str, str] | None = None,
    mig_override: dict[int, dict[int, list[str]]] | None = None,
    dcgm: bool = True,
    stand_ins: bool = False,
    layout: str = "gpuready",
) -> KubeFleet:
    """Register one virtual node per host with the lab's agent, give it the host's GPUs, label and taint it from
    the inventory, and apply the add-ons; ``configs`` overrides device-plugin ConfigMap keys, ``mig_override`` a
    host's (by position) MIG instances; ``stand_ins``: each node also gets a stand-in host on this machine
    (shims.FakeNode: the emulated nvidia-smi and stand-in systemctl, journalctl, containerd, nvidia-ctk, in
    ``fleet.stand_ins``) where a container that looks at its host, the ``--connection pod`` probe, runs;
    ``layout="gpu-operator"``: the add-ons laid out as the GPU Operator lays them out (see ``apply_addons``)."""
    names = add_nodes(len(hosts), "cpu")
    entries = [
        (name, {**PROFILE_INVENTORY[profile], **JOIN, **data})
        for name, (profile, data) in zip(names, hosts, strict=True)
    ]
    (root / "group_data").mkdir(parents=True, exist_ok=True)
    shutil.copy(GROUP_DATA, root / "group_data" / "all.py")
    inventory = write_inventory(root / "inventory.py", entries)
    fleet = load_fleet(inventory)
    namespace = OPERATOR_NAMESPACE if layout == "gpu-operator" else f"gpu-system-{secrets.token_hex(3)}"
    kf = KubeFleet(
        lab=lab, api=api, root=root, inventory=inventory, namespace=namespace, nodes=dict(fleet.nodes)
    )
    kf.runs_before = kf.run_namespaces()
    core = kf.core
    for i, (name, (profile, _data)) in enumerate(zip(names, hosts, strict=True)):
        spec = fleet.nodes[name]
        mig = {g: list(layout) for g, layout in enumerate(spec.sharing.mig_layout) if layout is not None}
        mig = (mig_override or {}).get(i, mig)
        host_root, hardware = write_host(root / "hosts", name, profile, i, mig, cdi=spec.cdi)
        kf.hosts[name] = host_root
        stand_in = None
        if stand_ins:
            fake = FakeNode(root=root / "stand-ins" / name, profile=profile, hw=make_hardware(profile, i))
            fake.write()
            fake.prepare_driver()
            kf.stand_ins[name] = fake
            stand_in = fake.env()
        # the endpoint grace period short, so a stopped plugin's capacity drops in a test's time
        control.call(
            lab.control,
            {
                "op": "attach_host",
                "name": name,
                "root": str(host_root),
                "hardware": str(hardware),
                "grace_s": 1.0,
                **({"env": stand_in} if stand_in else {}),
            },
        )
        patch: dict[str, Any] = {"metadata": {"labels": spec.node_labels}}
        if spec.taints:
            patch["spec"] = {"taints": [t.as_dict() for t in spec.taints]}
        core.patch_node(name, patch)
    apply_addons(kube.Cluster(api=api, url=""), fleet, namespace, configs or {}, dcgm=dcgm, layout=layout)
    return kf


# The GPU Operator's layout (its ClusterPolicy's operands): namespace, DaemonSet and ConfigMap names
OPERATOR_NAMESPACE = "gpu-operator"
OPERATOR_NAMES = {
    "nvidia-device-plugin": "nvidia-device-plugin-daemonset",
    "gpu-feature-discovery": "gpu-feature-discovery",
    "nvidia-dcgm-exporter": "nvidia-dcgm-exporter",
    addons.DEVICE_PLUGIN_CONFIGMAP: "time-slicing-config",  # devicePlugin.config.name, as NVIDIA's docs name it
}


def operator_layout(manifest: dict[str, Any]) -> dict[str, Any]:
    """An add-on object renamed and relabelled as the GPU Operator names its operands (``app: <name>``, the
    config ConfigMap of ``devicePlugin.config.name``), its references to the ConfigMap too."""
    meta = manifest["metadata"]
    if manifest["kind"] in ("DaemonSet", "ConfigMap"):  # the ServiceAccount and RBAC keep their names
        meta["name"] = OPERATOR_NAMES.get(meta["name"], meta["name"])
    if manifest["kind"] == "DaemonSet":
        labels = {"app": meta["name"]}
        manifest["spec"]["selector"] = {"matchLabels": labels}
        manifest["spec"]["template"]["metadata"]["labels"] = labels
        for volume in manifest["spec"]["template"]["spec"].get("volumes") or []:
            if "configMap" in volume:
                volume["configMap"]["name"] = OPERATOR_NAMES.get(
                    volume["configMap"]["name"], volume["configMap"]["name"]
                )
    if manifest["kind"] == "Service":
        manifest["spec"]["selector"] = {"app": meta["name"]}
    return manifest


def apply_addons(
    cluster: kube.Cluster,
    fleet: Any,
    namespace: str,
    configs: dict[str, str],
    dcgm: bool = True,
    layout: str = "gpuready",
) -> None:
    """gpuready.deploy.addons' objects, server-side applied as the add-ons deploy applies them (in its order);
    ``layout="gpu-operator"``: renamed as the GPU Operator names them (``operator_layout``)."""
    settings = replace(addons.AddonSettings(), namespace=namespace)
    for manifest in addons.render_all(fleet, settings):
        if manifest["metadata"]["name"] == addons.DEVICE_PLUGIN_CONFIGMAP:
            manifest["data"] = {**manifest["data"], **configs}
        if not dcgm and manifest["metadata"]["name"] == "nvidia-dcgm-exporter":
            continue
        if layout == "gpu-operator":
            operator_layout(manifest)
        kube.apply(cluster, manifest)


def copy_suite(pytester: Any, *layers: str) -> Path:
    """The conformance files a test runs in-process, copied into its pytester directory (``conformance/``)."""
    target = pytester.path / "conformance"
    target.mkdir()
    for name in layers:
        shutil.copy(SUITE_DIR / name, target / name)
    return target
