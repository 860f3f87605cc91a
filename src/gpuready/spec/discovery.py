"""``--discover``: a node's expectations from what the cluster declares about it, cross-checked.

Pure: Node objects (the JSON the API server returns), the device plugin's configs and what each node's probe saw
(:class:`Probed`, from ``nvidia-smi`` and ``nvidia-ctk``) in; the inventory data of every GPU node out, in the
same knobs an inventory holds (:mod:`gpuready.spec.knobs`), so the suite builds its :class:`NodeSpec` objects
through the same validation (:func:`fleet`) and ``gpuready discover`` writes an inventory a user reviews and
pins (:func:`render_inventory`). The I/O (listing the nodes, reading the ConfigMaps, the probe pods) is the
caller's: :mod:`gpuready.conformance.discovered`.

Where each expectation comes from:

* a GPU node is a node with ``nvidia.com/*`` capacity or the label ``nvidia.com/gpu.present=true``;
* model, count and memory from GPU feature discovery's labels (``nvidia.com/gpu.product``, ``gpu.count``,
  ``gpu.memory``); the product names the model as the catalogue knows it (``-SHARED`` and ``-MIG-<profile>``
  stripped);
* sharing from ``nvidia.com/gpu.replicas``, ``gpu.sharing-strategy``, ``mig.strategy`` and the per-profile
  ``nvidia.com/mig-<profile>.*`` labels, and the device plugin's config the node's ``nvidia.com/device-plugin.config``
  label selects (renameByDefault, failRequestsGreaterThanOne, deviceListStrategy: CDI mode or not); the MIG layout
  per GPU from ``nvidia-smi -L``;
* driver and toolkit: one version per pool (nodes of the same product and sharing), the one most of its nodes run
  (``nvidia-smi``, else GFD's ``nvidia.com/cuda.driver-version.full``; ``nvidia-ctk --version``), unless
  ``--expect-driver`` / ``--expect-toolkit`` pin them.

What disagrees is a problem of the node, in three kinds (one conformance check each): the labels with each other,
the allocatable and the config (``labels``); the labels with what nvidia-smi says (``nvidia-smi``); the node's
driver or toolkit with its pool's (``pool``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuready.nvidia import catalogue
from gpuready.spec.model import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    DRA_ALLOCATION_LABEL,
    GPU_PRESENT_LABEL,
    GPU_RESOURCE,
)

Obj = dict[str, Any]
NVIDIA = "nvidia.com/"
PRODUCT = "nvidia.com/gpu.product"
COUNT = "nvidia.com/gpu.count"
MEMORY = "nvidia.com/gpu.memory"
REPLICAS = "nvidia.com/gpu.replicas"
STRATEGY = "nvidia.com/gpu.sharing-strategy"
MIG_STRATEGY = "nvidia.com/mig.strategy"
DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"
_MIG_COUNT = re.compile(r"^nvidia\.com/mig-(.+)\.count$")
_DRIVER = re.compile(r"^\d{3}\.\d{1,3}(\.\d{1,3})?$")
_SEMVER = re.compile(r"^v?(\d+\.\d+\.\d+)")
# taints the cluster or its controllers set: not what an inventory asks for
_SYSTEM_TAINTS = (
    "node.kubernetes.io/",
    "node-role.kubernetes.io/",
    "node.cloudprovider.kubernetes.io/",
    "ToBeDeleted",
)
KINDS = ("labels", "nvidia-smi", "pool")


@dataclass(frozen=True)
class Probed:
    """What a node's probe saw: driver (nvidia-smi), toolkit (nvidia-ctk), and per GPU its name, memory and MIG
    devices' profiles (None: MIG disabled); ``nvswitch``: a GPU reports an NVSwitch fabric state.

    The fabric state is how a node shows its NVSwitches without an inventory: on Hopper and later, a GPU of an
    NVSwitch board reports ``Fabric State`` (In Progress until Fabric Manager has configured the fabric, then
    Completed) where every other GPU reports N/A. Older NVSwitch boards (HGX A100) report N/A too, so they are
    found only by an inventory that says ``nvswitch = True``."""

    driver: str | None = None
    toolkit: str | None = None
    gpus: tuple[str, ...] = ()
    memory_mib: int | None = None
    mig: tuple[tuple[str, ...] | None, ...] = ()
    nvswitch: bool = False


@dataclass
class Discovery:
    """Every GPU node's inventory data, its problems by kind, and the pools."""

    source: str
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    pools: dict[str, list[str]] = field(default_factory=dict)
    pool_versions: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    undiscoverable: dict[str, str] = field(default_factory=dict)  # node -> why no spec could be built

    def problem(self, node: str, kind: str, text: str) -> None:
        self.problems.setdefault(node, {k: [] for k in KINDS})[kind].append(text)

    def of(self, node: str, kind: str) -> list[str]:
        return self.problems.get(node, {}).get(kind, [])


def _labels(obj: Obj) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _resources(obj: Obj, field_: str) -> dict[str, int]:
    out = {}
    for key, value in ((obj.get("status") or {}).get(field_) or {}).items():
        if key.startswith(NVIDIA):
            try:
                count = int(str(value))
            except ValueError:
                continue
            if count:
                out[key] = count
    return out


def is_gpu_node(obj: Obj) -> bool:
    """NVIDIA capacity, or GPU feature discovery's (and the GPU Operator's) ``nvidia.com/gpu.present``."""
    return bool(_resources(obj, "capacity")) or _labels(obj).get(GPU_PRESENT_LABEL) == "true"


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def split_product(product: str) -> tuple[str, str | None, bool]:
    """``NVIDIA-A100-SXM4-80GB-MIG-1g.10gb-SHARED`` -> (model part, MIG profile or None, shared)."""
    shared = product.endswith("-SHARED")
    base = product.removesuffix("-SHARED")
    model, sep, profile = base.partition("-MIG-")
    return model, (profile if sep else None), shared


def config_sharing(config: Obj | None) -> dict[str, Any]:
    """What a device plugin config (schema v1) says: mode, replicas, rename, fail>1, migStrategy, CDI."""
    if not isinstance(config, dict):
        return {}
    out: dict[str, Any] = {}
    flags = config.get("flags") or {}
    if flags.get("migStrategy"):
        out["mig_strategy"] = flags["migStrategy"]
    strategy = ((flags.get("plugin") or {}).get("deviceListStrategy")) or None
    if isinstance(strategy, list):
        strategy = strategy[0] if strategy else None
    if strategy:
        out["cdi"] = str(strategy).startswith("cdi")
    for name, mode in (("timeSlicing", "time-slicing"), ("mps", "mps")):
        block = (config.get("sharing") or {}).get(name)
        if not block:
            continue
        replicas = [r.get("replicas") for r in block.get("resources") or [] if isinstance(r, dict)]
        out.update(mode=mode, replicas=replicas[0] if replicas else None)
        out["rename"] = bool(block.get("renameByDefault", False))
        out["fail_gt1"] = bool(block.get("failRequestsGreaterThanOne", False))
    return out


def _model(product_model: str, probed: Probed | None) -> tuple[str | None, catalogue.GpuModel | None]:
    try:
        model = catalogue.lookup_model(product_model)
        return model.name, model
    except KeyError:
        pass
    if probed is not None and probed.gpus:
        try:
            model = catalogue.lookup_model(probed.gpus[0])
            return model.name, model
        except KeyError:
            return probed.gpus[0], None
    return (product_model.replace("-", " ") or None), None


def _resource_profile(model: str, resource: str) -> str | None:
    """``1g.10gb`` for ``nvidia.com/mig-1g.10gb`` on a model (profile names with '+' become '.' in resources)."""
    for name, profile in catalogue.mig_profiles(model).items():
        if profile.resource_name == resource:
            return name
    return None


def _pack(model: str, profiles: list[str], gpus: int) -> tuple[tuple[str, ...] | None, ...] | None:
    """A MIG layout from counts alone (no probe): largest profiles first, each on the first GPU it fits (``gpus``
    0: as many GPUs as needed)."""
    sizes = catalogue.mig_profiles(model)
    layout: list[list[str]] = [[] for _ in range(max(gpus, 1))]
    for profile in sorted(profiles, key=lambda p: -sizes[p].memory_mib):
        for placed in layout:
            if not catalogue.layout_problems(model, [*placed, profile]):
                placed.append(profile)
                break
        else:
            if gpus:
                return None
            layout.append([profile])  # the GPU count is not known: as many GPUs as the devices need
    return tuple(tuple(p) if p else None for p in layout)


def _taints(obj: Obj) -> list[str]:
    out = []
    for t in (obj.get("spec") or {}).get("taints") or []:
        key, effect = t.get("key") or "", t.get("effect") or ""
        if effect not in ("NoSchedule", "NoExecute") or key.startswith(_SYSTEM_TAINTS):
            continue
        out.append(f"{key}={t['value']}:{effect}" if t.get("value") else f"{key}:{effect}")
    return out


def _node_data(obj: Obj, config: Obj | None, probed: Probed | None, d: Discovery) -> dict[str, Any] | None:
    """One node's knobs from its labels, allocatable, config and probe; problems of kind labels/nvidia-smi."""
    name = obj["metadata"]["name"]
    labels = _labels(obj)
    alloc = _resources(obj, "allocatable")
    said = config_sharing(config)
    product = labels.get(PRODUCT)
    if product is None and not (probed and probed.gpus):
        d.undiscoverable[name] = (
            f"no {PRODUCT} label (is GPU feature discovery running there?) and no nvidia-smi answer"
        )
        return None
    if product is None:
        d.problem(name, "labels", f"GFD label {PRODUCT} missing (nvidia-smi says {probed.gpus[0]})")  # type: ignore[union-attr]
        product = catalogue.product_label(probed.gpus[0])  # type: ignore[union-attr]
    base, single_profile, shared = split_product(product)
    model_name, model = _model(base, probed)
    data: dict[str, Any] = {"gpu_model": model_name}
    if probed is not None and probed.nvswitch:
        data["nvswitch"] = True  # Fabric Manager must be active and the NVLinks up (the host and gpu layers)
    replicas = _int(labels.get(REPLICAS)) or 1
    strategy = str(labels.get(STRATEGY, "none"))
    mig_strategy = str(labels.get(MIG_STRATEGY, "none"))
    mig_counts = {m.group(1): _int(v) or 0 for k, v in labels.items() if (m := _MIG_COUNT.match(k))}
    whole_probed = len(probed.gpus) if probed and probed.gpus else None
    if single_profile or (mig_strategy == "mixed" and mig_counts):
        if model is None:
            d.undiscoverable[name] = f"MIG on a GPU model the catalogue does not know ({product})"
            return None
        data["gpu_sharing"] = "mig"
        data["mig_strategy"] = "single" if single_profile else "mixed"
        if single_profile:
            counts = {single_profile: _int(labels.get(COUNT)) or 0}
            mig_replicas = replicas
        else:
            counts = {}
            mig_replicas = 1
            for resource, n in mig_counts.items():
                profile = _resource_profile(model.name, f"{NVIDIA}mig-{resource}")
                if profile is None:
                    d.problem(
                        name,
                        "labels",
                        f"label {NVIDIA}mig-{resource}.count: {model.name} has no such MIG profile",
                    )
                    continue
                counts[profile] = n
                mig_replicas = max(mig_replicas, _int(labels.get(f"{NVIDIA}mig-{resource}.replicas")) or 1)
        rename = False
        if mig_replicas > 1:
            data.update(mig_sharing="time-slicing", mig_sharing_replicas=mig_replicas)
            rename = bool(said.get("rename", any(k.endswith(".shared") for k in alloc)))
            if rename:
                data["sharing_rename"] = True
        if probed and probed.mig:
            layout = probed.mig
            seen = Counter(p for gpu in layout for p in (gpu or ()))
            if dict(seen) != counts:
                d.problem(
                    name,
                    "nvidia-smi",
                    f"MIG labels count {_show(counts)}, nvidia-smi -L lists {_show(dict(seen))}",
                )
        else:
            gpus = whole_probed or (_int(labels.get(COUNT)) if not single_profile else None) or 0
            packed = _pack(model.name, [p for p, n in counts.items() for _ in range(n)], gpus)
            if packed is None:
                d.undiscoverable[name] = (
                    f"the MIG labels' devices {_show(counts)} fit no layout of {gpus} GPU(s)"
                )
                return None
            layout = packed
        data["gpu_count"] = whole_probed or len(layout)
        data["mig_layout"] = {i: list(p) for i, p in enumerate(layout) if p is not None}
        whole = sum(1 for p in layout if p is None)
        wanted: dict[str, int] = {}
        for profile, n in counts.items():
            resource = catalogue.mig_profiles(model.name)[profile].resource_name
            key = GPU_RESOURCE if single_profile else resource
            key += ".shared" if rename else ""
            wanted[key] = wanted.get(key, 0) + n * mig_replicas
        if whole and not single_profile:
            wanted[GPU_RESOURCE] = whole
        _compare_alloc(d, name, alloc, wanted, "the MIG labels")
    else:
        count = _int(labels.get(COUNT))
        if count is None:
            d.problem(name, "labels", f"GFD label {COUNT} missing")
            count = whole_probed or 1
        data["gpu_count"] = count
        if strategy in ("time-slicing", "mps") and replicas > 1:
            data.update(gpu_sharing=strategy, sharing_replicas=replicas)
            rename = said.get("rename", f"{GPU_RESOURCE}.shared" in alloc or not shared)
            if rename:
                data["sharing_rename"] = True
            if said.get("fail_gt1") and strategy == "time-slicing":
                data["sharing_fail_requests_greater_than_one"] = True
            resource = GPU_RESOURCE + (".shared" if rename else "")
            why = f"{COUNT} = {count} x {REPLICAS} = {replicas}"
            _compare_alloc(d, name, alloc, {resource: count * replicas}, why)
            if shared == bool(rename):
                d.problem(name, "labels", f"GFD label {PRODUCT} = {product!r}: with {STRATEGY} = {strategy} and "
                          f"renameByDefault {bool(rename)} GFD {'drops' if rename else 'adds'} the -SHARED suffix")  # fmt: skip
        else:
            if strategy != "none" or replicas != 1:
                d.problem(name, "labels", f"GFD labels {STRATEGY} = {strategy!r} and {REPLICAS} = {replicas}: "
                          "shared GPUs need time-slicing or mps with replicas >= 2")  # fmt: skip
            _compare_alloc(d, name, alloc, {GPU_RESOURCE: count}, f"{COUNT} = {count}, not shared")
        memory = _int(labels.get(MEMORY))
        if model is None:
            data["gpu_memory_mib"] = memory or (probed.memory_mib if probed else None)
        elif memory is not None and memory != model.memory_mib:
            d.problem(
                name,
                "labels",
                f"GFD label {MEMORY} = {memory}, but a {model.name} has {model.memory_mib} MiB",
            )
    # the config the node's label selects agrees with the labels
    if said:
        want_mode = data.get("gpu_sharing", "none")
        got_mode = said.get("mode", "none")
        if want_mode in ("none", "time-slicing", "mps") and got_mode != want_mode:
            d.problem(name, "labels", f"GFD label {STRATEGY} = {strategy!r}, but the device plugin config "
                      f"{labels.get(DEVICE_PLUGIN_CONFIG_LABEL, 'default')!r} shares by {got_mode!r}")  # fmt: skip
        elif got_mode in ("time-slicing", "mps") and said.get("replicas") not in (None, replicas):
            d.problem(name, "labels", f"GFD label {REPLICAS} = {replicas}, but the device plugin config "
                      f"{labels.get(DEVICE_PLUGIN_CONFIG_LABEL, 'default')!r} has replicas {said['replicas']}")  # fmt: skip
        if "mig_strategy" in said and mig_strategy != "none" and said["mig_strategy"] != mig_strategy:
            d.problem(name, "labels", f"GFD label {MIG_STRATEGY} = {mig_strategy!r}, but the device plugin config "
                      f"has migStrategy {said['mig_strategy']!r}")  # fmt: skip
        if "cdi" in said:
            data["nvidia_cdi"] = said["cdi"]
    # what nvidia-smi says
    if probed is not None and probed.gpus:
        names = Counter(probed.gpus)
        smi_model = _model(probed.gpus[0], None)[0]
        if len(names) > 1:
            d.problem(name, "nvidia-smi", f"nvidia-smi lists different GPUs: {_show(dict(names))}")
        if smi_model != data["gpu_model"]:
            d.problem(
                name,
                "nvidia-smi",
                f"GFD label {PRODUCT} = {product!r}, but nvidia-smi says {probed.gpus[0]!r}",
            )
        if data.get("gpu_sharing") != "mig" and len(probed.gpus) != data["gpu_count"]:
            d.problem(name, "nvidia-smi", f"GFD label {COUNT} = {data['gpu_count']}, but nvidia-smi lists "
                      f"{len(probed.gpus)} GPU(s)")  # fmt: skip
        memory = _int(labels.get(MEMORY))
        if (
            memory is not None
            and data.get("gpu_sharing") != "mig"
            and probed.memory_mib not in (None, memory)
        ):
            d.problem(
                name,
                "nvidia-smi",
                f"GFD label {MEMORY} = {memory}, but nvidia-smi says {probed.memory_mib} MiB",
            )
    label_driver = _driver_label(labels)
    if probed is not None and probed.driver and label_driver and label_driver != probed.driver:
        d.problem(name, "nvidia-smi", f"GFD label {DRIVER_LABEL} = {label_driver!r}, but nvidia-smi says driver "
                  f"{probed.driver!r}")  # fmt: skip
    if labels.get(DRA_ALLOCATION_LABEL) == "dra":
        data["gpu_allocation"] = "dra"
    kubelet = _SEMVER.match(((obj.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion") or "")
    if kubelet:
        data["kubernetes_version"] = kubelet.group(1)
    data["node_taints"] = _taints(obj)
    data["kube_join"] = False  # discovered nodes are already in the cluster: nothing to join
    return data


def _compare_alloc(d: Discovery, name: str, alloc: dict[str, int], wanted: dict[str, int], why: str) -> None:
    for key in sorted(set(wanted) | set(alloc)):
        if alloc.get(key, 0) != wanted.get(key, 0):
            d.problem(name, "labels", f"allocatable {key} = {alloc.get(key, 'absent')}, but the labels say "
                      f"{wanted.get(key, 0)} ({why})")  # fmt: skip


def _show(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} x {k}" for k, n in sorted(counts.items())) or "none"


def _driver_label(labels: Mapping[str, str]) -> str | None:
    if labels.get(DRIVER_LABEL):
        return labels[DRIVER_LABEL]
    parts = [labels.get(f"nvidia.com/cuda.driver.{p}") for p in ("major", "minor", "rev")]
    return ".".join(p for p in parts if p) if parts[0] and parts[1] else None


def pool_of(obj: Obj) -> str:
    """Nodes of one product and one sharing: ``NVIDIA-L4-SHARED time-slicing x4``."""
    labels = _labels(obj)
    parts = [labels.get(PRODUCT, "unknown-product")]
    strategy = labels.get(STRATEGY, "none")
    if labels.get(MIG_STRATEGY, "none") != "none":
        parts.append(f"mig-{labels[MIG_STRATEGY]}")
    if strategy != "none":
        parts.append(f"{strategy} x{labels.get(REPLICAS, '1')}")
    return " ".join(parts)


def _consensus(d: Discovery, pool: str, members: list[str], values: dict[str, str | None], what: str,
               option: str, pin: str | None) -> str | None:  # fmt: skip
    """The pool's version (the pin, else the one most of its nodes run); each node that differs is a problem."""
    known = {n: v for n, v in values.items() if v}
    tally = Counter(known.values())
    chosen = pin
    if chosen is None and tally:
        top = tally.most_common()
        if len(top) > 1 and top[0][1] == top[1][1]:
            shown = "; ".join(
                f"{v} on {', '.join(sorted(n for n, x in known.items() if x == v))}" for v, _ in top
            )
            for n in known:
                d.problem(n, "pool", f"{what} differs across pool {pool!r} with no majority ({shown}): pin it "
                          f"with {option}")  # fmt: skip
            return top[0][0]
        chosen = top[0][0]
    for n, v in sorted(known.items()):
        if v != chosen:
            whence = (
                f"{option} pins"
                if pin
                else f"{tally[chosen or '']} of {len(known)} nodes of pool {pool!r} run"
            )
            d.problem(n, "pool", f"{what} is {v}, but {whence} {chosen}")
    return chosen


def discover(
    nodes: Sequence[Obj],
    configs: Mapping[str, Obj | None] | None = None,
    probed: Mapping[str, Probed] | None = None,
    expect_driver: str | None = None,
    expect_toolkit: str | None = None,
    source: str = "the cluster",
) -> Discovery:
    """Every GPU node's inventory data (in node-name order) and its problems. ``configs``: node name -> the
    device plugin config its label selects (None where none was found); ``probed``: node name -> its probe."""
    configs, probed = configs or {}, probed or {}
    d = Discovery(source=source)
    gpu_nodes = sorted((n for n in nodes if is_gpu_node(n)), key=lambda n: n["metadata"]["name"])
    for obj in gpu_nodes:
        name = obj["metadata"]["name"]
        data = _node_data(obj, configs.get(name), probed.get(name), d)
        if data is None:
            continue
        d.hosts[name] = data
        d.pools.setdefault(pool_of(obj), []).append(name)
    labels = {n["metadata"]["name"]: _labels(n) for n in gpu_nodes}
    for pool, members in d.pools.items():
        drivers = {
            n: (probed[n].driver if n in probed else None) or _driver_label(labels[n]) for n in members
        }
        toolkits = {n: probed[n].toolkit if n in probed else None for n in members}
        driver = _consensus(d, pool, members, drivers, "NVIDIA driver", "--expect-driver", expect_driver)
        toolkit = _consensus(d, pool, members, toolkits, "NVIDIA Container Toolkit", "--expect-toolkit",
                             expect_toolkit)  # fmt: skip
        d.pool_versions[pool] = (driver, toolkit)
        for n in members:
            if driver and _DRIVER.match(driver):
                d.hosts[n].update(nvidia_driver_branch=driver.split(".")[0], nvidia_driver_version=driver)
            if toolkit:
                d.hosts[n]["nvidia_container_toolkit_version"] = toolkit
    return d


def fleet(d: Discovery, overrides: Mapping[str, Any] | None = None) -> Any:
    """The :class:`~gpuready.spec.model.Fleet` of the discovered data, validated as an inventory is (raises
    :class:`~gpuready.spec.model.SpecError` naming the node and knob when the cluster declares something the spec
    refuses, e.g. CDI mode with a toolkit older than 1.18.1)."""
    from pyinfra.api import Inventory

    from gpuready.spec.inventory import fleet_from_inventory

    hosts = [(name, dict(data)) for name, data in d.hosts.items()]
    inventory = Inventory(
        (hosts, {}), override_data=dict(overrides or {}), gpu_nodes=([h for h, _ in hosts], {})
    )
    return fleet_from_inventory(inventory, f"(discovered from {d.source})")


def _plain(value: Any) -> Any:
    """Plain Python for an inventory file (a str subclass such as an enum member shows as its value)."""
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def render_inventory(d: Discovery) -> str:
    """An inventory file of what was found, one pool after another, with the problems as comments: review it,
    pin what must not drift, commit it, and run ``pytest conformance --inventory`` with it."""
    lines = [
        f'"""gpuready inventory discovered from {d.source} (`gpuready discover`).',
        "",
        "Review it: what the cluster declared and the nodes reported is now what they must be. The nodes are already",
        "in the cluster (kube_join False) and have no SSH data: check them with `--connection pod`.",
        '"""',
        "",
        "gpu_nodes = (",
        "    [",
    ]
    for pool, members in d.pools.items():
        driver, toolkit = d.pool_versions.get(pool, (None, None))
        lines.append(f"        # pool {pool}: {len(members)} node(s), driver {driver}, toolkit {toolkit}")
        for name in members:
            for kind in KINDS:
                for text in d.of(name, kind):
                    lines.append(f"        # {name}: {kind}: {text}")
            lines.append(f"        ({name!r}, {{")
            lines += [f"            {key!r}: {_plain(value)!r}," for key, value in d.hosts[name].items()]
            lines.append("        }),")
    for name, why in d.undiscoverable.items():
        lines.append(f"        # {name}: left out: {why}")
    lines += ["    ],", "    {},", ")", ""]
    return "\n".join(lines)
