"""The NVIDIA device plugin's and GPU feature discovery's decisions, from their config and the host's state.

Rules follow k8s-device-plugin (gpu-stack-facts.md section 5): the config manager picks a ConfigMap key from the
node label (else ``DEFAULT_CONFIG``, else the ``named``/``single`` fallbacks), the plugin merges CLI > env > file,
the MIG strategy decides resource names (none: whole GPUs; single: MIG devices as ``nvidia.com/gpu``; mixed:
``nvidia.com/mig-<profile>``), sharing multiplies devices into ``<uuid>::<n>`` replicas, and GFD's labels follow
``internal/lm`` (``-SHARED`` suffix, ``MIG-INVALID`` for a bad single layout, parent GPUs without sharing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpuready.nvidia.catalogue import product_label

from .gpu_host import Gpu, HostState, MigDevice

Obj = dict[str, Any]
CONFIG_LABEL = "nvidia.com/device-plugin.config"
GPU = "nvidia.com/gpu"
# Label keys GFD owns: replaced as a set whenever GFD relabels the node (what NFD does with GFD's features file; the
# agent applies them only while NFD's pods run, see gpu_nfd).
GFD_LABEL = re.compile(
    r"^nvidia\.com/(gfd\.timestamp|cuda\..+|gpu\.(product|count|replicas|sharing-strategy|memory|family|compute\..+"
    r"|machine|mode|multiprocessors|slices\..+|engines\..+)|mig\.(capable|strategy)|mps\.capable|vgpu\.present"
    r"|mig-[0-9]+g\.[0-9]+gb[^/]*)$"
)


class PluginError(Exception):
    """The plugin (or GFD) exits with this error, as its last log line says."""


@dataclass(frozen=True)
class Sharing:
    strategy: str  # none | time-slicing | mps
    replicas: dict[str, int]
    rename: bool
    fail_requests_greater_than_one: bool


@dataclass(frozen=True)
class PluginConfig:
    mig_strategy: str
    fail_on_init_error: bool
    sharing: Sharing
    no_timestamp: bool
    source: str  # the config key in use ("" for none)
    raw: Obj = field(default_factory=dict, hash=False)
    # how allocated devices reach the container: envvar (NVIDIA_VISIBLE_DEVICES for the nvidia runtime's hook),
    # cdi-cri (CDI device names in the CRI response, injected by containerd), volume-mounts, cdi-annotations
    device_list_strategy: tuple[str, ...] = ("envvar",)

    @property
    def cdi_cri(self) -> bool:
        return "cdi-cri" in self.device_list_strategy

    def public_name(self, resource: str) -> str:
        return resource + ".shared" if self.sharing.rename and resource in self.sharing.replicas else resource

    def replicas(self, resource: str) -> int:
        return self.sharing.replicas.get(resource, 1)


# configuration --------------------------------------------------------------------------------------------------


def env_of(container: Obj) -> dict[str, str]:
    return {
        e["name"]: str(e.get("value", "")) for e in container.get("env") or [] if "name" in e and "value" in e
    }


def flag_of(container: Obj, name: str) -> str | None:
    """``--name=value`` or ``--name value`` in command + args."""
    argv = list(container.get("command") or []) + list(container.get("args") or [])
    for i, arg in enumerate(argv):
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
        if arg == f"--{name}" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def select_config(
    keys: list[str], label: str | None, default: str | None, fallbacks: list[str]
) -> tuple[str | None, str | None]:
    """(config key, error) as the config manager chooses it (cmd/config-manager updateConfigName)."""
    if not keys:
        return None, "no configuration files available"
    if label:
        return (label, None) if label in keys else (None, f"specified config {label} does not exist")
    if default:
        return (default, None) if default in keys else (None, "specified config  does not exist")
    for strategy in fallbacks:
        if strategy == "named" and "default" in keys:
            return "default", None
        if strategy == "single" and len(keys) == 1:
            return keys[0], None
        if strategy == "empty":
            return "", None
    return None, "no config was set, no default was provided, and all fallbacks failed"


def _sharing(raw: Obj, mig_strategy: str) -> Sharing:
    sharing = raw.get("sharing") or {}
    chosen: tuple[str, Obj] | None = None
    for kind, strategy in (("mps", "mps"), ("timeSlicing", "time-slicing")):
        section = sharing.get(kind) or {}
        resources = section.get("resources") or []
        for r in resources:
            replicas = r.get("replicas", 0)
            if not isinstance(replicas, int) or replicas < 2:
                raise PluginError(
                    f"unable to load config: unable to finalize config: unable to parse config file: "
                    f"invalid {kind} config: number of replicas must be >= 2 (got {replicas!r})"
                )
        if chosen is None and any(r.get("replicas", 0) > 1 for r in resources):
            chosen = (strategy, section)
    if chosen is None:
        return Sharing("none", {}, False, False)
    strategy, section = chosen
    if strategy == "mps" and mig_strategy == "mixed":
        raise PluginError(
            "unable to load config: invalid MPS configuration: MPS sharing is not supported with "
            "--mig-strategy=mixed"
        )
    return Sharing(
        strategy,
        {str(r["name"]): int(r["replicas"]) for r in section.get("resources") or []},
        bool(section.get("renameByDefault", False)),
        bool(section.get("failRequestsGreaterThanOne", strategy == "mps")),
    )


DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")


def _device_list_strategy(container: Obj, env: dict[str, str], flags: Obj) -> tuple[str, ...]:
    raw = (
        flag_of(container, "device-list-strategy")
        or env.get("DEVICE_LIST_STRATEGY")
        or (flags.get("plugin") or {}).get("deviceListStrategy")
        or "envvar"
    )
    values = (
        tuple(raw) if isinstance(raw, list) else tuple(v.strip() for v in str(raw).split(",") if v.strip())
    )
    for value in values:
        if value not in DEVICE_LIST_STRATEGIES:
            raise PluginError(f"unable to load config: invalid --device-list-strategy option: {value}")
    return values or ("envvar",)


def parse_config(text: str | None, source: str, container: Obj) -> PluginConfig:
    """The plugin's effective config: the file (if any), overridden by env vars, overridden by CLI flags."""
    raw: Obj = {}
    if text:
        try:
            raw = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise PluginError(
                f"unable to load config: unable to finalize config: unable to parse config file: "
                f"unmarshal error: {exc}"
            ) from None
        if not isinstance(raw, dict):
            raise PluginError(
                "unable to load config: unable to finalize config: unable to parse config file: "
                "unmarshal error: config is not a mapping"
            )
    version = raw.get("version", "v1") or "v1"
    if version != "v1":
        raise PluginError(
            f"unable to load config: unable to finalize config: unable to parse config file: "
            f"unknown version: {version}"
        )
    flags = raw.get("flags") or {}
    env = env_of(container)
    mig = flag_of(container, "mig-strategy") or env.get("MIG_STRATEGY") or flags.get("migStrategy") or "none"
    if mig not in ("none", "single", "mixed"):
        raise PluginError(f"error creating plugin manager: unknown strategy: {mig}")
    fail = flag_of(container, "fail-on-init-error") or env.get("FAIL_ON_INIT_ERROR")
    gfd = flags.get("gfd") or {}
    no_ts = flag_of(container, "no-timestamp") or env.get("GFD_NO_TIMESTAMP") or gfd.get("noTimestamp")
    return PluginConfig(
        device_list_strategy=_device_list_strategy(container, env, flags),
        mig_strategy=mig,
        fail_on_init_error=(str(fail).lower() != "false")
        if fail is not None
        else flags.get("failOnInitError", True),
        sharing=_sharing(raw, mig),
        no_timestamp=str(no_ts).lower() == "true",
        source=source,
        raw=raw,
    )


# devices --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    """One device the plugin advertises (a replica of a shared one keeps its base's UUID)."""

    id: str  # what kubelet allocates: UUID, or UUID::replica
    uuid: str  # what NVIDIA_VISIBLE_DEVICES gets
    gpu: Gpu
    mig: MigDevice | None = None


def _mig_resource(dev: MigDevice) -> str:
    return "nvidia.com/mig-" + dev.name.replace("+", ".")


def base_devices(config: PluginConfig, host: HostState) -> dict[str, list[tuple[str, Gpu, MigDevice | None]]]:
    """resource -> [(uuid, gpu, mig)] before sharing; raises PluginError for layouts the plugin refuses."""
    gpus = host.visible_gpus
    out: dict[str, list[tuple[str, Gpu, MigDevice | None]]] = {}
    strategy = config.mig_strategy
    enabled = [g for g in gpus if g.mig_enabled]
    if strategy == "single" and enabled:
        if len(enabled) != len(gpus):
            raise PluginError(
                "error starting plugins: For mig.strategy=single all devices on the node must all be "
                "configured with the same migEnabled value"
            )
        if any(not g.mig_devices for g in enabled) or any(not d.full for g in enabled for d in g.mig_devices):
            raise PluginError(
                "error starting plugins: At least one device with migEnabled=true was not configured "
                "correctly: MIG-enabled device with no (or partial) MIG devices"
            )
        if len({d.name for g in enabled for d in g.mig_devices}) != 1:
            raise PluginError("error starting plugins: More than one MIG device type present on node")
        out[GPU] = [(d.uuid, g, d) for g in enabled for d in g.mig_devices]
        return out
    for g in gpus:
        if strategy == "mixed" and g.mig_enabled:
            for d in g.mig_devices:
                if d.full:
                    out.setdefault(_mig_resource(d), []).append((d.uuid, g, d))
        else:
            out.setdefault(GPU, []).append((g.uuid, g, None))
    return out


def plugin_devices(config: PluginConfig, host: HostState) -> dict[str, list[Device]]:
    """Public resource name -> devices, replicas included (what ListAndWatch sends the kubelet)."""
    result: dict[str, list[Device]] = {}
    for resource, items in base_devices(config, host).items():
        replicas = config.replicas(resource)
        if replicas > 1 and config.sharing.strategy == "mps" and any(m is not None for _, _, m in items):
            raise PluginError("error starting plugins: MPS sharing is not supported on MIG devices")
        devices: list[Device] = []
        for uuid, gpu, mig in items:
            if replicas > 1:
                devices.extend(Device(f"{uuid}::{i}", uuid, gpu, mig) for i in range(replicas))
            else:
                devices.append(Device(uuid, uuid, gpu, mig))
        result[config.public_name(resource)] = devices
    return result


# GFD labels -----------------------------------------------------------------------------------------------------


def _product(model: str, mig: str | None, shared: bool) -> str:
    return product_label(model, mig) + ("-SHARED" if shared else "")


def _resource_labels(prefix: str, product: str, count: int, replicas: int, strategy: str, memory: int) -> Obj:
    return {
        f"{prefix}.product": product,
        f"{prefix}.count": str(count),
        f"{prefix}.replicas": str(replicas),
        f"{prefix}.sharing-strategy": strategy,
        f"{prefix}.memory": str(memory),
    }


def _gpu_labels(gpu: Gpu, count: int, config: PluginConfig | None) -> Obj:
    replicas = config.replicas(GPU) if config else 0
    shared = bool(config) and replicas > 1 and not config.sharing.rename  # type: ignore[union-attr]
    strategy = config.sharing.strategy if config else "none"
    labels = _resource_labels(
        "nvidia.com/gpu",
        _product(gpu.name, None, shared),
        count,
        replicas,
        strategy,
        int(gpu.hw["memory_mib"]),
    )
    major, _, minor = str(gpu.hw.get("compute_capability", "0.0")).partition(".")
    labels.update(
        {
            "nvidia.com/gpu.family": str(gpu.hw.get("family", "undefined")),
            "nvidia.com/gpu.compute.major": major,
            "nvidia.com/gpu.compute.minor": minor,
        }
    )
    return labels


def _mig_labels(
    prefix: str, resource: str, dev: MigDevice, gpu: Gpu, count: int, config: PluginConfig
) -> Obj:
    replicas = config.replicas(resource)
    p = dev.profile
    labels = _resource_labels(
        prefix,
        _product(gpu.name, dev.name, replicas > 1 and not config.sharing.rename),
        count,
        replicas,
        config.sharing.strategy,
        int(p["memory_mib"]),
    )
    labels.update(
        {
            f"{prefix}.multiprocessors": str(p["sm_count"]),
            f"{prefix}.slices.gi": str(p["compute_slices"]),
            f"{prefix}.slices.ci": str(p["compute_slices"]),
            f"{prefix}.engines.copy": str(p["copy_engines"]),
            f"{prefix}.engines.decoder": str(p["decoders"]),
            f"{prefix}.engines.encoder": str(p["encoders"]),
            f"{prefix}.engines.jpeg": str(p["jpeg"]),
            f"{prefix}.engines.ofa": str(p["ofa"]),
        }
    )
    return labels


def gfd_labels(config: PluginConfig, host: HostState, timestamp: int) -> Obj:
    """The labels GFD writes for this host (internal/lm), as strings."""
    gpus = host.visible_gpus
    if not gpus:
        return {}
    driver = host.driver_version or "0.0.0"
    d_major, d_minor, d_rev = [*driver.split("."), "", ""][:3]
    c_major, _, c_minor = host.cuda_version.partition(".")
    labels: Obj = {
        "nvidia.com/cuda.driver.major": d_major,
        "nvidia.com/cuda.driver.minor": d_minor,
        "nvidia.com/cuda.driver.rev": d_rev,
        "nvidia.com/cuda.driver-version.major": d_major,
        "nvidia.com/cuda.driver-version.minor": d_minor,
        "nvidia.com/cuda.driver-version.revision": d_rev,
        "nvidia.com/cuda.driver-version.full": driver,
        "nvidia.com/cuda.runtime.major": c_major,
        "nvidia.com/cuda.runtime.minor": c_minor,
        "nvidia.com/cuda.runtime-version.major": c_major,
        "nvidia.com/cuda.runtime-version.minor": c_minor,
        "nvidia.com/cuda.runtime-version.full": host.cuda_version,
        "nvidia.com/gpu.machine": host.machine,
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/mig.capable": str(any(g.hw.get("mig_capable") for g in gpus)).lower(),
        "nvidia.com/mps.capable": str(config.sharing.strategy == "mps").lower(),
    }
    if not config.no_timestamp:
        labels["nvidia.com/gfd.timestamp"] = str(timestamp)
    counts: dict[str, int] = {}
    for g in gpus:
        counts[g.name] = counts.get(g.name, 0) + 1
    # MIG-enabled parents are labelled without sharing; full GPUs of the same model override them.
    for g in sorted(gpus, key=lambda g: not g.mig_enabled or config.mig_strategy == "none"):
        full = not g.mig_enabled or config.mig_strategy == "none"
        labels.update(_gpu_labels(g, counts[g.name], config if full else None))
    if config.mig_strategy == "none":
        return labels
    labels["nvidia.com/mig.strategy"] = config.mig_strategy
    enabled = [g for g in gpus if g.mig_enabled]
    if not enabled:
        return labels
    if config.mig_strategy == "single":
        reason = None
        if any(not g.mig_devices for g in enabled):
            reason = "empty"
        elif len(enabled) != len(gpus) or len({d.name for g in enabled for d in g.mig_devices}) != 1:
            reason = "mixed"
        if reason:
            labels.update(
                _resource_labels(
                    "nvidia.com/gpu",
                    product_label(enabled[0].name) + "-MIG-INVALID",
                    0,
                    0,
                    labels.get("nvidia.com/gpu.sharing-strategy", "none"),
                    0,
                )
            )
            return labels
        devs = [(d, g) for g in enabled for d in g.mig_devices]
        labels.update(_mig_labels("nvidia.com/gpu", GPU, devs[0][0], devs[0][1], len(devs), config))
        return labels
    by_profile: dict[str, list[tuple[MigDevice, Gpu]]] = {}
    for g in enabled:
        for d in g.mig_devices:
            by_profile.setdefault(_mig_resource(d), []).append((d, g))
    for resource, devs in sorted(by_profile.items()):
        labels.update(_mig_labels(resource, resource, devs[0][0], devs[0][1], len(devs), config))
    return labels
