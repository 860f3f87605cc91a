"""GPU facts of this machine read through NVML (nvidia-ml-py), for ``--connection local`` runs on GPU runners.

Why NVML as well as nvidia-smi: on a GPU runner the suite can ask the library nvidia-smi itself is built on, with
no text format in between, and compare both views of the same machine. The result is the same
:class:`~gpuready.nvidia.smi.SmiReport` the XML reader builds, so the gpu layer's checks run unchanged on it.
Fields NVML does not offer on a GPU (``NotSupported``) are ``None``, as nvidia-smi's ``N/A`` is.
"""

from __future__ import annotations

from typing import Any

from gpuready.nvidia.smi import COMPUTE_MODES, GpuInfo, MigDevice, RemappedRows, SmiReport

# nvmlClocksEventReasons bits (nvml.h) -> the names the XML reader uses.
CLOCK_REASON_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clocks_setting",
}
MIB = 1024 * 1024


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _Reader:
    """Calls into NVML where a ``NotSupported``/``NoPermission`` answer becomes None."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml

    def get(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self.nvml, name)(*args)
        except self.nvml.NVMLError as exc:
            if getattr(exc, "value", None) in (
                getattr(self.nvml, "NVML_ERROR_NOT_SUPPORTED", 3),
                getattr(self.nvml, "NVML_ERROR_NO_PERMISSION", 4),
                getattr(self.nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13),
            ):
                return None
            raise

    def gpu(self, index: int) -> tuple[GpuInfo, int | None]:
        nv = self.nvml
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        memory = nv.nvmlDeviceGetMemoryInfo(handle)
        mig = self.get("nvmlDeviceGetMigMode", handle)
        remapped = self.get("nvmlDeviceGetRemappedRows", handle)
        reasons_fn = (
            "nvmlDeviceGetCurrentClocksEventReasons"
            if hasattr(nv, "nvmlDeviceGetCurrentClocksEventReasons")
            else "nvmlDeviceGetCurrentClocksThrottleReasons"
        )
        reasons = self.get(reasons_fn, handle) or 0
        ecc = self.get(
            "nvmlDeviceGetTotalEccErrors", handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
        )
        ecc_aggregate = self.get(
            "nvmlDeviceGetTotalEccErrors",
            handle,
            nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            nv.NVML_AGGREGATE_ECC,
        )
        pending_pages = self.get("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        persistence = self.get("nvmlDeviceGetPersistenceMode", handle)
        compute = self.get("nvmlDeviceGetComputeMode", handle)
        info = GpuInfo(
            index=index,
            pci_bus_id=_text(nv.nvmlDeviceGetPciInfo(handle).busId),
            name=_text(nv.nvmlDeviceGetName(handle)),
            uuid=_text(nv.nvmlDeviceGetUUID(handle)),
            serial=None,
            vbios=None,
            memory_total_mib=memory.total // MIB,
            memory_used_mib=memory.used // MIB,
            memory_free_mib=memory.free // MIB,
            persistence_mode=None if persistence is None else persistence == nv.NVML_FEATURE_ENABLED,
            mig_mode_current=None if mig is None else ("Enabled" if mig[0] else "Disabled"),
            mig_mode_pending=None if mig is None else ("Enabled" if mig[1] else "Disabled"),
            mig_devices=self.mig_devices(handle) if mig and mig[0] else (),
            ecc_mode_current=None,
            ecc_mode_pending=None,
            ecc_uncorrectable_volatile=ecc,
            ecc_uncorrectable_aggregate=ecc_aggregate,
            retired_pages_single_bit=None,
            retired_pages_double_bit=None,
            retired_pages_pending=None if pending_pages is None else bool(pending_pages),
            remapped_rows=None
            if remapped is None
            else RemappedRows(remapped[0], remapped[1], bool(remapped[2]), bool(remapped[3])),
            pcie_link_gen_current=self.get("nvmlDeviceGetCurrPcieLinkGeneration", handle),
            pcie_link_gen_max=self.get("nvmlDeviceGetMaxPcieLinkGeneration", handle),
            pcie_link_width_current=self.get("nvmlDeviceGetCurrPcieLinkWidth", handle),
            pcie_link_width_max=self.get("nvmlDeviceGetMaxPcieLinkWidth", handle),
            clock_event_reasons_active=tuple(
                name for bit, name in CLOCK_REASON_BITS.items() if reasons & bit
            ),
            temperature_c=self.get("nvmlDeviceGetTemperature", handle, nv.NVML_TEMPERATURE_GPU),
            power_draw_w=None,
            fabric_state=None,
            fabric_status=None,
            compute_mode=None if compute is None else COMPUTE_MODES.get(compute, f"unknown ({compute})"),
        )
        return info, self.get("nvmlDeviceGetPerformanceState", handle)

    def mig_devices(self, handle: Any) -> tuple[MigDevice, ...]:
        nv = self.nvml
        devices: list[MigDevice] = []
        for slot in range(nv.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nv.NVMLError:
                continue  # an empty slot
            devices.append(
                MigDevice(
                    index=len(devices),
                    gpu_instance_id=nv.nvmlDeviceGetGpuInstanceId(mig),
                    compute_instance_id=nv.nvmlDeviceGetComputeInstanceId(mig),
                    memory_total_mib=nv.nvmlDeviceGetMemoryInfo(mig).total // MIB,
                    sm_count=None,
                )
            )
        return tuple(devices)


def nvml_report(nvml: Any = None) -> tuple[SmiReport, dict[int, int]] | None:
    """(report, performance state per GPU index) from NVML; None when this machine has no NVML library.

    Other NVML failures (driver/library mismatch, no driver loaded) also give None: nvidia-smi reports them,
    and the host layer's checks own them.
    """
    if nvml is None:
        import pynvml

        nvml = pynvml
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return None
    try:
        reader = _Reader(nvml)
        count = nvml.nvmlDeviceGetCount()
        gpus, pstates = [], {}
        for index in range(count):
            try:
                info, pstate = reader.gpu(index)
            except nvml.NVMLError:
                continue  # a GPU the driver lost: left out, as nvidia-smi leaves it out; the count check names it
            gpus.append(info)
            if pstate is not None:
                pstates[index] = int(pstate)
        return (
            SmiReport(
                driver_version=_text(nvml.nvmlSystemGetDriverVersion()),
                cuda_version=_cuda_version(nvml),
                attached_gpus=count,
                gpus=tuple(gpus),
            ),
            pstates,
        )
    finally:
        nvml.nvmlShutdown()


def _cuda_version(nvml: Any) -> str | None:
    """The driver's CUDA version as nvidia-smi prints it ("13.0"), from NVML's integer (13000)."""
    try:
        value = int(nvml.nvmlSystemGetCudaDriverVersion())
    except (nvml.NVMLError, AttributeError, TypeError, ValueError):
        return None
    return f"{value // 1000}.{value % 1000 // 10}"
