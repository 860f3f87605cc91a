"""Workloads layer: GPU pods on the node do what the inventory's sharing mode promises.

The checks judge :class:`gpuready.conformance.workloads.PodResult` records (phase, reason, events, log) that the suite
collected for the whole fleet at once; a failing check quotes the pod's phase, reason, events and last log lines
because those are what an operator needs to tell a runtime problem from a scheduling or a driver problem.
"""

from __future__ import annotations

from collections import Counter

from gpuready.conformance.checks import CannotCheck, PodResult
from gpuready.nvidia.cuda import VECTOR_ADD_PASSED as PASSED
from gpuready.nvidia.errors import ParseError
from gpuready.nvidia.smi import ListedGpu, parse_list
from gpuready.spec.model import GPU_RESOURCE, NodeSpec


def _listed(log: str) -> list[ListedGpu]:
    """What ``nvidia-smi -L`` listed in a pod's log. Other lines (an error nvidia-smi printed, a shell's output)
    are left out; a log without a listing lists nothing."""
    lines = [
        line
        for line in log.splitlines()
        if "(UUID: " in line and (line.startswith("GPU ") or line.lstrip().startswith("MIG "))
    ]
    try:
        return parse_list("\n".join(lines))
    except ParseError:
        return []


def gpu_uuids(log: str) -> list[str]:
    """GPU UUIDs ``nvidia-smi -L`` listed."""
    return [gpu.uuid for gpu in _listed(log)]


def mig_devices(log: str) -> list[tuple[str, str]]:
    """(profile, MIG UUID) for each MIG device ``nvidia-smi -L`` listed."""
    return [(device.profile, device.uuid) for gpu in _listed(log) for device in gpu.mig_devices]


def pod_resource(node: NodeSpec) -> str:
    """The resource a single-GPU test pod asks for: a whole GPU where the node has them, else its smallest
    MIG device (on an all-MIG node in mixed strategy there is no ``nvidia.com/gpu``)."""
    expected = node.expected_allocatable
    if not expected:
        raise CannotCheck("the inventory expects no nvidia.com/* resource on this node")
    if GPU_RESOURCE in expected or GPU_RESOURCE + ".shared" in expected:
        return GPU_RESOURCE if GPU_RESOURCE in expected else GPU_RESOURCE + ".shared"
    return sorted(expected)[0]


def vector_add(node: NodeSpec, result: PodResult | None) -> list[str]:
    """The CUDA vectorAdd sample ran to completion on the node and printed ``Test PASSED``."""
    if result is None:
        raise CannotCheck("no vectorAdd pod was started for this node")
    if result.phase == "Succeeded" and PASSED in result.log:
        return []
    return [f"vectorAdd did not pass: {result.describe()}"]


def time_slicing(node: NodeSpec, shared: list[PodResult], extra: PodResult | None) -> list[str]:
    """``replicas`` pods per GPU run at the same time and see the same GPU UUID; one pod more is Unschedulable."""
    s = node.sharing
    if s.mode != "time-slicing":
        raise CannotCheck(f"not applicable: sharing mode is '{s.mode}', not time-slicing")
    problems = []
    total = node.gpu_count * s.replicas
    ran = [r for r in shared if r.running]
    if len(ran) != total:
        stuck = [r.describe() for r in shared if not r.running][:3]
        problems.append(
            f"{len(ran)} of {total} time-sliced pods running at once, expected {total} "
            f"(time-slicing replicas {s.replicas} x {node.gpu_count} GPU(s))"
            + (f": {'; '.join(stuck)}" if stuck else "")
        )
    seen: Counter[str] = Counter()
    for r in ran:
        uuids = gpu_uuids(r.log)
        if len(uuids) != 1:
            problems.append(f"pod {r.name} saw {len(uuids)} GPUs, expected 1: {r.describe()}")
        seen.update(uuids)
    if ran and not problems:
        uneven = {u: n for u, n in seen.items() if n != s.replicas}
        if uneven or len(seen) != node.gpu_count:
            shares = ", ".join(f"{u} x{n}" for u, n in sorted(seen.items()))
            problems.append(
                f"pods per GPU UUID: {shares}; expected {node.gpu_count} GPU(s) shared by {s.replicas} pods each"
            )
    if extra is None:
        problems.append("the pod beyond the replicas was not started")
    elif extra.unschedulable is None:
        problems.append(
            f"a pod beyond {total} replicas should stay Pending as Unschedulable: {extra.describe()}"
        )
    return problems


def mig_device(node: NodeSpec, profile: str, result: PodResult | None) -> list[str]:
    """A pod asking for one MIG device of ``profile`` sees exactly one MIG device, of that profile."""
    if result is None:
        raise CannotCheck(f"no pod was started for MIG profile {profile}")
    if not result.running or not result.log:
        return [f"MIG {profile} pod did not run: {result.describe()}"]
    devices = mig_devices(result.log)
    if [p for p, _uuid in devices] != [profile]:
        listed = ", ".join(p for p, _ in devices) or "no MIG device"
        return [f"MIG {profile} pod saw {listed}, expected exactly one {profile}: {result.describe()}"]
    return []
