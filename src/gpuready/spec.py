"""The fleet spec: one typed, validated view of the inventory, and every expectation derived from it.

The deploys and the conformance suite both read a node's expectations from here and nowhere else: if the deploy
renders a time-slicing config with ``replicas: 4`` for 8 GPUs, the conformance suite gets "32 ``nvidia.com/gpu``
allocatable" from the same :class:`NodeSpec`. Validation happens here too, before any connection is opened, and
reports every problem at once so a user fixes an inventory in one pass.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuready import knobs, kubesyntax
from gpuready.nvidia import catalogue

SHARING_MODES = knobs.SHARING_MODES
GPU_RESOURCE = "nvidia.com/gpu"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"

_DRIVER_VERSION = re.compile(r"^(\d{3})\.(\d{1,3})(\.\d{1,3})?$")
_SEMVER = re.compile(r"^\d+\.\d+\.\d+$")
_CA_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
_ENDPOINT = re.compile(r"^[A-Za-z0-9.\-\[\]:]+:\d{1,5}$")


class SpecError(ValueError):
    """A bad inventory; ``problems`` holds one line per problem, each naming file, host, key, value and what is allowed."""

    def __init__(self, inventory: str, problems: list[str]):
        self.inventory = inventory
        self.problems = problems
        super().__init__(
            f"{inventory}: {len(problems)} problem(s) in the inventory:\n"
            + "\n".join(f"  - {p}" for p in problems)
        )


@dataclass(frozen=True)
class Sharing:
    """How a node's GPUs are shared; ``mode`` is one of SHARING_MODES."""

    mode: str = "none"
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
    (gpuready.knobs); a mirror or an air-gapped registry is one knob per image."""

    device_plugin: str = knobs.KNOBS["device_plugin_image"].default
    gfd: str = knobs.KNOBS["device_plugin_image"].default  # GPU feature discovery ships in the plugin's image
    dcgm_exporter: str = knobs.KNOBS["dcgm_exporter_image"].default
    vectoradd: str = knobs.KNOBS["vectoradd_image"].default
    cuda_base: str = knobs.KNOBS["cuda_base_image"].default


IMAGE_KNOBS = {
    "device_plugin_image": "device_plugin",
    "gfd_image": "gfd",
    "dcgm_exporter_image": "dcgm_exporter",
    "vectoradd_image": "vectoradd",
    "cuda_base_image": "cuda_base",
}


@dataclass(frozen=True)
class Join:
    enabled: bool
    api_endpoint: str | None
    ca_cert_hash: str | None
    token_file: str | None
    token_env: str | None
    cri_socket: str

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
    # every declared knob (gpuready.knobs), validated, the default where the inventory leaves it out: what the
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
    def device_plugin_config(self) -> dict[str, Any]:
        """The k8s-device-plugin config (schema ``version: v1``) this node runs with."""
        s = self.sharing
        config: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": s.mig_strategy}}
        if s.mode in ("time-slicing", "mps"):
            name = "timeSlicing" if s.mode == "time-slicing" else "mps"
            block: dict[str, Any] = {"renameByDefault": s.rename}
            if s.mode == "time-slicing":
                block["failRequestsGreaterThanOne"] = s.fail_requests_greater_than_one
            block["resources"] = [{"name": GPU_RESOURCE, "replicas": s.replicas}]
            config["sharing"] = {name: block}
        elif s.mode == "mig" and s.mig_replicas > 1:
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
        if s.mode == "none":
            return "default"
        if s.mode in ("time-slicing", "mps"):
            return f"{s.mode}-{s.replicas}{'-renamed' if s.rename else ''}"
        key = f"mig-{s.mig_strategy}"
        return key + (f"-time-slicing-{s.mig_replicas}" if s.mig_replicas > 1 else "")

    @property
    def expected_allocatable(self) -> dict[str, int]:
        """``nvidia.com/*`` allocatable (and capacity) the device plugin must advertise on this node."""
        s = self.sharing
        if s.mode in ("time-slicing", "mps"):
            name = GPU_RESOURCE + (".shared" if s.rename else "")
            return {name: self.gpu_count * s.replicas}
        if s.mode == "none":
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
        if s.mode in ("none", "time-slicing", "mps"):
            shared = s.mode != "none" and not s.rename
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
        return {
            **self.labels,
            GPU_PRESENT_LABEL: "true",
            DEVICE_PLUGIN_CONFIG_LABEL: self.device_plugin_config_key,
        }

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
        }


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
        """The device-plugin ConfigMap ``data``: one rendered YAML per distinct node configuration."""
        out: dict[str, str] = {}
        for node in self.nodes.values():
            out.setdefault(node.device_plugin_config_key, render_yaml(node.device_plugin_config))
        return dict(sorted(out.items()))


def render_yaml(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


# --- loading ------------------------------------------------------------------------------------------------------


def load_fleet(inventory_path: str | os.PathLike[str], override_data: dict[str, Any] | None = None) -> Fleet:
    """Load an inventory (and its ``group_data``) exactly as the pyinfra CLI does, and validate every node.

    Raises :class:`SpecError` listing every problem; opens no connection.
    """
    from pyinfra.api import State
    from pyinfra.context import ctx_state

    make_inventory = _pyinfra_cli("inventory").make_inventory
    path = str(inventory_path)
    if not Path(path).is_file():
        raise SpecError(path, [f"inventory file {path} does not exist"])
    try:
        # pyinfra executes inventory and group_data files under a State; give it a throwaway one
        with ctx_state.use(State(check_for_changes=False)):
            inventory = make_inventory(path, override_data=override_data)
    except (
        Exception
    ) as exc:  # an inventory is user Python: report its own error, not a traceback into pyinfra
        cause = getattr(exc, "exception", exc)  # pyinfra wraps errors of executed files
        where = getattr(exc, "filename", path)
        raise SpecError(path, [f"cannot load {where}: {type(cause).__name__}: {cause}"]) from exc
    return fleet_from_inventory(inventory, path)


def _pyinfra_cli(module: str) -> Any:
    """A module of pyinfra's CLI package, imported without its side effect.

    ``pyinfra_cli/__init__.py`` calls ``gevent.monkey.patch_all()``. Inside pytest (the conformance suite) or any
    process that already uses ssl and threads (the Kubernetes client), patching that late breaks them (recursion in
    ssl). Only the loader and the argument parser are needed here, so the patch is skipped while the package is
    first imported.
    """
    import importlib
    import sys

    if "pyinfra_cli" not in sys.modules:
        from gevent import monkey

        patch_all = monkey.patch_all
        monkey.patch_all = lambda *args, **kwargs: None
        try:
            import pyinfra_cli  # noqa: F401
        finally:
            monkey.patch_all = patch_all
    return importlib.import_module(f"pyinfra_cli.{module}")


def parse_data_overrides(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs parsed exactly as pyinfra's ``--data`` parses them, so both see the same values."""
    parse = _pyinfra_cli("util").parse_cli_arg
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--data {pair!r}: expected KEY=VALUE")
        out[key] = parse(value)
    return out


def fleet_from_inventory(inventory: Any, inventory_path: str) -> Fleet:
    """Validate an already loaded pyinfra ``Inventory`` (what a running deploy has) into a :class:`Fleet`."""
    problems: list[Problem] = []
    nodes: dict[str, NodeSpec] = {}
    readers = []
    for host in inventory:
        reader = _HostReader(inventory_path, inventory, host)
        node = reader.node()
        problems.extend(reader.problems)
        readers.append(reader)
        if node is not None:
            nodes[host.name] = node
    problems.extend(_fleet_wide_problems(readers))
    if not readers:
        problems.append(Problem(inventory_path, "", "", None, "the inventory has no hosts"))
    if problems:
        raise SpecError(inventory_path, group_problems(problems))
    return Fleet(inventory=inventory_path, nodes=nodes)


@dataclass(frozen=True)
class Problem:
    """One bad value: the file to edit, the host, the knob, its value and what is allowed."""

    file: str
    host: str
    key: str
    value: Any
    allowed: str


def group_problems(problems: list[Problem]) -> list[str]:
    """One line per distinct (file, knob, value, reason), naming every host it applies to: a bad layout on 100
    hosts is one line, not 100."""
    hosts: dict[tuple[str, str, str, str], list[str]] = {}
    for p in problems:
        hosts.setdefault((p.file, p.key, repr(p.value), p.allowed), [])
        if p.host and p.host not in hosts[(p.file, p.key, repr(p.value), p.allowed)]:
            hosts[(p.file, p.key, repr(p.value), p.allowed)].append(p.host)
    lines = []
    for (file, key, value, allowed), names in hosts.items():
        if not key:
            lines.append(f"{file}: {allowed}")
            continue
        who = (
            f"host {names[0]}" if len(names) == 1 else f"hosts {', '.join(names)}" if names else "every host"
        )
        lines.append(f"{file}: {who}: {key} = {value}: {allowed}")
    return lines


def _fleet_wide_problems(readers: list[_HostReader]) -> list[Problem]:
    """Fleet-wide knobs (cluster objects, the rolling upgrade) set for one host, or different across hosts."""
    out = []
    for knob in knobs.KNOBS.values():
        if not knob.fleet_wide:
            continue
        values: dict[str, list[str]] = {}
        for r in readers:
            if knob.name in r.inventory.get_host_data(r.host.name):
                out.append(Problem(r.where(knob.name), r.host.name, knob.name, r.data[knob.name],
                                   "is fleet-wide: set it in group_data/all.py, a group of every host or --data, "
                                   "not for one host"))  # fmt: skip
            values.setdefault(repr(r.get(knob.name)), []).append(r.host.name)
        if len(values) > 1:
            shown = "; ".join(f"{v} on {', '.join(names)}" for v, names in values.items())
            out.append(Problem(readers[0].where(knob.name), "", knob.name, "(differs)",
                               f"is fleet-wide, one value for every host, but the hosts disagree: {shown}"))  # fmt: skip
    return out


def _ranges(indexes: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5"."""
    runs: list[list[int]] = []
    for i in sorted(indexes):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def _close_knob(key: str) -> str | None:
    """The declared knob a key is most likely a typo of, or None (other data, e.g. ssh_* or a user's own)."""
    import difflib

    if key in knobs.KNOBS or key.startswith("_"):
        return None
    found = difflib.get_close_matches(key, knobs.KNOBS, n=1, cutoff=0.85)
    return found[0] if found else None


class _HostReader:
    """Reads one host's data, collecting problems instead of stopping at the first."""

    def __init__(self, inventory_path: str, inventory: Any, host: Any):
        self.inventory_path = inventory_path
        self.inventory = inventory
        self.host = host
        self.data: dict[str, Any] = host.data.dict()
        self.problems: list[Problem] = []
        self.settings: dict[str, Any] = {}

    def where(self, key: str) -> str:
        """The file a value comes from, so a user knows what to edit."""
        if key in self.inventory.get_override_data():
            return "--data"
        if key in self.inventory.get_host_data(self.host.name) or any(
            key in self.inventory.get_group_data(g) for g in self.host.groups if g != "all"
        ):
            return self.inventory_path
        return str(Path(self.inventory_path).parent / "group_data" / "all.py")

    def bad(self, key: str, value: Any, allowed: str) -> None:
        self.problems.append(Problem(self.where(key), self.host.name, key, value, allowed))

    def get(self, key: str, default: Any = None) -> Any:
        """The host's value, else the knob's declared default (so no group_data file is needed)."""
        knob = knobs.KNOBS.get(key)
        if knob is not None and knob.default is not knobs.REQUIRED:
            default = knob.default
        return self.data.get(key, default)

    def checked(self) -> dict[str, Any]:
        """Every declared knob with its value; each with a one-value check is checked (the default stands in for a
        bad one, which is reported). Keys that look like a misspelt knob are reported too."""
        out = {}
        for knob in knobs.KNOBS.values():
            value = self.get(knob.name)
            problem = knob.check(value) if knob.check else None
            if problem:
                self.bad(knob.name, value, problem)
                value = knob.default
            out[knob.name] = value
        self.settings = out
        for key in self.data:
            if close := _close_knob(key):
                self.bad(key, self.data[key], f"is not a gpuready knob: did you mean {close}?")
        return out

    def integer(self, key: str, default: int | None, minimum: int) -> int | None:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.bad(key, value, f"must be an integer >= {minimum}")
            return None
        return value

    def node(self) -> NodeSpec | None:
        settings = self.checked()
        model_name = self.get("gpu_model")
        count = self.integer("gpu_count", None, 1)
        model = None
        if not isinstance(model_name, str) or not model_name:
            self.bad(
                "gpu_model", model_name, "must name the GPU model as nvidia-smi prints it, e.g. 'NVIDIA L4'"
            )
            model_name = ""
        else:
            try:
                model = catalogue.lookup_model(model_name)
                model_name = model.name
            except KeyError as exc:
                if self.get("gpu_memory_mib") is None or self.get("gpu_sharing") == "mig":
                    self.bad(
                        "gpu_model",
                        model_name,
                        f"unknown GPU model ({exc.args[0] if exc.args else exc}); "
                        "give gpu_memory_mib for a model the catalogue does not know (MIG needs a known model)",
                    )
        memory = model.memory_mib if model else self.get("gpu_memory_mib")
        sharing = self.sharing(model, count or 0)
        versions = self.versions()
        join = self.join_settings()
        labels = self.labels()
        taints = self.taints()
        repos = {key: settings[key] for key, knob in knobs.KNOBS.items() if knob.section == "repos"}
        nvswitch = settings["nvswitch"]
        upgrade = self.upgrade_policy(settings)
        diag = self.diag_settings()
        images = self.images(settings)
        if self.problems or count is None or sharing is None or versions is None or join is None:
            return None
        return NodeSpec(
            name=self.host.name,
            gpu_model=model_name,
            gpu_count=count,
            gpu_memory_mib=memory,
            nvswitch=nvswitch,
            sharing=sharing,
            versions=versions,
            join=join,
            labels=labels,
            taints=taints,
            repos=repos,
            upgrade=upgrade,
            diag=diag,
            images=images,
            knobs=settings,
            connection={k: v for k, v in self.data.items() if k.startswith(("ssh_", "_"))},
        )

    def images(self, settings: dict[str, Any]) -> Images:
        """The image knobs (each already checked as an image reference); gfd_image None is the device plugin's."""
        values = {attr: settings[key] for key, attr in IMAGE_KNOBS.items()}
        values["gfd"] = values["gfd"] or values["device_plugin"]
        return Images(**values)

    def diag_settings(self) -> Diag:
        level = self.get("diag_dcgm_level", 1)
        if level not in (1, 2, 3) or isinstance(level, bool):
            self.bad(
                "diag_dcgm_level",
                level,
                "must be 1, 2 or 3 (dcgmi diag -r: 1 seconds, 2 minutes, 3 tens of minutes)",
            )
            level = 1
        floors = self.get("diag_bandwidth_floors", {})
        if not isinstance(floors, dict):
            self.bad(
                "diag_bandwidth_floors",
                floors,
                f"must be a dict with keys among {', '.join(DIAG_FLOOR_KEYS)}",
            )
            floors = {}
        for key, value in floors.items():
            if key not in DIAG_FLOOR_KEYS:
                self.bad(
                    "diag_bandwidth_floors",
                    floors,
                    f"unknown key {key!r}: allowed {', '.join(DIAG_FLOOR_KEYS)}",
                )
            elif isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                self.bad(
                    "diag_bandwidth_floors", floors, f"{key} must be a number of GB/s > 0, not {value!r}"
                )
        return Diag(dcgm_level=level, floors={k: float(v) for k, v in floors.items() if k in DIAG_FLOOR_KEYS})

    def upgrade_policy(self, settings: dict[str, Any]) -> UpgradePolicy:
        batch, most = settings["upgrade_batch_size"], settings["upgrade_max_unavailable"]
        if batch > most:
            self.bad("upgrade_batch_size", batch, f"cannot exceed upgrade_max_unavailable = {most}: a batch is out "
                     "of service all at once")  # fmt: skip
        return UpgradePolicy(
            batch_size=batch,
            max_unavailable=most,
            drain_gpu_pods_only=settings["drain_gpu_pods_only"],
            drain_force=settings["drain_force"],
            drain_timeout=settings["drain_timeout"],
            node_ready_timeout=settings["node_ready_timeout"],
        )

    def sharing(self, model: catalogue.GpuModel | None, count: int) -> Sharing | None:
        mode = self.settings["gpu_sharing"]
        rename = self.settings["sharing_rename"]
        fail_gt1 = self.settings["sharing_fail_requests_greater_than_one"]
        if mode in ("time-slicing", "mps"):
            replicas = self.get("sharing_replicas")
            if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 2:
                self.bad(
                    "sharing_replicas",
                    replicas,
                    f"{mode} needs an integer >= 2 (the device plugin rejects 1)",
                )
                return None
            return Sharing(
                mode=mode,
                replicas=replicas,
                rename=rename,
                fail_requests_greater_than_one=fail_gt1 or mode == "mps",
            )
        if mode == "none":
            return Sharing()
        # MIG
        strategy = self.settings["mig_strategy"]
        mig_sharing = self.settings["mig_sharing"]
        mig_replicas = 1
        if mig_sharing == "time-slicing":
            mig_replicas = self.get("mig_sharing_replicas")
            if isinstance(mig_replicas, bool) or not isinstance(mig_replicas, int) or mig_replicas < 2:
                self.bad("mig_sharing_replicas", mig_replicas, "time-slicing needs an integer >= 2")
                return None
        if model is None:
            return None  # already reported: MIG needs a known model
        if not model.mig_capable:
            self.bad(
                "gpu_sharing", "mig", f"{model.name} does not support MIG; use none, time-slicing or mps"
            )
            return None
        layout = self.mig_layout(model, count, strategy)
        if layout is None:
            return None
        return Sharing(
            mode="mig",
            rename=rename,
            fail_requests_greater_than_one=fail_gt1,
            mig_strategy=strategy,
            mig_layout=layout,
            mig_replicas=mig_replicas,
        )

    def mig_layout(
        self, model: catalogue.GpuModel, count: int, strategy: str
    ) -> tuple[tuple[str, ...] | None, ...] | None:
        raw = self.get("mig_layout")
        per_gpu: list[Any]
        if isinstance(raw, (list, tuple)) and all(isinstance(p, str) for p in raw):
            per_gpu = [tuple(raw)] * count
        elif isinstance(raw, Mapping):
            bad_keys = [k for k in raw if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < count]
            if bad_keys:
                self.bad("mig_layout", raw, f"GPU indexes {bad_keys} are not in 0..{count - 1}")
                return None
            per_gpu = [tuple(raw[i]) if i in raw else None for i in range(count)]
        else:
            self.bad(
                "mig_layout",
                raw,
                "gpu_sharing = 'mig' needs a list of MIG profiles for every GPU, or {gpu_index: [profiles]}",
            )
            return None
        ok = True
        gpus_of: dict[tuple[str, ...], list[int]] = {}  # one problem per distinct layout, naming its GPUs
        for index, profiles in enumerate(per_gpu):
            if profiles is not None:
                gpus_of.setdefault(profiles, []).append(index)
        for profiles, indexes in gpus_of.items():
            which = f"GPU {indexes[0]}" if len(indexes) == 1 else f"GPUs {_ranges(indexes)}"
            if not profiles:
                self.bad("mig_layout", raw, f"{which} MIG-enabled but no instances")
                ok = False
                continue
            for reason in catalogue.layout_problems(model.name, list(profiles)):
                self.bad("mig_layout", list(profiles), f"{which} ({model.name}): {reason}")
                ok = False
        if ok and strategy == "single":
            distinct = {p for profiles in per_gpu for p in (profiles or ())}
            if len(distinct) != 1 or any(p is None for p in per_gpu):
                self.bad(
                    "mig_layout",
                    raw,
                    "mig_strategy 'single' needs every GPU MIG-enabled with one and the "
                    f"same profile (found {sorted(distinct)}); use 'mixed' for mixed layouts",
                )
                ok = False
        return tuple(per_gpu) if ok else None

    def versions(self) -> Versions | None:
        before = len(self.problems)
        branch = str(self.get("nvidia_driver_branch", ""))
        driver = self.get("nvidia_driver_version")
        m = _DRIVER_VERSION.match(driver) if isinstance(driver, str) else None
        if not m:
            self.bad("nvidia_driver_version", driver, "must look like 580.178.04 (what nvidia-smi reports)")
        elif m.group(1) != branch:
            self.bad(
                "nvidia_driver_version",
                driver,
                f"is outside nvidia_driver_branch {branch!r}: pick a {branch}.x version or change the branch",
            )
        source = self.settings["nvidia_driver_source"]
        toolkit = self.get("nvidia_container_toolkit_version")
        if not isinstance(toolkit, str) or not _SEMVER.match(toolkit):
            self.bad("nvidia_container_toolkit_version", toolkit, "must be a version like 1.20.0")
        kube = self.get("kubernetes_version")
        if not isinstance(kube, str) or not _SEMVER.match(kube):
            self.bad("kubernetes_version", kube, "must be a full version like 1.34.4")
        if len(self.problems) != before:
            return None
        return Versions(
            driver=driver,
            driver_branch=branch,
            driver_package=f"{driver}-{self.settings['nvidia_driver_package_revision']}",
            driver_source=source,
            toolkit=toolkit,
            toolkit_package=f"{toolkit}-{self.settings['nvidia_container_toolkit_package_revision']}",
            containerd_package=self.settings["containerd_package"],
            kubernetes=kube,
            kubernetes_minor=".".join(kube.split(".")[:2]),
            kubernetes_package=f"{kube}-{self.settings['kubernetes_package_revision']}",
        )

    def join_settings(self) -> Join | None:
        enabled = self.settings["kube_join"]
        join = Join(
            enabled=enabled,
            api_endpoint=self.get("kube_api_endpoint"),
            ca_cert_hash=self.get("kube_ca_cert_hash"),
            token_file=self.settings["kube_join_token_file"],
            token_env=self.settings["kube_join_token_env"],
            cri_socket=self.settings["kube_cri_socket"],
        )
        if not enabled:
            return join
        before = len(self.problems)
        if not isinstance(join.api_endpoint, str) or not _ENDPOINT.match(join.api_endpoint):
            self.bad(
                "kube_api_endpoint",
                join.api_endpoint,
                "a node that joins needs the API endpoint as host:port",
            )
        if not isinstance(join.ca_cert_hash, str) or not _CA_HASH.match(join.ca_cert_hash):
            self.bad(
                "kube_ca_cert_hash", join.ca_cert_hash, "a node that joins needs 'sha256:<64 lower-case hex>'"
            )
        if not join.token_file and not join.token_env:
            self.bad(
                "kube_join_token_file",
                None,
                "a node that joins needs kube_join_token_file or kube_join_token_env",
            )
        return join if len(self.problems) == before else None

    def labels(self) -> dict[str, str]:
        raw = self.get("node_labels", {}) or {}
        if not isinstance(raw, Mapping):
            self.bad("node_labels", raw, "must be a dict of label key -> value")
            return {}
        out = {}
        for key, value in raw.items():
            problem = kubesyntax.label_key_problem(key) or kubesyntax.label_value_problem(value)
            if problem:
                self.bad("node_labels", {key: value}, problem)
            else:
                out[key] = value
        return out

    def taints(self) -> tuple[kubesyntax.Taint, ...]:
        raw = self.get("node_taints", []) or []
        if not isinstance(raw, (list, tuple)):
            self.bad("node_taints", raw, "must be a list of 'key[=value]:Effect'")
            return ()
        out = []
        for item in raw:
            try:
                out.append(kubesyntax.parse_taint(item))
            except ValueError as exc:
                self.bad("node_taints", item, str(exc))
        return tuple(out)
