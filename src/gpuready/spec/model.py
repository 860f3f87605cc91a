"""The fleet model: one typed view of a validated inventory, and every expectation derived from it.

The deploys and the conformance suite both read a node's expectations from here and nowhere else: if the deploy
renders a time-slicing config with ``replicas: 4`` for 8 GPUs, the conformance suite gets "32 ``nvidia.com/gpu``
allocatable" from the same :class:`NodeSpec`. The inventory is read and validated by :mod:`.inventory`.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuready.nvidia import catalogue, diag_packages
from gpuready.spec import knobs, kubesyntax
from gpuready.spec.secrets import mask

SHARING_MODES = knobs.SHARING_MODES
SharingMode = knobs.SharingMode
SHARED_BY_TIME = (SharingMode.TIME_SLICING, SharingMode.MPS)  # replicas of whole GPUs
GPU_RESOURCE = "nvidia.com/gpu"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
RUNTIME_CLASS = "nvidia"  # the RuntimeClass (and containerd handler) of the nvidia runtime
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
DRA_ALLOCATION_LABEL = "gpuready.io/gpu-allocation"  # = gpuready.spec.dra.ALLOCATION_LABEL
# What a GPU pod tolerates: the usual GPU-node taint (node_taints' default), and a cordon (a node is validated while
# cordoned: the rolling upgrade uncordons it only when it passes, as the GPU Operator's validator does).
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# The device-plugin ConfigMap's key config-manager selects while it has not yet read the node's label (every start
# does, see Fleet.device_plugin_configs), and what it holds when no node's own config has that key: a node with no
# sharing in CDI mode (NodeSpec.device_plugin_config), so whole GPUs and no MIG devices until the label's key loads.
DEFAULT_DEVICE_PLUGIN_CONFIG = "default"
PLAIN_DEVICE_PLUGIN_CONFIG: dict[str, Any] = {
    "version": "v1",
    "flags": {"migStrategy": "none", "plugin": {"deviceListStrategy": "cdi-cri"}},
}
CORDON_TOLERATION = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}


class SpecError(ValueError):
    """A bad inventory; ``problems`` holds one line per problem, each naming file, host, key, value and what is allowed."""

    def __init__(self, inventory: str, problems: list[str]):
        self.inventory = inventory
        self.problems = [mask(p) for p in problems]  # a token typed into the inventory is never echoed
        super().__init__(
            f"{inventory}: {len(self.problems)} problem(s) in the inventory:\n"
            + "\n".join(f"  - {p}" for p in self.problems)
        )


@dataclass(frozen=True)
class Sharing:
    """How a node's GPUs are shared."""

    mode: SharingMode = SharingMode.NONE
    replicas: int = 1
    rename: bool = False
    fail_requests_greater_than_one: bool = False
    mig_strategy: str = "none"  # the device plugin's migStrategy: none | single | mixed
    mig_layout: tuple[tuple[str, ...] | None, ...] = ()  # per GPU index; None = whole GPU (MIG disabled)
    mig_replicas: int = 1  # time-slicing of MIG devices


@dataclass(frozen=True)
class Versions:
    driver: str
    driver_branch: str
    driver_package: str  # apt version, e.g. 580.178.04-1
    driver_source: str
    toolkit: str
    toolkit_package: str
    containerd_package: str
    kubernetes: str
    kubernetes_minor: str
    kubernetes_package: str


@dataclass(frozen=True)
class UpgradePolicy:
    """How deploys/upgrade_driver.py takes nodes out of service (fleet-wide knobs: set them in group_data/all.py)."""

    batch_size: int = knobs.KNOBS["upgrade_batch_size"].default
    max_unavailable: int = knobs.KNOBS["upgrade_max_unavailable"].default
    drain_gpu_pods_only: bool = knobs.KNOBS["drain_gpu_pods_only"].default
    drain_force: bool = knobs.KNOBS["drain_force"].default
    drain_timeout: int = knobs.KNOBS["drain_timeout"].default
    node_ready_timeout: int = knobs.KNOBS["node_ready_timeout"].default


DIAG_FLOOR_KEYS = ("h2d_gbps", "d2h_gbps", "peer_gbps")


@dataclass(frozen=True)
class Diag:
    """How the diag layer judges a node: the DCGM run level and floors that replace the catalogue's."""

    dcgm_level: int = 1
    floors: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Images:
    """Every container image gpuready runs: the add-ons' and the conformance suite's. The defaults are the knobs'
    (gpuready.spec.knobs); a mirror or an air-gapped registry is one knob per image."""

    device_plugin: str = knobs.KNOBS["device_plugin_image"].default
    gfd: str = knobs.KNOBS["device_plugin_image"].default  # GPU feature discovery ships in the plugin's image
    dcgm_exporter: str = knobs.KNOBS["dcgm_exporter_image"].default
    vectoradd: str = knobs.KNOBS["vectoradd_image"].default
    cuda_base: str = knobs.KNOBS["cuda_base_image"].default
    probe: str = knobs.KNOBS["probe_image"].default  # --connection pod
    dra_driver: str = knobs.KNOBS["dra_driver_image"].default
    nfd: str = knobs.KNOBS["nfd_image"].default  # node-feature-discovery (addons_nfd)


IMAGE_KNOBS = {
    "device_plugin_image": "device_plugin",
    "gfd_image": "gfd",
    "dra_driver_image": "dra_driver",
    "nfd_image": "nfd",
    "dcgm_exporter_image": "dcgm_exporter",
    "vectoradd_image": "vectoradd",
    "cuda_base_image": "cuda_base",
    "probe_image": "probe",
}


@dataclass(frozen=True)
class Join:
    enabled: bool
    api_endpoint: str | None
    ca_cert_hash: str | None
    token_file: str | None
    token_env: str | None
    cri_socket: str
    ignore_preflight_errors: tuple[str, ...] = ()
    patches_dir: str | None = None

    def read_token(self) -> str:
        """The bootstrap token from the file or environment named in the inventory (never from a command line)."""
        if self.token_env and os.environ.get(self.token_env):
            return os.environ[self.token_env].strip()
        if self.token_file:
            path = Path(self.token_file).expanduser()
            if path.exists():
                return path.read_text().strip()
        raise SpecError(
            "join",
            [
                f"no bootstrap token: set ${self.token_env} or write it to {self.token_file or '(kube_join_token_file)'}"
            ],
        )


@dataclass(frozen=True)
class NodeSpec:
    """What one GPU node must be. Every expectation the conformance suite checks is a property of this."""

    name: str
    gpu_model: str  # the name nvidia-smi prints
    gpu_count: int
    gpu_memory_mib: int | None
    nvswitch: bool
    sharing: Sharing
    versions: Versions
    join: Join
    labels: Mapping[str, str]
    taints: tuple[kubesyntax.Taint, ...]
    repos: Mapping[str, str]
    upgrade: UpgradePolicy = UpgradePolicy()
    diag: Diag = Diag()
    images: Images = Images()
    # every declared knob (gpuready.spec.knobs), validated, the default where the inventory leaves it out: what the
    # deploys and the suite read; nothing reads the host's raw data
    knobs: Mapping[str, Any] = field(repr=False, compare=False, default_factory=knobs.defaults)
    # how pyinfra reaches the host (ssh_*, _sudo: pyinfra's connector data, not gpuready knobs), for the SSH runner
    connection: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def model(self) -> catalogue.GpuModel | None:
        try:
            return catalogue.lookup_model(self.gpu_model)
        except KeyError:
            return None

    @property
    def product(self) -> str:
        """The GPU feature discovery product name of a whole GPU, e.g. NVIDIA-H100-80GB-HBM3."""
        return catalogue.product_label(self.gpu_model)

    @property
    def mig_enabled_gpus(self) -> list[int]:
        return [i for i, layout in enumerate(self.sharing.mig_layout) if layout is not None]

    def mig_device_counts(self) -> dict[str, int]:
        """MIG devices per profile name over all GPUs of the node."""
        counts: dict[str, int] = {}
        for layout in self.sharing.mig_layout:
            for profile in layout or ():
                counts[profile] = counts.get(profile, 0) + 1
        return counts

    @property
    def cdi(self) -> bool:
        """CDI mode (``nvidia_cdi``): GPU pods get CDI devices and need no ``runtimeClassName``."""
        return bool(self.knobs["nvidia_cdi"])

    @property
    def runtime_class(self) -> str | None:
        """The ``runtimeClassName`` a GPU pod on this node needs: none in CDI mode, ``nvidia`` otherwise."""
        return None if self.cdi else RUNTIME_CLASS

    @property
    def dra(self) -> bool:
        """``gpu_allocation = "dra"``: pods get this node's GPUs through ResourceClaims (gpuready.spec.dra)."""
        return self.knobs["gpu_allocation"] == "dra"

    @property
    def expected_devices(self) -> list[Any]:
        """The devices (:class:`gpuready.spec.dra.ExpectedDevice`) this node's ResourceSlices must hold: one per
        GPU with MIG off and one per MIG device; none for a device-plugin node."""
        from gpuready.spec import dra

        return dra.expected_devices(self)

    @property
    def device_list_strategy(self) -> str:
        """How the device plugin hands devices to the runtime: CDI names through the CRI (CDI mode), or
        ``NVIDIA_VISIBLE_DEVICES`` for the ``nvidia`` runtime's hook (runtime-class mode)."""
        return "cdi-cri" if self.cdi else "envvar"

    @property
    def device_plugin_config(self) -> dict[str, Any]:
        """The k8s-device-plugin config (schema ``version: v1``) this node runs with."""
        s = self.sharing
        config: dict[str, Any] = {
            "version": "v1",
            "flags": {
                "migStrategy": s.mig_strategy,
                "plugin": {"deviceListStrategy": self.device_list_strategy},
            },
        }
        if s.mode in SHARED_BY_TIME:
            name = "timeSlicing" if s.mode == SharingMode.TIME_SLICING else "mps"
            block: dict[str, Any] = {"renameByDefault": s.rename}
            if s.mode == SharingMode.TIME_SLICING:
                block["failRequestsGreaterThanOne"] = s.fail_requests_greater_than_one
            block["resources"] = [{"name": GPU_RESOURCE, "replicas": s.replicas}]
            config["sharing"] = {name: block}
        elif s.mode == SharingMode.MIG and s.mig_replicas > 1:
            names = (
                [GPU_RESOURCE]
                if s.mig_strategy == "single"
                else sorted(
                    catalogue.mig_profiles(self.gpu_model)[p].resource_name for p in self.mig_device_counts()
                )
            )
            config["sharing"] = {
                "timeSlicing": {
                    "renameByDefault": s.rename,
                    "failRequestsGreaterThanOne": s.fail_requests_greater_than_one,
                    "resources": [{"name": n, "replicas": s.mig_replicas} for n in names],
                }
            }
        return config

    @property
    def device_plugin_config_key(self) -> str:
        """The ConfigMap key (and ``nvidia.com/device-plugin.config`` label value) of this node's config.

        Derived from the config's content so nodes with the same config share a key, and a changed config gets a
        new key (the device plugin reloads when the label changes).
        """
        s = self.sharing
        strategy = "" if self.cdi else f"-{self.device_list_strategy}"
        if s.mode == SharingMode.NONE:
            return DEFAULT_DEVICE_PLUGIN_CONFIG + strategy
        if s.mode in SHARED_BY_TIME:
            return f"{s.mode}-{s.replicas}{'-renamed' if s.rename else ''}{strategy}"
        key = f"mig-{s.mig_strategy}"
        return key + (f"-time-slicing-{s.mig_replicas}" if s.mig_replicas > 1 else "") + strategy

    @property
    def expected_allocatable(self) -> dict[str, int]:
        """``nvidia.com/*`` allocatable (and capacity) the device plugin must advertise on this node (none on a
        ``dra`` node: the device plugin does not run there)."""
        s = self.sharing
        if self.dra:
            return {}
        if s.mode in SHARED_BY_TIME:
            name = GPU_RESOURCE + (".shared" if s.rename else "")
            return {name: self.gpu_count * s.replicas}
        if s.mode == SharingMode.NONE:
            return {GPU_RESOURCE: self.gpu_count}
        whole = len(s.mig_layout) - len(self.mig_enabled_gpus)
        counts = self.mig_device_counts()
        rename = ".shared" if s.rename and s.mig_replicas > 1 else ""
        if s.mig_strategy == "single":
            return {GPU_RESOURCE + rename: sum(counts.values()) * s.mig_replicas}
        profiles = catalogue.mig_profiles(self.gpu_model)
        out = {profiles[p].resource_name + rename: n * s.mig_replicas for p, n in sorted(counts.items())}
        if whole:
            out[GPU_RESOURCE] = whole
        return out

    @property
    def expected_labels(self) -> dict[str, str]:
        """GPU feature discovery labels that must be on the node (the stable subset; timestamps etc. excluded)."""
        s = self.sharing
        labels: dict[str, str] = {}
        if s.mode != SharingMode.MIG:
            shared = s.mode != SharingMode.NONE and not s.rename
            labels["nvidia.com/gpu.product"] = self.product + ("-SHARED" if shared else "")
            labels["nvidia.com/gpu.count"] = str(self.gpu_count)
            labels["nvidia.com/gpu.replicas"] = str(s.replicas)
            labels["nvidia.com/gpu.sharing-strategy"] = s.mode
            if self.gpu_memory_mib:
                labels["nvidia.com/gpu.memory"] = str(self.gpu_memory_mib)
            return labels
        profiles = catalogue.mig_profiles(self.gpu_model)
        counts = self.mig_device_counts()
        shared = s.mig_replicas > 1 and not s.rename
        sharing_strategy = "time-slicing" if s.mig_replicas > 1 else "none"
        labels["nvidia.com/mig.strategy"] = s.mig_strategy
        if s.mig_strategy == "single":
            (profile,) = counts
            labels["nvidia.com/gpu.product"] = catalogue.product_label(self.gpu_model, profile) + (
                "-SHARED" if shared else ""
            )
            labels["nvidia.com/gpu.count"] = str(counts[profile])
            labels["nvidia.com/gpu.replicas"] = str(s.mig_replicas)
            labels["nvidia.com/gpu.sharing-strategy"] = sharing_strategy
            labels["nvidia.com/gpu.memory"] = str(profiles[profile].memory_mib)
            return labels
        labels["nvidia.com/gpu.product"] = self.product
        labels["nvidia.com/gpu.count"] = str(self.gpu_count)
        for profile, n in sorted(counts.items()):
            prefix = profiles[profile].resource_name
            labels[f"{prefix}.count"] = str(n)
            labels[f"{prefix}.product"] = catalogue.product_label(self.gpu_model, profile) + (
                "-SHARED" if shared else ""
            )
            labels[f"{prefix}.replicas"] = str(s.mig_replicas)
            labels[f"{prefix}.sharing-strategy"] = sharing_strategy
            labels[f"{prefix}.memory"] = str(profiles[profile].memory_mib)
        return labels

    @property
    def node_labels(self) -> dict[str, str]:
        """Labels the node is joined with: the inventory's, the GPU-node marker the add-ons select on (the GPU
        Operator's ``nvidia.com/gpu.present``), and the device-plugin config selector."""
        labels = {
            **self.labels,
            GPU_PRESENT_LABEL: "true",
            DEVICE_PLUGIN_CONFIG_LABEL: self.device_plugin_config_key,
        }
        if self.dra:  # the DRA kubelet plugin selects these nodes and the device plugin avoids them
            labels[DRA_ALLOCATION_LABEL] = "dra"
        return labels

    @property
    def apt_packages(self) -> dict[str, list[str]]:
        """``name=version`` pins the node deploy installs, per step."""
        v = self.versions
        driver = [f"nvidia-driver={v.driver_package}", f"nvidia-persistenced={v.driver_package}"]
        if self.nvswitch:
            driver.append(f"nvidia-fabricmanager={v.driver_package}")
        tk = v.toolkit_package
        return {
            "driver": driver,
            "toolkit": [
                f"nvidia-container-toolkit={tk}",
                f"nvidia-container-toolkit-base={tk}",
                f"libnvidia-container-tools={tk}",
                f"libnvidia-container1={tk}",
            ],
            "containerd": [v.containerd_package],
            "kubernetes": [f"{p}={v.kubernetes_package}" for p in ("kubelet", "kubeadm", "kubectl")],
            **({"diag": self.diag_packages} if self.diag_tools else {}),
        }

    @property
    def diag_tools(self) -> bool:
        """``diag_tools``: the node deploy installs DCGM (and nvbandwidth where a repository has it)."""
        return bool(self.knobs["diag_tools"])

    @property
    def diag_packages(self) -> list[str]:
        """DCGM 4's packages for the pinned driver's CUDA major (names: DCGM is not held at a version)."""
        return diag_packages.dcgm_packages(self.versions.driver)


@dataclass(frozen=True)
class Fleet:
    inventory: str
    nodes: dict[str, NodeSpec]

    def select(self, names: list[str] | None) -> list[NodeSpec]:
        """Nodes by name, in inventory order; unknown names are an error listing the known ones."""
        if not names:
            return list(self.nodes.values())
        unknown = [n for n in names if n not in self.nodes]
        if unknown:
            raise SpecError(
                self.inventory, [f"unknown node(s) {unknown}; the inventory has {list(self.nodes)}"]
            )
        return [self.nodes[n] for n in names]

    def security_warnings(self) -> list[str]:
        """Pinned driver and toolkit versions with NVIDIA security advisories, one line per version (not per node):
        what ``gpuready plan`` and every deploy say before anything is installed."""
        from gpuready.nvidia import security

        pins: dict[tuple[str, str, str], list[str]] = {}
        for node in self.nodes.values():
            pins.setdefault(("NVIDIA driver", "nvidia_driver_version", node.versions.driver), []).append(
                node.name
            )
            toolkit = ("NVIDIA Container Toolkit", "nvidia_container_toolkit_version", node.versions.toolkit)
            pins.setdefault(toolkit, []).append(node.name)
        lines = []
        for (what, knob, version), names in pins.items():
            found = (
                security.driver_advisories(version)
                if knob == "nvidia_driver_version"
                else security.toolkit_advisories(version)
            )
            if found:
                who = names[0] if len(names) == 1 else f"{len(names)} nodes ({names[0]}, ...)"
                lines.append(
                    f"{knob} = {version!r} ({who}): {what} {version} is affected by "
                    f"{security.describe(found, version)}; sources: "
                    + ", ".join(sorted({a.source for a in found}))
                )
        return lines

    def cuda_warnings(self) -> list[str]:
        """Images whose CUDA is newer than the pinned driver supports, one line per (driver, image): their pods
        would fail with "CUDA driver version is insufficient" on those nodes."""
        from gpuready.nvidia import cuda

        pins: dict[tuple[str, str, str], list[str]] = {}
        for node in self.nodes.values():
            for knob, image in (
                ("vectoradd_image", node.images.vectoradd),
                ("cuda_base_image", node.images.cuda_base),
            ):
                pins.setdefault((node.versions.driver, knob, image), []).append(node.name)
        lines = []
        for (driver, knob, image), names in pins.items():
            needs, supports = cuda.image_cuda(image), cuda.driver_cuda(driver)
            if needs and supports and needs > supports:
                who = names[0] if len(names) == 1 else f"{len(names)} nodes ({names[0]}, ...)"
                lines.append(
                    f"{knob} = {image!r} needs CUDA {cuda.show(needs)}, but nvidia_driver_version = {driver!r} "
                    f"({who}) supports CUDA {cuda.show(supports)} at most: its pods would fail there"
                )
        return lines

    def device_plugin_configs(self) -> dict[str, str]:
        """The device-plugin ConfigMap ``data``: one rendered YAML per distinct node configuration, and always a
        ``default`` (:data:`PLAIN_DEVICE_PLUGIN_CONFIG` where no node's own config has that key).

        NVIDIA's config-manager (k8s-device-plugin v0.19.3 ``cmd/config-manager/main.go``) reads the node label
        through ``SyncableConfig.Get``, whose first call returns before the informer has listed the Node: every
        start first selects ``DEFAULT_CONFIG`` (``default``), then the label's key. Without a ``default`` key the
        init container exits "specified config  does not exist" and the plugin and GFD pods crash-loop on every
        node (found by the real plugin on a real-kubelet lab host, docs/lab-real-kubelet.md).

        That first config must not advertise a resource the node's own config drops: the kubelet keeps a
        resource whose plugin stopped advertising it in the Node's capacity for its 5-minute grace period (seen on
        the lab: a MIG ``mixed`` node first registered ``nvidia.com/gpu: 4`` under ``migStrategy: none``, and its
        capacity stayed 4 with allocatable 0). So where every MIG pool of the fleet uses ``mixed``, the ``default``
        config (plain nodes' own, or the plain one) uses ``mixed`` too: the same as ``none`` on GPUs without MIG. A
        fleet that mixes ``single`` and ``mixed`` pools keeps ``none``, and its ``mixed`` nodes show that stale
        capacity for the grace period after each plugin start.
        """
        strategies = {
            n.sharing.mig_strategy for n in self.nodes.values() if n.sharing.mode == SharingMode.MIG
        }
        configs: dict[str, dict[str, Any]] = {}
        for node in self.nodes.values():
            configs.setdefault(node.device_plugin_config_key, node.device_plugin_config)
        default = copy.deepcopy(configs.get(DEFAULT_DEVICE_PLUGIN_CONFIG, PLAIN_DEVICE_PLUGIN_CONFIG))
        if strategies == {"mixed"}:
            default["flags"]["migStrategy"] = "mixed"
        configs[DEFAULT_DEVICE_PLUGIN_CONFIG] = default
        return {key: render_yaml(configs[key]) for key in sorted(configs)}


def render_yaml(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
