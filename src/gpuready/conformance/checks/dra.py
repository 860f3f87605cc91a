"""Dynamic Resource Allocation checks (``gpu_allocation = "dra"`` nodes): pure judgements of API objects.

The node's ResourceSlices of driver ``gpu.nvidia.com`` (pool = node name) must hold what
:func:`gpuready.spec.dra.expected_devices` says: as many GPU and MIG devices, each with the product, memory, MIG
profile, driver and CUDA versions of the spec. Devices are matched as a multiset of those attributes (names and
UUIDs are the hardware's); a message names the node's devices by their published names and UUIDs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpuready.conformance.checks import CannotCheck, PodResult
from gpuready.conformance.checks.workloads import gpu_uuids
from gpuready.spec import dra
from gpuready.spec.model import NodeSpec

Obj = dict[str, Any]
COMPARED = ("type", "productName", "profile", "architecture", "cudaComputeCapability", "driverVersion",
            "cudaDriverVersion")  # fmt: skip
DEVICE_PLUGIN_ONLY = "not applicable: gpu_allocation is 'dra' (the DRA driver serves this node's GPUs)"
DRA_ONLY = "not applicable: gpu_allocation is 'device-plugin'"


def node_slices(slices: list[Obj], node: str) -> list[Obj]:
    """The node's slices of the GPU driver (pool and nodeName = the node)."""
    return [
        s
        for s in slices
        if (s.get("spec") or {}).get("driver") == dra.DRIVER and (s.get("spec") or {}).get("nodeName") == node
    ]


def _value(attribute: Obj) -> str:
    for kind in ("string", "version", "int", "bool"):
        if kind in (attribute or {}):
            return str(attribute[kind])
    return ""


def published(slices: list[Obj]) -> list[tuple[str, dict[str, str], int | None]]:
    """(device name, attributes, memory bytes) of every device in ``slices``."""
    out = []
    for s in slices:
        for d in (s.get("spec") or {}).get("devices") or []:
            attrs = {k: _value(v) for k, v in (d.get("attributes") or {}).items()}
            memory = dra.quantity_bytes(((d.get("capacity") or {}).get("memory") or {}).get("value"))
            out.append((str(d.get("name")), attrs, memory))
    return out


def _key(attrs: dict[str, str], memory: int | None) -> tuple[tuple[str, str], ...]:
    kept = {k: v for k, v in attrs.items() if k in COMPARED}
    return (
        *sorted(kept.items()),
        ("memory", dra.binary_quantity(memory) if memory is not None else "absent"),
    )


def _show(key: tuple[tuple[str, str], ...]) -> str:
    d = dict(key)
    what = f"MIG {d.get('profile')}" if d.get("type") == dra.MIG_TYPE else "GPU"
    rest = ", ".join(f"{k} {v}" for k, v in key if k not in ("type", "profile"))
    return f"{what} ({rest})"


def resource_slices(node: NodeSpec, slices: list[Obj]) -> list[str]:
    """The node's published devices = the spec's: count per kind, product, memory, MIG profile, versions."""
    if not node.dra:
        raise CannotCheck(DRA_ONLY)
    mine = node_slices(slices, node.name)
    want = node.expected_devices
    if not mine:
        return [
            f"no ResourceSlice of driver {dra.DRIVER} for this node, expected {len(want)} device(s): "
            + "; ".join(dra.summary(want))
            + " (is the DRA driver's kubelet plugin running here?)"
        ]
    expected = Counter(_key(dict(d.attributes), d.memory_bytes) for d in want)
    have: Counter[tuple[tuple[str, str], ...]] = Counter()
    names: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for name, attrs, memory in published(mine):
        key = _key(attrs, memory)
        have[key] += 1
        names.setdefault(key, []).append(f"{name} {attrs.get('uuid', '')}".strip())
    problems = []
    published_names = {name for name, _a, _m in published(mine)}
    missing = sorted({f"gpu-{d.gpu_index}" for d in want if d.type == dra.GPU_TYPE} - published_names)
    if missing:  # whole GPUs are named gpu-<minor>: the ones the node no longer publishes
        problems.append(f"not published: {', '.join(missing)}")
    for key in sorted(set(expected) | set(have)):
        if have[key] == expected[key]:
            continue
        extra = have[key] - expected[key]
        detail = ""
        if extra > 0:
            detail = f": unexpected {', '.join(names[key])}"
        problems.append(f"{_show(key)}: {have[key]} published, expected {expected[key]}{detail}")
    return problems


def device_classes(node: NodeSpec, classes: dict[str, Obj]) -> list[str]:
    """The DeviceClasses this node's pods ask through exist and select the driver's devices of their type."""
    if not node.dra:
        raise CannotCheck(DRA_ONLY)
    needed = [dra.GPU_CLASS] + ([dra.MIG_CLASS] if node.mig_enabled_gpus else [])
    problems = []
    for name in needed:
        found = classes.get(name)
        if found is None:
            problems.append(f"DeviceClass {name} not found (the add-ons deploy creates it)")
            continue
        expressions = [
            (s.get("cel") or {}).get("expression", "")
            for s in (found.get("spec") or {}).get("selectors") or []
        ]
        device_type = dra.DEVICE_CLASSES[name]
        if not any(dra.DRIVER in e and f"'{device_type}'" in e for e in expressions):
            problems.append(
                f"DeviceClass {name} does not select {dra.DRIVER} devices of type {device_type!r}: {expressions}"
            )
    return problems


def driver_version(node: NodeSpec, slices: list[Obj], result: PodResult | None) -> list[str]:
    """The driverVersion the node's devices advertise is what nvidia-smi prints in a pod on the node (the CNCF
    Kubernetes AI conformance's KAR-0001)."""
    if not node.dra:
        raise CannotCheck(DRA_ONLY)
    advertised = sorted(
        {a.get("driverVersion", "") for _n, a, _m in published(node_slices(slices, node.name))}
    )
    if not advertised:
        raise CannotCheck("the node publishes no devices; test_resource_slices reports it")
    if result is None or result.exit_code != 0:
        why = result.describe() if result is not None else "no pod result"
        return [f"nvidia-smi --query-gpu=driver_version in a pod on the node did not run: {why}"]
    printed = sorted({line.strip() for line in (result.log or "").splitlines() if line.strip()})
    if [dra.semver(p) for p in printed] != advertised or len(printed) != 1:
        return [
            f"ResourceSlice driverVersion {', '.join(advertised)} but nvidia-smi in a pod prints {', '.join(printed) or 'nothing'}"
        ]
    return []


def unsatisfiable(node: NodeSpec, result: PodResult | None) -> list[str]:
    """A claim for more GPUs than any node has stays Pending, with the scheduler's reason."""
    if not node.dra:
        raise CannotCheck(DRA_ONLY)
    if result is None:
        return ["no pod result for the unsatisfiable claim"]
    if result.phase != "Pending" or result.unschedulable is None:
        return [
            f"a claim for {node.gpu_count + 1} GPUs was not refused by the scheduler: {result.describe()}"
        ]
    if "cannot allocate all claims" not in result.unschedulable:
        return [
            f"a claim for {node.gpu_count + 1} GPUs is Pending, but not for its claim: {result.unschedulable}"
        ]
    return []


def shared_claim(
    node: NodeSpec, claim: str, results: list[PodResult], devices: list[str] | None
) -> list[str]:
    """Pods naming one ResourceClaim (a whole GPU with the driver's time-slicing config) run at once and see the
    same GPU, the one the scheduler allocated to the claim."""
    if not node.dra:
        raise CannotCheck(DRA_ONLY)
    if node.gpu_count - len(node.mig_enabled_gpus) <= 0:
        raise CannotCheck(
            "not applicable: every GPU of the node is in MIG mode (time-slicing needs a whole GPU)"
        )
    if not results:
        return [f"no pod was started for the shared ResourceClaim {claim}"]
    where = f"ResourceClaim {claim} (TimeSlicing)"
    where += f" on device {', '.join(devices)}" if devices else ", not allocated"
    problems = []
    ran = [r for r in results if r.running]
    for r in results:
        if not r.running:
            problems.append(f"pod {r.name} sharing {where} did not run: {r.describe()}")
    seen: dict[str, list[str]] = {}
    for r in ran:
        uuids = sorted(set(gpu_uuids(r.log)))
        if len(uuids) != 1:
            problems.append(f"pod {r.name} sharing {where} saw {len(uuids)} GPUs, expected 1: {r.describe()}")
        for uuid in uuids:
            seen.setdefault(uuid, []).append(r.name)
    if len(seen) > 1:
        shown = "; ".join(f"{uuid}: {', '.join(pods)}" for uuid, pods in sorted(seen.items()))
        problems.append(f"pods sharing {where} saw different GPUs: {shown}")
    return problems
