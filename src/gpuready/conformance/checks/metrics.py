"""Metrics layer: dcgm-exporter reports every GPU (or MIG instance) of the node, with sane values and pod labels.

The checks judge a parsed scrape (:func:`gpuready.nvidia.dcgm.parse_dcgm_metrics`). Entities are counted the way
DCGM sees them: a GPU with MIG disabled is one entity; a MIG-enabled GPU is one entity per GPU instance, and
DCGM reports no utilisation for those (it cannot attribute SM time to an instance), so utilisation is required
of whole GPUs only.
"""

from __future__ import annotations

from collections import Counter

from gpuready.conformance.checks import CannotCheck
from gpuready.nvidia.dcgm import DcgmSample
from gpuready.spec.model import NodeSpec

UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
TEMP = "DCGM_FI_DEV_GPU_TEMP"
POWER = "DCGM_FI_DEV_POWER_USAGE"
XID = "DCGM_FI_DEV_XID_ERRORS"
REQUIRED = (UTIL, FB_USED, TEMP, POWER, XID)
# metric -> (lowest, highest) a healthy GPU reports
SANE = {UTIL: (0.0, 100.0), TEMP: (0.0, 120.0), XID: (0.0, 0.0), POWER: (0.0, 2000.0), FB_USED: (0.0, 1e7)}


def expected_entities(node: NodeSpec) -> Counter[str | None]:
    """Entities per MIG profile (None: whole GPUs) the exporter must report."""
    want: Counter[str | None] = Counter()
    mig = node.sharing.mig_layout
    for index in range(node.gpu_count):
        layout = mig[index] if index < len(mig) else None
        if layout is None:
            want[None] += 1
        else:
            want.update(layout)
    return want


def series_per_entity(node: NodeSpec, samples: list[DcgmSample]) -> list[str]:
    """One series per GPU (or MIG instance) for each required metric."""
    want = expected_entities(node)
    problems = []
    for metric in REQUIRED:
        entities = {s.key for s in samples if s.metric == metric}
        have: Counter[str | None] = Counter()
        for s in samples:
            if s.metric == metric and (metric, s.gpu, s.gpu_instance_id) in entities:
                entities.discard((metric, s.gpu, s.gpu_instance_id))
                have[s.gpu_instance_profile] += 1
        for what in sorted(set(want) | set(have), key=str):
            if metric == UTIL and what is not None:
                continue  # DCGM has no utilisation for MIG instances
            if have[what] != want[what]:
                kind = "GPUs (MIG disabled)" if what is None else f"MIG {what} instances"
                problems.append(f"{metric}: {have[what]} series for {kind}, expected {want[what]}")
    return problems


def sane_values(samples: list[DcgmSample]) -> list[str]:
    """Utilisation 0..100 %, temperature 0..120 C, no XID, power and framebuffer not negative."""
    problems = []
    for s in samples:
        if s.metric not in SANE:
            continue
        low, high = SANE[s.metric]
        if not low <= s.value <= high:
            where = f"GPU {s.gpu}" + (
                f" MIG {s.gpu_instance_profile} (GI {s.gpu_instance_id})" if s.gpu_instance_profile else ""
            )
            allowed = "0 (no XID since the driver loaded)" if s.metric == XID else f"{low:g}..{high:g}"
            problems.append(
                f"{where} {s.uuid or ''}: {s.metric} = {s.value:g}, expected {allowed}".replace("  ", " ")
            )
    return problems


def pod_labels(samples: list[DcgmSample], namespace: str, pods: list[str]) -> list[str]:
    """A GPU held by one of ``pods`` (running in ``namespace``) carries that pod in its series' labels."""
    if not pods:
        raise CannotCheck("no running GPU pod of this run on the node to look for")
    if any(s.namespace == namespace and s.pod in pods for s in samples):
        return []
    labelled = sorted({f"{s.namespace}/{s.pod}" for s in samples if s.pod})
    return [
        f"no series carries pod {namespace}/{pods[0]}"
        + (
            f" (pods in labels: {', '.join(labelled)})"
            if labelled
            else " (no series has a pod label: is "
            "dcgm-exporter's Kubernetes mapping on, DCGM_EXPORTER_KUBERNETES=true, with the pod-resources socket?)"
        )
    ]


def claim_labels(node: NodeSpec, samples: list[DcgmSample], namespace: str, claim: str | None) -> list[str]:
    """A device held through the ResourceClaim ``claim`` (of ``namespace``) carries the claim in its series'
    labels (dcgm-exporter's DRA mapping: ``dra_claim_name``, ``dra_claim_namespace``, ``dra_driver_name``,
    ``dra_pool_name``, ``dra_device_name``)."""
    if not node.dra:
        raise CannotCheck("not applicable: gpu_allocation is 'device-plugin'")
    if claim is None:
        raise CannotCheck("no GPU held through a ResourceClaim of this run on the node to look for")
    held = [
        s
        for s in samples
        if s.labels.get("dra_claim_name") == claim and s.labels.get("dra_claim_namespace") == namespace
    ]
    if not held:
        labelled = sorted(
            {f"{s.labels['dra_claim_namespace']}/{s.labels['dra_claim_name']}" for s in samples
             if s.labels.get("dra_claim_name") and s.labels.get("dra_claim_namespace")}
        )  # fmt: skip
        return [
            f"no series carries ResourceClaim {namespace}/{claim}"
            + (
                f" (claims in labels: {', '.join(labelled)})"
                if labelled
                else " (no series has a dra_claim_name label: is dcgm-exporter's DRA mapping on, "
                "DCGM_EXPORTER_KUBERNETES_ENABLE_DRA=true / --kubernetes-enable-dra?)"
            )
        ]
    problems = []
    for s in held[:1]:
        where = f"GPU {s.gpu} {s.uuid or ''}".strip()
        if s.labels.get("dra_pool_name") != node.name or not s.labels.get("dra_device_name"):
            problems.append(
                f"{where}: claim {namespace}/{claim} labelled with pool {s.labels.get('dra_pool_name')!r} and "
                f"device {s.labels.get('dra_device_name')!r}, expected pool {node.name!r} and a device name"
            )
    return problems
