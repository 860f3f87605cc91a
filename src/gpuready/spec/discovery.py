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
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuready.nvidia import catalogue
from gpuready.spec.knobs import MAX_GPUS_PER_NODE
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
_MIG_COUNT = re.compile(r"nvidia\.com/mig-(.+)\.count")
_DRIVER = re.compile(r"[0-9]{3}\.[0-9]{1,3}(\.[0-9]{1,3})?")  # fullmatch: no trailing newline, ASCII digits
_SEMVER = re.compile(r"v?([0-9]+\.[0-9]+\.[0-9]+)")
# taints the cluster or its controllers set: not what an inventory asks for
_SYSTEM_TAINTS = (
    "node.kubernetes.io/",
    "node-role.kubernetes.io/",
    "node.cloudprovider.kubernetes.io/",
    "ToBeDeleted",
)
KINDS = ("discovery", "labels", "nvidia-smi", "pool")


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
    # node -> why its expectations could not be read from the cluster; such a node is in ``hosts`` all the same
    # (what little is known: model, count, versions, taints), in no pool, and fails the discovery check
    undiscoverable: dict[str, str] = field(default_factory=dict)

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


def is_gpu_node(obj: Obj, with_addons: Collection[str] = ()) -> bool:
    """NVIDIA capacity, GPU feature discovery's (and the GPU Operator's) ``nvidia.com/gpu.present``, or a device
    plugin or DRA kubelet plugin pod on it (``with_addons``: such nodes' names): a node whose plugin lost every
    GPU, or whose labels were removed, is still a GPU node, and the run must say what is wrong with it."""
    return (
        bool(_resources(obj, "capacity"))
        or _labels(obj).get(GPU_PRESENT_LABEL) == "true"
        or obj["metadata"]["name"] in with_addons
    )


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


def _gpu_layouts(model: str, counts: Mapping[str, int]) -> list[tuple[str, ...]]:
    """Every set of MIG devices one GPU of ``model`` can hold, drawn from ``counts`` (a device set that cannot
    fit makes every larger one unfit too, so the search stops there), largest sets first."""
    profiles = sorted(counts)
    found: list[tuple[str, ...]] = []

    def grow(start: int, held: list[str]) -> None:
        for i in range(start, len(profiles)):
            profile = profiles[i]
            if held.count(profile) >= counts[profile]:
                continue
            candidate = [*held, profile]
            if catalogue.layout_problems(model, candidate):
                continue
            found.append(tuple(candidate))
            grow(i, candidate)

    grow(0, [])
    return sorted(found, key=lambda layout: (-len(layout), layout))


def _pack(model: str, profiles: list[str], gpus: int) -> tuple[tuple[str, ...] | None, ...] | None:
    """A MIG layout from the devices' counts alone (no probe): every device on a GPU whose set of devices the
    catalogue allows, the same set on every MIG GPU where the counts allow it (the usual configuration), the
    other GPUs whole; None when no layout of ``gpus`` GPUs holds them (``gpus`` 0: the fewest GPUs that do).

    Which GPU holds which device cannot be read from counts, but the devices, and so the allocatable and the
    labels the node must have, are the same in every layout that holds them."""
    counts = Counter(profiles)
    if not counts:
        return tuple(None for _ in range(gpus)) if gpus else None
    layouts = _gpu_layouts(model, counts)
    if not layouts:
        return None
    sizes = catalogue.mig_profiles(model)
    compute, memory = catalogue.mig_slices(model)
    fewest = max(
        -(-sum(sizes[p].compute_slices for p in profiles) // compute),
        -(-sum(sizes[p].memory_slices for p in profiles) // memory),
        *(-(-n // max((layout.count(p) for layout in layouts), default=1)) for p, n in counts.items()),
    )
    dead: set[tuple[int, int, tuple[tuple[str, int], ...]]] = set()  # what no number of GPUs holds
    for size in [gpus] if gpus else range(fewest, MAX_GPUS_PER_NODE + 1):
        if size < fewest or size > MAX_GPUS_PER_NODE:
            continue
        for k in range(size, 0, -1):  # k GPUs with one and the same set, the rest whole
            if all(n % k == 0 for n in counts.values()):
                same = tuple(sorted(p for p, n in counts.items() for _ in range(n // k)))
                if same in layouts:
                    return (*([same] * k), *([None] * (size - k)))
        try:
            found = _search_layouts(model, layouts, counts, size, dead, gpus_fixed=bool(gpus))
        except _TooLong:
            continue  # with more GPUs the search only gets easier (a count label fixes the size: never here)
        if found is not None:
            return (*found, *([None] * (size - len(found))))
    return None


class _TooLong(Exception):
    """The search tried :data:`_SEARCH_BUDGET` device sets without an answer."""


_SEARCH_BUDGET = 20_000  # device sets tried per GPU count: a few tenths of a second


def _search_layouts(
    model: str,
    layouts: list[tuple[str, ...]],
    counts: Counter[str],
    gpus: int,
    dead: set[tuple[int, int, tuple[tuple[str, int], ...]]],
    gpus_fixed: bool = True,
) -> list[tuple[str, ...]] | None:
    """At most ``gpus`` device sets from ``layouts`` whose devices are exactly ``counts`` (depth-first; each
    combination tried once, in the order of ``layouts``; dead ends remembered; a branch whose devices need more
    memory or compute slices than its GPUs have is cut; ``dead``: the dead ends, kept across calls)."""
    sizes = catalogue.mig_profiles(model)
    compute, memory = catalogue.mig_slices(model)
    budget = [_SEARCH_BUDGET]

    def search(first: int, left: int, need: Counter[str]) -> list[tuple[str, ...]] | None:
        if not +need:
            return []
        budget[0] -= 1
        if budget[0] < 0 and not gpus_fixed:
            raise _TooLong
        key = (first, left, tuple(sorted((+need).items())))
        if left == 0 or key in dead:
            return None
        total = sum(need.values())
        if sum(sizes[p].compute_slices * n for p, n in need.items()) > left * compute or (
            sum(sizes[p].memory_slices * n for p, n in need.items()) > left * memory
        ):
            dead.add(key)
            return None
        for i in range(first, len(layouts)):
            layout = layouts[i]
            if len(layout) * left < total:
                break  # the sets only get smaller from here on: too few GPUs for what is left
            took = Counter(layout)
            if any(need[p] < n for p, n in took.items()):
                continue
            rest = search(i, left - 1, need - took)
            if rest is not None:
                return [layout, *rest]
        dead.add(key)
        return None

    return search(0, gpus, Counter(counts))


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
    mig_counts = {m.group(1): _int(v) or 0 for k, v in labels.items() if (m := _MIG_COUNT.fullmatch(k))}
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
    return {**data, **_as_joined(obj)}


def _as_joined(obj: Obj) -> dict[str, Any]:
    """What every discovered node is, whatever its GPUs: in the cluster already (nothing to join), its kubelet's
    version, its taints, its allocation mode."""
    data: dict[str, Any] = (
        {"gpu_allocation": "dra"} if _labels(obj).get(DRA_ALLOCATION_LABEL) == "dra" else {}
    )
    kubelet = _SEMVER.match(((obj.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion") or "")
    if kubelet:
        data["kubernetes_version"] = kubelet.group(1)
    data["node_taints"] = _taints(obj)
    data["kube_join"] = False
    return data


def _fallback(obj: Obj, probed: Probed | None, why: str, d: Discovery) -> dict[str, Any]:
    """The knobs of a node whose expectations the cluster does not declare readably: enough for the suite to
    reach it (model and count as far as known, what it runs, its taints) and a ``discovery`` problem naming why,
    so the node fails the host layer instead of vanishing from the run."""
    name = obj["metadata"]["name"]
    labels = _labels(obj)
    d.undiscoverable[name] = why
    d.problem(name, "discovery", f"no expectations could be read from the cluster for it: {why}")
    product = labels.get(PRODUCT)
    model_name, model = _model(split_product(product)[0], probed) if product else (None, None)
    if model_name is None and probed is not None and probed.gpus:
        model_name, model = _model(probed.gpus[0], None)
    data: dict[str, Any] = {"gpu_model": model_name or "unknown GPU"}
    if model is None:
        data["gpu_memory_mib"] = _int(labels.get(MEMORY)) or (probed.memory_mib if probed else None) or 1
    count = len(probed.gpus) if probed is not None and probed.gpus else _int(labels.get(COUNT))
    data["gpu_count"] = count if count and 0 < count <= MAX_GPUS_PER_NODE else 1
    driver = (probed.driver if probed else None) or _driver_label(labels)
    if driver and _DRIVER.fullmatch(driver):
        data.update(nvidia_driver_branch=driver.split(".")[0], nvidia_driver_version=driver)
    if probed is not None and probed.toolkit:
        data["nvidia_container_toolkit_version"] = probed.toolkit
    return {**data, **_as_joined(obj)}


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
    with_addons: Collection[str] = (),
) -> Discovery:
    """Every GPU node's inventory data (in node-name order) and its problems. ``configs``: node name -> the
    device plugin config its label selects (None where none was found); ``probed``: node name -> its probe;
    ``with_addons``: the nodes a device plugin or DRA kubelet plugin pod runs on."""
    configs, probed = configs or {}, probed or {}
    d = Discovery(source=source)
    gpu_nodes = sorted((n for n in nodes if is_gpu_node(n, with_addons)), key=lambda n: n["metadata"]["name"])
    for obj in gpu_nodes:
        name = obj["metadata"]["name"]
        data = _node_data(obj, configs.get(name), probed.get(name), d)
        if data is None:  # in the run all the same, failing the discovery check: never silently left out
            d.hosts[name] = _fallback(obj, probed.get(name), d.undiscoverable.pop(name), d)
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
            if driver and _DRIVER.fullmatch(driver):
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
    pin what must not drift, commit it, and run ``gpuready check --inventory`` with it."""
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
        lines.append(f"        # {name}: left out, its expectations could not be read: {why}")
    lines += ["    ],", "    {},", ")", ""]
    return "\n".join(lines)
