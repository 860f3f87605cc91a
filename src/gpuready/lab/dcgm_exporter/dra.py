"""How NVIDIA's DRA driver names a host's devices (``gpu-<minor>``, ``gpu-<minor>-mig-<profile>-<start>-<size>``),
and a device a container holds through a claim: the exporter's DRA mapping labels a claimed device with them, as
the real exporter does from the kubelet's pod-resources API."""

from __future__ import annotations

from dataclasses import dataclass

from .host import Gpu, HostState, MigDevice


def device_name(gpu: Gpu, mig: MigDevice | None) -> str:
    minor = int(gpu.hw.get("minor_number", gpu.index))
    if mig is None:
        return f"gpu-{minor}"
    return f"gpu-{minor}-mig-{mig.profile['profile_id']}-{mig.start}-{mig.profile.get('placement_size', 1)}"


def host_devices(host: HostState) -> dict[str, tuple[Gpu, MigDevice | None]]:
    """What the plugin enumerates: GPUs on the bus with MIG off, and the full MIG devices of MIG-enabled ones."""
    out: dict[str, tuple[Gpu, MigDevice | None]] = {}
    for gpu in host.visible_gpus:
        if gpu.mig_enabled:
            for mig in gpu.mig_devices:
                if mig.full:
                    out[device_name(gpu, mig)] = (gpu, mig)
        else:
            out[device_name(gpu, None)] = (gpu, None)
    return out


@dataclass(frozen=True)
class ClaimRef:
    """A device held through a claim, as the kubelet's pod-resources API reports it (DynamicResources)."""

    namespace: str
    name: str
    pool: str
    device: str
    mig_profile: str = ""
    mig_uuid: str = ""

    @classmethod
    def of(cls, namespace: str, name: str, pool: str, device: str, mig: MigDevice | None) -> ClaimRef:
        return cls(namespace, name, pool, device, mig.name if mig else "", mig.uuid if mig else "")
