// Included by every file of the mock NVML: NVIDIA's nvml.h (go-nvml's copy, found through CGO_CFLAGS)
// with the prototypes cgo cannot repeat renamed out of the way.
//
// Why: cgo writes its own prototype for each //export and puts it after this preamble; Go has no
// `const`, so the header's `const char *` prototypes would conflict. Renaming the header's
// declaration keeps every other prototype checked against NVIDIA's header.
#ifndef GPUREADY_NVML_SHIM_H
#define GPUREADY_NVML_SHIM_H
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#define nvmlErrorString nvmlErrorString_header
#define nvmlDeviceGetHandleByUUID nvmlDeviceGetHandleByUUID_header
#define nvmlDeviceGetHandleByPciBusId nvmlDeviceGetHandleByPciBusId_header
#define nvmlDeviceGetHandleByPciBusId_v2 nvmlDeviceGetHandleByPciBusId_v2_header
#define nvmlDeviceGetHandleBySerial nvmlDeviceGetHandleBySerial_header
// The legacy entry points take the old, smaller structs; nvml.h declares them with today's.
#define nvmlDeviceGetPciInfo nvmlDeviceGetPciInfo_header
#define nvmlEventSetWait nvmlEventSetWait_header
// const placement pointers (mig_write.go)
#define nvmlDeviceCreateGpuInstanceWithPlacement nvmlDeviceCreateGpuInstanceWithPlacement_header
#define nvmlGpuInstanceCreateComputeInstanceWithPlacement nvmlGpuInstanceCreateComputeInstanceWithPlacement_header
#include <stdlib.h>
#include <string.h>
#include <nvml.h>
#undef nvmlErrorString
#undef nvmlDeviceGetHandleByUUID
#undef nvmlDeviceGetHandleByPciBusId
#undef nvmlDeviceGetHandleByPciBusId_v2
#undef nvmlDeviceGetHandleBySerial
#undef nvmlDeviceGetPciInfo
#undef nvmlEventSetWait
#undef nvmlDeviceCreateGpuInstanceWithPlacement
#undef nvmlGpuInstanceCreateComputeInstanceWithPlacement

// go-nvml's nvml.h wraps each handle in a one-pointer struct (same ABI as NVIDIA's plain pointer).
// Handles point to C memory (never Go memory, so callers may keep them); the library maps them back.
struct nvmlDevice_st { int slot; };
struct nvmlEventSet_st { int slot; };
struct nvmlGpuInstance_st { int slot; };
struct nvmlComputeInstance_st { int slot; };

// Structs of the legacy unversioned entry points, which nvml.h no longer declares (older callers
// linked against them: nvmlDeviceGetPciInfo, nvmlEventSetWait).
typedef struct {
    char busId[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    unsigned int reserved0, reserved1, reserved2, reserved3;
} gpureadyPciInfo_v1_t;
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
} gpureadyEventData_v1_t;
#endif
