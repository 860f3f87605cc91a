"""``gpuready values``: the spec rendered as Helm values for NVIDIA's own charts, for users who install them.

gpuready's node deploy makes the hosts (driver, toolkit, containerd, kubelet, the join with the spec's labels and
taints, the MIG layout); the cluster add-ons can come from gpuready's own manifests (``deploys/cluster_addons.py``)
or from NVIDIA's charts, installed by the user. This module is the second way: the same spec, as values for

* ``nvidia-device-plugin`` (the device plugin with GPU feature discovery, and node-feature-discovery as its
  dependency) and ``dcgm-exporter``: one release of each per pool, since pools differ in sharing mode, MIG strategy
  and taints; each release selects its pool's nodes and tolerates its pool's taints;
* ``gpu-operator``: one release for the whole cluster (it is one ClusterPolicy), with every pool's device-plugin
  config in one ConfigMap that each node picks by its ``nvidia.com/device-plugin.config`` label (gpuready joins
  every node with it), the driver and toolkit left to gpuready's node deploy.

The device-plugin configs are the spec's own (:attr:`gpuready.spec.NodeSpec.device_plugin_config`): the conformance
suite expects what these values make the plugin advertise. What a chart cannot express is returned as a warning with
the values (and written into the file's header), never dropped. Every key written must exist in the chart version
recorded in :mod:`gpuready.deploy.chart_keys` (a unit test walks every rendered path); ``docs/helm-values.md`` has
the table of what maps to what.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuready.atomic import write_text
from gpuready.deploy.chart_keys import CHARTS, DCGM_EXPORTER, DEVICE_PLUGIN, GPU_OPERATOR, ChartKeys
from gpuready.spec import Fleet, NodeSpec, SpecError, load_fleet
from gpuready.spec.kubesyntax import Taint, image_repository
from gpuready.spec.model import (
    RUNTIME_CLASS,
    SharingMode,
    render_yaml,
)

# The ConfigMap the GPU Operator creates from devicePlugin.config.data (devicePlugin.config.create): every pool's
# config under its key, the key each node names in its nvidia.com/device-plugin.config label.
OPERATOR_CONFIG_MAP = "gpuready-device-plugin-configs"
# The taint kubeadm puts on control-plane nodes: NFD's worker runs there too (both charts' defaults tolerate it).
CONTROL_PLANE_TOLERATION = {
    "key": "node-role.kubernetes.io/control-plane",
    "operator": "Exists",
    "effect": "NoSchedule",
}
# The GPU Operator's per-node switch for one operand (its docs: "nvidia.com/gpu.deploy.<operand>=false").
OPERATOR_SKIP_DEVICE_PLUGIN_LABEL = "nvidia.com/gpu.deploy.device-plugin"


@dataclass(frozen=True)
class Pool:
    """Nodes that one pair of per-pool releases serves: same labels, taints, GPUs and sharing."""

    name: str
    nodes: tuple[NodeSpec, ...]

    @property
    def node(self) -> NodeSpec:
        return self.nodes[0]

    @property
    def selector(self) -> dict[str, str]:
        """The labels every node of the pool is joined with (the inventory's and gpuready's): the releases'
        ``nodeSelector``."""
        common = dict(self.nodes[0].node_labels)
        for node in self.nodes[1:]:
            common = {k: v for k, v in common.items() if node.node_labels.get(k) == v}
        return dict(sorted(common.items()))


@dataclass
class Values:
    """One chart's values, the file they go to, and what the chart could not express."""

    chart: ChartKeys
    values: dict[str, Any]
    pool: str | None  # None: one release for the whole cluster
    nodes: list[str]
    warnings: list[str] = field(default_factory=list)

    @property
    def relative_path(self) -> Path:
        return Path(self.pool, f"{self.chart.chart}.yaml") if self.pool else Path(f"{self.chart.chart}.yaml")

    @property
    def release(self) -> str:
        short = {
            "nvidia-device-plugin": "nvdp",
            "dcgm-exporter": "dcgm-exporter",
            "gpu-operator": "gpu-operator",
        }
        return f"{short[self.chart.chart]}-{self.pool}"[:53] if self.pool else short[self.chart.chart]


@dataclass
class Rendered:
    """Every chart's values for a fleet, and the warnings that concern no single chart."""

    inventory: str
    namespace: str
    pools: list[Pool]
    values: list[Values]
    warnings: list[str] = field(default_factory=list)

    def all_warnings(self) -> list[str]:
        out = list(self.warnings)
        for v in self.values:
            where = f"{v.chart.chart} (pool {v.pool})" if v.pool else v.chart.chart
            out += [f"{where}: {w}" for w in v.warnings]
        return out

    def get(self, chart: str, pool: str | None = None) -> Values:
        for v in self.values:
            if v.chart.chart == chart and v.pool == pool:
                return v
        raise KeyError((chart, pool))


# --- pools ------------------------------------------------------------------------------------------------------


def _pool_key(node: NodeSpec) -> str:
    """What must be equal for two nodes to share a release: everything the per-pool values or warnings read."""
    return json.dumps(
        {
            "labels": sorted(node.labels.items()),
            "taints": [str(t) for t in node.taints],
            "model": node.gpu_model,
            "count": node.gpu_count,
            "sharing": repr(node.sharing),
            "config": node.device_plugin_config_key,
            "dra": node.dra,
            "default_runtime": bool(node.knobs["containerd_nvidia_default_runtime"]),
        },
        sort_keys=True,
    )


def _slug(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", text.lower())).strip("-")[:40].strip("-") or "pool"


def pools(fleet: Fleet) -> list[Pool]:
    """The fleet's nodes grouped into pools (in inventory order), each named by its ``pool`` label where it has one,
    else by its GPU model and device-plugin config (``nvidia-l4-time-slicing-4``); names are unique."""
    groups: dict[str, list[NodeSpec]] = {}
    for node in fleet.nodes.values():
        groups.setdefault(_pool_key(node), []).append(node)
    out: list[Pool] = []
    taken: set[str] = set()
    for nodes in groups.values():
        first = nodes[0]
        label = first.labels.get("pool")
        shared_label = label if label and all(n.labels.get("pool") == label for n in nodes) else None
        base = _slug(
            shared_label or f"{first.gpu_model.removeprefix('NVIDIA ')}-{first.device_plugin_config_key}"
        )
        name, i = base, 2
        while name in taken:
            name, i = f"{base}-{i}", i + 1
        taken.add(name)
        out.append(Pool(name, tuple(nodes)))
    return out


# --- pieces -----------------------------------------------------------------------------------------------------


def toleration(taint: Taint) -> dict[str, str]:
    """The toleration of one taint: ``Equal`` with its value, ``Exists`` when it has none."""
    if taint.value:
        return {"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}
    return {"key": taint.key, "operator": "Exists", "effect": taint.effect}


def tolerations(taints: Iterable[Taint]) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for t in taints:
        if (tol := toleration(t)) not in out:
            out.append(tol)
    return out


@dataclass(frozen=True)
class Image:
    repository: str  # registry/path/name
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, ref: str) -> Image:
        repository = image_repository(ref)
        rest = ref[len(repository) :]
        rest, _, digest = rest.partition("@")
        return cls(repository, rest.removeprefix(":") or None, digest or None)

    def chart_tag(self) -> str | None:
        """A tag for a chart that writes ``repository:tag``: the tag, with the digest appended when there is one
        (``v0.20.0@sha256:...``, a valid reference); None when there is no tag (``repository:@sha256`` is not)."""
        if self.tag is None:
            return None
        return f"{self.tag}@{self.digest}" if self.digest else self.tag

    def operator_parts(self) -> tuple[str, str, str]:
        """The GPU Operator's (repository, image, version): it writes ``repository/image:version``, and
        ``repository/image@version`` when the version is a digest."""
        registry_path, _, name = self.repository.rpartition("/")
        return registry_path, name, self.digest if self.digest and not self.tag else (self.tag or "latest")


def _image_values(knob: str, ref: str, warnings: list[str]) -> dict[str, Any]:
    image = Image.parse(ref)
    out: dict[str, Any] = {"repository": image.repository}
    if (tag := image.chart_tag()) is not None:
        out["tag"] = tag
    else:
        warnings.append(
            f"{knob} = {ref!r} is pinned by digest only: the chart writes image.repository:image.tag, so a "
            "digest without a tag cannot be expressed; the chart's default tag (its appVersion) is used. Pin a "
            "tag with the digest (repository:tag@sha256:...)"
        )
    return out


def _operator_image(knob: str, ref: str, warnings: list[str]) -> dict[str, str]:
    image = Image.parse(ref)
    repository, name, version = image.operator_parts()
    if image.tag and image.digest:
        warnings.append(
            f"{knob} = {ref!r}: the GPU Operator takes a tag or a digest as the version, not both; the tag "
            f"{image.tag} is written, the digest is not enforced"
        )
    return {"repository": repository, "image": name, "version": version}


def _mig_layout_warning(node: NodeSpec) -> str:
    by_layout: dict[tuple[str, ...] | None, list[int]] = {}
    for i, profiles in enumerate(node.sharing.mig_layout):
        by_layout.setdefault(profiles, []).append(i)
    shown = "; ".join(
        f"GPU {','.join(map(str, gpus))}: {'+'.join(layout) if layout else 'whole GPU'}"
        for layout, gpus in by_layout.items()
    )
    return (
        f"mig_layout ({shown}) is not a value of this chart: gpuready's node deploy "
        "(deploys/gpu_node.py) creates the MIG devices; the chart only advertises what exists "
        f"(mig_strategy {node.sharing.mig_strategy!r} is in the config)"
    )


NFD_OFF = (
    "addons_nfd = False: nfd.enabled is false; GFD's labels reach the Nodes only through the node-feature-discovery "
    "the cluster already runs"
)


def _nfd_on(node: NodeSpec) -> bool:
    """``addons_nfd`` (fleet-wide): whether gpuready's side installs node-feature-discovery, here through a chart."""
    return bool(node.knobs["addons_nfd"])


def _runtime_class(node: NodeSpec) -> dict[str, Any]:
    """The add-on pods need the nvidia runtime handler to see the driver (they request no GPU): RuntimeClass
    ``nvidia`` unless it is containerd's default runtime."""
    return {} if node.knobs["containerd_nvidia_default_runtime"] else {"runtimeClassName": RUNTIME_CLASS}


# --- the charts ---------------------------------------------------------------------------------------------------


def device_plugin_values(pool: Pool, fleet_pools: list[Pool]) -> Values:
    """nvidia-device-plugin for one pool: the pool's config (as the chart's integrated ConfigMap, its config
    manager following the node's ``nvidia.com/device-plugin.config`` label), GFD on, the pool's selector and
    taints. NFD (the chart's dependency, which turns GFD's features into Node labels) is installed once: by the
    first pool's release, its worker tolerating every pool's taints; by none with ``addons_nfd = False`` (the
    cluster runs its own)."""
    node = pool.node
    warnings: list[str] = []
    values: dict[str, Any] = {}
    if node.dra:
        values["devicePlugin"] = {"enabled": False}
        warnings.append(
            "gpu_allocation = 'dra': the device plugin is off on this pool (GFD stays on, for the labels); this "
            "chart has no DRA driver: install NVIDIA's DRA driver for GPUs (kubernetes-sigs/dra-driver-nvidia-gpu, "
            f"image {node.images.dra_driver}) with its own chart, or the GPU Operator's (gpu-operator.yaml)"
        )
    else:
        key = node.device_plugin_config_key
        values["config"] = {"map": {key: render_yaml(node.device_plugin_config)}, "default": key}
        # the chart mounts the driver root at /driver-root only when this is set; the plugin needs it for the CDI
        # specs it writes (gpuready's own DaemonSet mounts it too)
        values["nvidiaDriverRoot"] = "/"
    values["gfd"] = {"enabled": True}
    first = pool is fleet_pools[0]
    nfd: dict[str, Any] = {"enabled": first and _nfd_on(node)}
    if not _nfd_on(node):
        warnings.append(NFD_OFF)
    elif first:
        fleet_taints = [t for p in fleet_pools for t in p.node.taints]
        nfd["worker"] = {"tolerations": [CONTROL_PLANE_TOLERATION, *tolerations(fleet_taints)]}
    else:
        warnings.append(
            f"nfd.enabled is false: node-feature-discovery is installed once, by pool {fleet_pools[0].name}'s "
            "release (uninstalling that release removes it)"
        )
    values["nfd"] = nfd
    values["image"] = _image_values("device_plugin_image", node.images.device_plugin, warnings)
    if node.images.gfd != node.images.device_plugin:
        warnings.append(
            f"gfd_image = {node.images.gfd!r} differs from device_plugin_image: this chart runs GFD from "
            f"image.* ({node.images.device_plugin}); the GPU Operator's gfd.* can take it"
        )
    values["nodeSelector"] = pool.selector
    values["tolerations"] = tolerations(node.taints)
    values |= _runtime_class(node)
    if node.sharing.mode == SharingMode.MIG:
        warnings.append(_mig_layout_warning(node))
    if node.sharing.mode == SharingMode.MPS:
        warnings.append(
            "gpu_sharing = 'mps': the chart starts its MPS control daemon on nodes GFD labels "
            "nvidia.com/mps.capable=true (mps.root stays the chart's /run/nvidia/mps)"
        )
    return Values(DEVICE_PLUGIN, values, pool.name, [n.name for n in pool.nodes], warnings)


def dcgm_exporter_values(pool: Pool) -> Values:
    """dcgm-exporter for one pool: its image, the pool's selector and taints (the chart tolerates only the
    control-plane taint by default), pod mapping through DRA on a DRA pool."""
    node = pool.node
    warnings: list[str] = []
    values: dict[str, Any] = {
        "image": _image_values("dcgm_exporter_image", node.images.dcgm_exporter, warnings),
        "nodeSelector": pool.selector,
        "tolerations": tolerations(node.taints),
        **_runtime_class(node),
    }
    if node.dra:
        values["kubernetesDRA"] = {"enabled": True}
    return Values(DCGM_EXPORTER, values, pool.name, [n.name for n in pool.nodes], warnings)


def gpu_operator_values(fleet_pools: list[Pool]) -> Values:
    """gpu-operator for the whole cluster: gpuready's node deploy installs the driver and toolkit and creates the
    MIG layouts, so the operator's driver, toolkit and MIG manager are off; its device plugin reads every pool's
    config from one ConfigMap; CDI, MIG strategy, images and tolerations from the spec."""
    nodes = [n for p in fleet_pools for n in p.nodes]
    first = nodes[0]
    warnings: list[str] = []
    versions = sorted({(n.versions.driver, n.versions.toolkit) for n in nodes})
    warnings.append(
        "driver.enabled and toolkit.enabled are false: gpuready's node deploy installs and holds the driver "
        f"and toolkit ({', '.join(f'driver {d}, toolkit {t}' for d, t in versions)}) and upgrades them "
        "(deploys/upgrade_driver.py; the upgrade_* knobs are not driver.upgradePolicy)"
    )
    values: dict[str, Any] = {"driver": {"enabled": False}, "toolkit": {"enabled": False}}

    cdi = {bool(n.cdi) for n in nodes}
    values["cdi"] = {"enabled": first.cdi}
    if len(cdi) > 1:
        warnings.append(
            f"nvidia_cdi differs between pools; cdi.enabled is one value for the cluster: {first.cdi} "
            f"(pool {fleet_pools[0].name}'s) is written"
        )

    mig_pools = [p for p in fleet_pools if p.node.sharing.mode == SharingMode.MIG and not p.node.dra]
    strategies = {p.node.sharing.mig_strategy for p in mig_pools}
    if mig_pools:
        values["mig"] = {"strategy": mig_pools[0].node.sharing.mig_strategy}
    if len(strategies) > 1:
        shown = ", ".join(f"{p.name}: {p.node.sharing.mig_strategy}" for p in mig_pools)
        warnings.append(
            f"mig_strategy differs between pools ({shown}); the operator's mig.strategy is one value for the "
            f"cluster and overrides each config's flags.migStrategy: {mig_pools[0].node.sharing.mig_strategy} "
            "is written, so the other pools advertise other resources than the spec expects. Use the per-pool "
            "nvidia-device-plugin releases instead"
        )
    values["migManager"] = {"enabled": False}
    for p in mig_pools:
        warnings.append(f"pool {p.name}: {_mig_layout_warning(p.node)}; migManager.enabled is false so it "
                        "does not replace them")  # fmt: skip

    configs: dict[str, str] = {}
    for p in fleet_pools:
        if not p.node.dra:
            configs.setdefault(p.node.device_plugin_config_key, render_yaml(p.node.device_plugin_config))
    plugin: dict[str, Any] = _operator_image("device_plugin_image", first.images.device_plugin, warnings)
    if configs:
        plugin["config"] = {
            "create": True,
            "name": OPERATOR_CONFIG_MAP,
            "data": dict(sorted(configs.items())),
        }
    values["devicePlugin"] = plugin
    values["gfd"] = _operator_image("gfd_image", first.images.gfd, warnings)
    values["dcgmExporter"] = _operator_image("dcgm_exporter_image", first.images.dcgm_exporter, warnings)

    fleet_taints = tolerations(t for p in fleet_pools for t in p.node.taints)
    values["daemonsets"] = {"tolerations": fleet_taints}
    if _nfd_on(first):
        values["node-feature-discovery"] = {
            "worker": {"tolerations": [CONTROL_PLANE_TOLERATION, *fleet_taints]}
        }
    else:
        values["nfd"] = {"enabled": False}
        warnings.append(NFD_OFF)

    dra_pools = [p for p in fleet_pools if p.node.dra]
    if dra_pools:
        values["gpuCluster"] = {"deployCR": True}
        values["draDriver"] = _operator_image("dra_driver_image", first.images.dra_driver, warnings)
        names = ", ".join(p.name for p in dra_pools)
        warnings.append(
            f"gpu_allocation = 'dra' on pool(s) {names}: the DRA driver comes from the operator's GPUCluster "
            "(gpuCluster.deployCR), but the operator's device plugin also runs on every GPU node unless the node "
            f"is labelled {OPERATOR_SKIP_DEVICE_PLUGIN_LABEL}=false: add it to those pools' node_labels"
        )
    if any(p.node.knobs["containerd_nvidia_default_runtime"] for p in fleet_pools):
        warnings.append(
            "containerd_nvidia_default_runtime is set: the operator's operands still run with RuntimeClass "
            "operator.runtimeClass (nvidia), which gpuready's containerd config provides"
        )
    return Values(GPU_OPERATOR, values, None, [n.name for n in nodes], warnings)


def _selector_overlaps(fleet_pools: list[Pool]) -> list[str]:
    """Two per-pool releases on one node (two device plugins registering the same resource) when a pool's
    selector also matches another pool's node."""
    out = []
    for p in fleet_pools:
        for other in fleet_pools:
            if other is p:
                continue
            hit = [n.name for n in other.nodes if p.selector.items() <= n.node_labels.items()]
            if hit:
                out.append(
                    f"pool {p.name}'s nodeSelector {p.selector} also selects node(s) {', '.join(hit[:3])} of pool "
                    f"{other.name}: two releases would run there; give the pools a node_labels entry that tells "
                    "them apart (e.g. {'pool': '...'})"
                )
    return out


def _fleet_warnings(fleet: Fleet, fleet_pools: list[Pool]) -> list[str]:
    first = next(iter(fleet.nodes.values()))
    out = _selector_overlaps(fleet_pools)
    if first.knobs["gpu_resource_quotas"]:
        out.append(
            "gpu_resource_quotas is set: no chart creates ResourceQuotas; deploys/cluster_addons.py applies them "
            "(or kubectl)"
        )
    if first.knobs["priority_classes"]:
        out.append(
            "priority_classes is set: no chart creates PriorityClasses; deploys/cluster_addons.py applies them "
            "(or kubectl)"
        )
    return out


def render(fleet: Fleet) -> Rendered:
    """Every chart's values for the fleet: a device plugin and a dcgm-exporter per pool, one GPU Operator."""
    fleet_pools = pools(fleet)
    if not fleet_pools:
        raise SpecError(fleet.inventory, ["the inventory has no GPU node: nothing to render values for"])
    values: list[Values] = []
    for pool in fleet_pools:
        values.append(device_plugin_values(pool, fleet_pools))
        values.append(dcgm_exporter_values(pool))
    values.append(gpu_operator_values(fleet_pools))
    namespace = str(fleet_pools[0].node.knobs["addons_namespace"])
    return Rendered(fleet.inventory, namespace, fleet_pools, values, _fleet_warnings(fleet, fleet_pools))


# --- files ------------------------------------------------------------------------------------------------------


def key_paths(values: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key path of a values document, down to its leaves (lists are leaves)."""
    if not isinstance(values, dict) or not values:
        return [prefix] if prefix else []
    out: list[tuple[str, ...]] = []
    for key, value in values.items():
        out += key_paths(value, (*prefix, str(key)))
    return out


def unknown_keys(v: Values) -> list[str]:
    """Key paths written that the recorded chart version does not have (a bug: the test says so)."""
    return sorted({bad for path in key_paths(v.values) if (bad := v.chart.unknown(path))})


class _Dumper(yaml.SafeDumper):
    """Plain YAML for people: no anchors for repeated objects, multi-line strings (the configs) as blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _string(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _string)


def dump(values: dict[str, Any]) -> str:
    return yaml.dump(values, Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def document(v: Values, rendered: Rendered, out_dir: str | Path | None = None) -> str:
    """The YAML file of one chart's values: a header naming the chart version, the pool, the install command and
    the warnings, then the values."""
    chart = v.chart
    where = (
        f"pool {v.pool}: {len(v.nodes)} node(s)"
        if v.pool
        else f"the whole cluster: {len(v.nodes)} GPU node(s)"
    )
    lines = [
        f"# Helm values for NVIDIA's {chart.chart} chart, version {chart.version} ({chart.helm_repo})",
        f"# rendered by `gpuready values` from {rendered.inventory}, {where} ({', '.join(v.nodes[:3])}"
        + (", ...)" if len(v.nodes) > 3 else ")"),
        f"# install: helm upgrade --install {v.release} {chart.chart} --repo {chart.helm_repo} "
        f"--version {chart.version} --namespace {rendered.namespace} --create-namespace -f {Path(out_dir or '.', v.relative_path)}",
        f"# keys checked against {chart.source} ({chart.commit[:12]}); regenerate rather than edit",
    ]
    for warning in v.warnings:
        lines.append(f"# WARNING: {warning}")
    return "\n".join(lines) + "\n" + dump(v.values)


def write(rendered: Rendered, out_dir: str | Path) -> list[Path]:
    """Write every chart's values under ``out_dir``: ``<pool>/<chart>.yaml`` per pool, ``gpu-operator.yaml`` for
    the cluster. Returns the paths written."""
    root = Path(out_dir)
    return [write_text(root / v.relative_path, document(v, rendered, root)) for v in rendered.values]


# --- the subcommand -----------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inventory", help="pyinfra inventory file, e.g. inventory/example.py")
    parser.add_argument(
        "--out", default="values", metavar="DIR", help="where the files go (default ./values): "
        "DIR/<pool>/nvidia-device-plugin.yaml, DIR/<pool>/dcgm-exporter.yaml, DIR/gpu-operator.yaml",
    )  # fmt: skip
    parser.add_argument(
        "--chart",
        action="append",
        choices=sorted(CHARTS),
        default=None,
        help="only this chart (repeatable; default: all three)",
    )


def run(args: argparse.Namespace) -> int:
    """``gpuready values INVENTORY [--out DIR] [--chart NAME]``: exit 2 on a bad inventory, else 0; the files
    written go to stdout, the warnings to stderr."""
    try:
        rendered = render(load_fleet(args.inventory))
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.chart:
        rendered.values = [v for v in rendered.values if v.chart.chart in args.chart]
    for path in write(rendered, args.out):
        print(path)
    for warning in rendered.all_warnings():
        print(f"gpuready values: WARNING: {warning}", file=sys.stderr)
    return 0
