"""A dcgm-exporter scrape for one host: `default-counters.csv`'s fields in the exporter's exposition format.

Shape from real scrapes (/work/shared/fixtures/dcgm-exporter): one HELP/TYPE pair per field, then one series per
entity; an entity is a GPU, or a GPU instance on a MIG-enabled GPU (``GPU_I_PROFILE``/``GPU_I_ID``); MIG entities
and empty MIG-enabled GPUs have no utilisation fields (DCGM reports them blank, and blank values are skipped).
Labels in the exporter's order: gpu, UUID, pci_bus_id, device, modelName, GPU_I_*, Hostname (``hostname`` after
4.5.3-4.8.2), DCGM_FI_DRIVER_VERSION, then container/namespace/pod with Kubernetes mapping on. A GPU that fell off
the bus keeps only its XID series (every other field reads blank). With DRA mapping on as well
(``--kubernetes-enable-dra``, ``DCGM_EXPORTER_KUBERNETES_ENABLE_DRA``; off by default), a device held through a
ResourceClaim carries the pod and ``dra_claim_name``, ``dra_claim_namespace``, ``dra_device_name``,
``dra_driver_name``, ``dra_pool_name`` (and ``dra_mig_profile``, ``dra_mig_device_uuid`` for a MIG device), the
Kubernetes labels sorted by name as the exporter writes them (the Kubernetes docs' GH200 example); with it off, such a
device has no pod at all (the exporter ignores the pod-resources API's DynamicResources).
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from gpuready.spec.dra import DRIVER

from .host import Gpu, HostState

if TYPE_CHECKING:
    from .dra import ClaimRef

# (field, type, help, for MIG entities too)
FIELDS: tuple[tuple[str, str, str, bool], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", True),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", True),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", True),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", True),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", True),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).", True),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", True),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", False),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", False),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", False),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", False),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", True),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", True),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", True),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes.",
     True),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors", False),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors", False),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", False),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", True),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active.", True),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the device memory interface is active sending or "
     "receiving data.", True),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted over the PCIe bus - including both "
     "protocol headers and data payloads - in bytes per second.", True),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over the PCIe bus - including both protocol "
     "headers and data payloads - in bytes per second.", True),
)  # fmt: skip
UTIL_FIELDS = frozenset(
    {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL"}
)
ROW_REMAP_FIELDS = frozenset(
    {
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    }
)
Owner = tuple[str, str, str]  # (namespace, pod, container)


def hostname_label(image: str) -> str:
    """`Hostname` up to dcgm-exporter 4.5.3-4.8.2, `hostname` after (NVIDIA/dcgm-exporter#655)."""
    m = re.search(r":\d+\.\d+\.\d+-(\d+)\.(\d+)\.(\d+)", image)
    if m and tuple(int(x) for x in m.groups()) > (4, 8, 2):
        return "hostname"
    return "Hostname"


def _entities(host: HostState) -> list[tuple[Gpu, dict[str, str], int, int, list[str]]]:
    """(gpu, MIG labels, memory MiB, used MiB, device UUIDs whose owners label this entity)."""
    out = []
    for g in host.gpus:
        if g.mig_enabled and g.mig_devices:
            seen: dict[int, list[str]] = {}
            for d in g.mig_devices:
                seen.setdefault(d.gi, []).append(d.uuid)
            for d in g.mig_devices:
                if d.gi in seen:
                    mem = int(d.profile["memory_mib"])
                    out.append((g, {"GPU_I_PROFILE": d.name, "GPU_I_ID": str(d.gi)}, mem, 12, seen.pop(d.gi)))
        else:
            mem = int(g.hw["memory_mib"])
            out.append((g, {}, mem - int(g.hw.get("reserved_mib", 0)), 0, [g.uuid]))
    return out


def _value(field: str, g: Gpu, mem: int, used: int, busy: bool, uptime: float) -> str | None:
    hw = g.hw
    clocks = hw.get("clocks") or {}
    power = float(hw.get("power_idle_w", 50.0)) * (1.6 if busy else 1.0)
    # DCGM reads NVML's remapped-row counters: what nvidia-smi -q shows (the machine's view)
    corrected, uncorrected = g.remapped_rows
    values: dict[str, Any] = {
        "DCGM_FI_DEV_SM_CLOCK": clocks.get("max_graphics" if busy else "graphics_idle", 0),
        "DCGM_FI_DEV_MEM_CLOCK": clocks.get("memory", 0),
        "DCGM_FI_DEV_MEMORY_TEMP": hw.get("memory_temperature_c") or 0,
        "DCGM_FI_DEV_GPU_TEMP": hw.get("temperature_c", 30),
        "DCGM_FI_DEV_POWER_USAGE": f"{power:.6f}",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": int(power * uptime * 1000),
        "DCGM_FI_DEV_XID_ERRORS": g.xid,
        "DCGM_FI_DEV_FB_FREE": mem - used,
        "DCGM_FI_DEV_FB_USED": used,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": corrected,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": uncorrected,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "0.000000",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "0.000000",
        "DCGM_FI_PROF_DRAM_ACTIVE": "0.000000",
    }
    return str(values.get(field, 0))


def dra_mapping(exporter: dict[str, Any]) -> bool:
    """dcgm-exporter's DRA mapping: ``--kubernetes-enable-dra`` or its environment variable."""
    for c in (exporter.get("spec") or {}).get("containers") or []:
        argv = list(c.get("command") or []) + list(c.get("args") or [])
        env = {e.get("name"): str(e.get("value", "")).lower() for e in c.get("env") or []}
        if "--kubernetes-enable-dra" in argv or "--kubernetes-enable-dra=true" in argv:
            return True
        if "true" in (env.get("DCGM_EXPORTER_KUBERNETES_ENABLE_DRA"), env.get("KUBERNETES_ENABLE_DRA")):
            return True
    return False


def _dra_labels(ref: ClaimRef) -> dict[str, str]:
    labels = {
        "dra_claim_name": ref.name,
        "dra_claim_namespace": ref.namespace,
        "dra_device_name": ref.device,
        "dra_driver_name": DRIVER,
        "dra_pool_name": ref.pool,
    }
    if ref.mig_profile:
        labels.update(dra_mig_profile=ref.mig_profile, dra_mig_device_uuid=ref.mig_uuid)
    return labels


def dcgm_scrape(
    host: HostState,
    exporter: dict[str, Any],
    owners: dict[str, Owner],
    started: float,
    image: str = "",
    claims: dict[str, ClaimRef] | None = None,
) -> str:
    """The `/metrics` body; `owners` maps allocated device UUIDs to the pod using them (pod-resources API),
    `claims` the devices held through ResourceClaims to their claim (pod-resources' DynamicResources)."""
    spec = exporter.get("spec") or {}
    env = {
        e.get("name"): str(e.get("value", ""))
        for c in spec.get("containers") or []
        for e in c.get("env") or []
    }
    args = [a for c in spec.get("containers") or [] for a in (c.get("args") or []) + (c.get("command") or [])]
    kubernetes = (
        env.get("DCGM_EXPORTER_KUBERNETES", "").lower() == "true" or "-k" in args or "--kubernetes" in args
    )
    hostname = host.name if spec.get("hostNetwork") else exporter["metadata"]["name"]
    host_key = hostname_label(image)
    no_hostname = env.get("DCGM_EXPORTER_NO_HOSTNAME", "").lower() == "true" or "--no-hostname" in args
    uptime = max(time.monotonic() - started, 0.0) + 3600.0
    entities = _entities(host)
    lines: list[str] = []
    for field, kind, help_text, for_mig in FIELDS:
        series = []
        for g, mig, mem, used, uuids in entities:
            if g.off_bus and field != "DCGM_FI_DEV_XID_ERRORS":
                continue
            if g.mig_enabled and (
                not for_mig or field in UTIL_FIELDS or (not mig and field.startswith("DCGM_FI_DEV_FB"))
            ):
                continue
            if field in ROW_REMAP_FIELDS and not g.hw.get("row_remapping"):
                continue
            owner = next((owners[u] for u in uuids if u in owners), None)
            claim = next((claims[u] for u in uuids if u in (claims or {})), None) if claims else None
            labels = [
                ("gpu", str(g.index)),
                ("UUID", g.uuid),
                ("pci_bus_id", str(g.hw.get("pci_bus_id", ""))),
                ("device", f"nvidia{g.hw.get('minor_number', g.index)}"),
                ("modelName", g.name),
                *mig.items(),
            ]
            if not no_hostname:
                labels.append((host_key, hostname))
            labels.append(("DCGM_FI_DRIVER_VERSION", host.driver_version or ""))
            if kubernetes:
                ns, pod, container = owner or ("", "", "")
                extra = {"container": container, "namespace": ns, "pod": pod}
                if claim is not None and owner is not None:
                    extra.update(_dra_labels(claim))
                labels.extend(sorted(extra.items()))
            value = _value(
                field, g, mem, used if owner is None else max(used, 420), owner is not None, uptime
            )
            text = ",".join(f'{k}="{v}"' for k, v in labels)
            series.append(f"{field}{{{text}}} {value}\n")
        if series:
            lines.append(f"# HELP {field} {help_text}\n# TYPE {field} {kind}\n")
            lines.extend(series)
    return "".join(lines)
