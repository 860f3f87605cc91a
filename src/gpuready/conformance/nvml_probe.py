"""Everything NVML answers about this machine's GPUs, read-only, as one JSON document.

Why: the lab's mock ``libnvidia-ml.so.1`` must answer as the real library does. Run this module on a real GPU
machine (``scripts/device-check.sh`` does, through nvidia-ml-py) and on a lab machine with the mock on the
library path, and :mod:`gpuready.lab.fidelity` compares the two documents field by field. Every query is one
the mock implements and NVIDIA's device plugin, GFD, nvidia-ctk, the DRA driver or gpuready's own NVML reader
call. Nothing here changes the GPU: no ``Set*``, no MIG instance created or destroyed, no event registered.

Each answer is recorded as its value, or as ``{"error": "<NVML return code name>"}`` (``NotSupported`` on a
field the GPU lacks is an answer too, and the mock must give the same one), or ``{"error": "binding"}`` where
the installed nvidia-ml-py has no wrapper for the function.

``python -m gpuready.conformance.nvml_probe [--out FILE]``
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from collections.abc import Callable
from typing import Any

PROBE_SCHEMA = 1
NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS (nvml.h): H100/H200 have all 18
CLOCKS = {"graphics": 0, "sm": 1, "mem": 2, "video": 3}  # NVML_CLOCK_*
ECC_COUNTERS = {
    "uncorrected_volatile": (1, 0),  # (NVML_MEMORY_ERROR_TYPE_*, NVML_*_ECC)
    "uncorrected_aggregate": (1, 1),
    "corrected_volatile": (0, 0),
    "corrected_aggregate": (0, 1),
}
RETIRED_PAGE_CAUSES = {"single_bit": 0, "double_bit": 1}  # NVML_PAGE_RETIREMENT_CAUSE_*


def plain(value: Any) -> Any:
    """A JSON-able copy of an NVML answer: ctypes structures become dicts of their fields, bytes become text."""
    if isinstance(value, ctypes.Structure):
        return {name: plain(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, ctypes._SimpleCData):
        return plain(value.value)
    if isinstance(value, ctypes.Array):
        return [plain(v) for v in value]
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    return repr(value)


class Probe:
    """Calls through nvidia-ml-py, recording each answer or its error code's name."""

    def __init__(self, nvml: Any) -> None:
        self.nv = nvml
        self.codes = {getattr(nvml, name): name for name in dir(nvml) if name.startswith("NVML_ERROR_")}

    def call(self, name: str, *args: Any, convert: Callable[[Any], Any] = plain) -> Any:
        fn = getattr(self.nv, name, None)
        if fn is None:
            return {"error": "binding"}
        try:
            return convert(fn(*args))
        except self.nv.NVMLError as exc:
            return {"error": self.codes.get(getattr(exc, "value", None), str(exc))}
        except TypeError as exc:  # this nvidia-ml-py wraps the function with another signature
            return {"error": f"binding: {exc}"}

    def system(self) -> dict[str, Any]:
        return {
            "nvmlSystemGetDriverVersion": self.call("nvmlSystemGetDriverVersion"),
            "nvmlSystemGetNVMLVersion": self.call("nvmlSystemGetNVMLVersion"),
            "nvmlSystemGetCudaDriverVersion": self.call("nvmlSystemGetCudaDriverVersion"),
            "nvmlSystemGetCudaDriverVersion_v2": self.call("nvmlSystemGetCudaDriverVersion_v2"),
            "nvmlDeviceGetCount": self.call("nvmlDeviceGetCount"),
        }

    def gpu(self, index: int) -> dict[str, Any]:
        nv, call = self.nv, self.call
        h = nv.nvmlDeviceGetHandleByIndex(index)
        got: dict[str, Any] = {
            name: call(name, h)
            for name in (
                "nvmlDeviceGetIndex", "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetSerial",
                "nvmlDeviceGetVbiosVersion", "nvmlDeviceGetBoardPartNumber", "nvmlDeviceGetMinorNumber",
                "nvmlDeviceGetPciInfo", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetBAR1MemoryInfo",
                "nvmlDeviceGetBrand", "nvmlDeviceGetArchitecture", "nvmlDeviceGetCudaComputeCapability",
                "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetEccMode", "nvmlDeviceGetRemappedRows",
                "nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetCurrPcieLinkGeneration",
                "nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMaxPcieLinkGeneration",
                "nvmlDeviceGetGpuMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth",
                "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetSupportedClocksEventReasons",
                "nvmlDeviceGetPowerUsage", "nvmlDeviceGetPowerManagementLimit", "nvmlDeviceGetEnforcedPowerLimit",
                "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetPerformanceState", "nvmlDeviceGetComputeMode",
                "nvmlDeviceGetVirtualizationMode", "nvmlDeviceGetComputeRunningProcesses",
                "nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount",
                "nvmlDeviceGetSupportedEventTypes", "nvmlDeviceIsMigDeviceHandle",
            )
        }  # fmt: skip
        got["nvmlDeviceGetGpuFabricInfo"] = self.fabric(h)
        got["nvmlDeviceGetTemperature(GPU)"] = call("nvmlDeviceGetTemperature", h, 0)
        for clock, number in CLOCKS.items():
            got[f"nvmlDeviceGetClockInfo({clock})"] = call("nvmlDeviceGetClockInfo", h, number)
            got[f"nvmlDeviceGetMaxClockInfo({clock})"] = call("nvmlDeviceGetMaxClockInfo", h, number)
        for counter, (kind, where) in ECC_COUNTERS.items():
            got[f"nvmlDeviceGetTotalEccErrors({counter})"] = call(
                "nvmlDeviceGetTotalEccErrors", h, kind, where
            )
        for cause, number in RETIRED_PAGE_CAUSES.items():
            got[f"nvmlDeviceGetRetiredPages({cause})"] = call("nvmlDeviceGetRetiredPages", h, number)
        got["nvmlDeviceGetNvLinkState"] = [
            call("nvmlDeviceGetNvLinkState", h, link) for link in range(NVLINK_MAX_LINKS)
        ]
        got["nvmlDeviceGetGpuInstanceProfileInfo"] = self.mig_profiles(h)
        return got

    def fabric(self, h: Any) -> Any:
        """nvidia-ml-py fills a caller's structure here instead of returning one."""
        struct = getattr(self.nv, "c_nvmlGpuFabricInfo_t", None)
        if struct is None:
            return {"error": "binding"}
        info = struct()
        answer = self.call("nvmlDeviceGetGpuFabricInfo", h, ctypes.byref(info), convert=lambda v: v)
        return answer if isinstance(answer, dict) else plain(info)

    def placements(self, h: Any, profile_id: int) -> Any:
        """nvidia-ml-py passes this one through C-style: ask the count, then fill an array that size."""
        nv = self.nv
        count = ctypes.c_uint(0)
        name = "nvmlDeviceGetGpuInstancePossiblePlacements"
        first = self.call(name, h, profile_id, None, ctypes.byref(count), convert=lambda v: v)
        if isinstance(first, dict):
            return first
        array = (nv.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
        answer = self.call(name, h, profile_id, array, ctypes.byref(count), convert=lambda v: v)
        return answer if isinstance(answer, dict) else [plain(array[i]) for i in range(count.value)]

    def mig_profiles(self, h: Any) -> dict[str, Any]:
        """Every GPU instance profile the GPU answers for, with its possible placements (read-only queries: they
        answer with MIG mode off too, or say why not)."""
        nv = self.nv
        out: dict[str, Any] = {}
        for number in range(getattr(nv, "NVML_GPU_INSTANCE_PROFILE_COUNT", 15)):
            info = self.call("nvmlDeviceGetGpuInstanceProfileInfo", h, number, convert=lambda v: v)
            if isinstance(info, dict):
                out[str(number)] = info
                continue
            entry = plain(info)
            entry["placements"] = self.placements(h, info.id)
            out[str(number)] = entry
        return out


def probe(nvml: Any = None) -> dict[str, Any]:
    """The whole document; ``nvml`` is the nvidia-ml-py module (imported here when not given)."""
    if nvml is None:
        import pynvml  # nvidia-ml-py

        nvml = pynvml
    nvml.nvmlInit()
    try:
        p = Probe(nvml)
        system = p.system()
        count = system["nvmlDeviceGetCount"]
        gpus = [p.gpu(i) for i in range(count)] if isinstance(count, int) else []
        return {"schema": PROBE_SCHEMA, "system": system, "gpus": gpus}
    finally:
        nvml.nvmlShutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpuready.conformance.nvml_probe", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", help="write the document here (default: standard output)")
    args = parser.parse_args(argv)
    text = json.dumps(probe(), indent=1, sort_keys=True) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
