package main

/*
#include "shim.h"
*/
import "C"

import (
	"strconv"
	"strings"
	"unsafe"

	"gpuready.lab/silicon/machine"
)

const mib = 1024 * 1024

// full resolves a handle to its physical GPU's facts: calls that describe the board (PCI, clocks,
// temperature, ECC) answer the same for a MIG device as for its parent.
func full(h C.nvmlDevice_t) (*device, C.nvmlReturn_t) { return get(h) }

//export nvmlDeviceGetIndex
func nvmlDeviceGetIndex(h C.nvmlDevice_t, index *C.uint) C.nvmlReturn_t {
	return set(get, h, index, func(d *device) C.uint { return C.uint(d.g.Index) })
}

// str answers a string query: resolve h with lookup (get, or opened for a lost GPU's old handle), then copy what
// value gives into the caller's buffer.
func str(lookup func(C.nvmlDevice_t) (*device, C.nvmlReturn_t), h C.nvmlDevice_t, dst *C.char, length C.uint, value func(*device) string) C.nvmlReturn_t {
	d, rc := lookup(h)
	if rc != C.NVML_SUCCESS {
		return rc
	}
	return putString(dst, length, value(d))
}

//export nvmlDeviceGetName
func nvmlDeviceGetName(h C.nvmlDevice_t, name *C.char, length C.uint) C.nvmlReturn_t {
	return str(get, h, name, length, func(d *device) string {
		if d.mig != nil {
			return d.g.Name + " MIG " + d.mig.Name
		}
		return d.g.Name
	})
}

//export nvmlDeviceGetUUID
func nvmlDeviceGetUUID(h C.nvmlDevice_t, uuid *C.char, length C.uint) C.nvmlReturn_t {
	return str(opened, h, uuid, length, func(d *device) string {
		if d.mig != nil {
			return d.mig.UUID
		}
		return d.g.UUID
	})
}

// The board's strings answer the same for a MIG device as for its GPU (see full).

//export nvmlDeviceGetSerial
func nvmlDeviceGetSerial(h C.nvmlDevice_t, serial *C.char, length C.uint) C.nvmlReturn_t {
	return str(get, h, serial, length, func(d *device) string { return d.g.Serial })
}

//export nvmlDeviceGetVbiosVersion
func nvmlDeviceGetVbiosVersion(h C.nvmlDevice_t, version *C.char, length C.uint) C.nvmlReturn_t {
	return str(get, h, version, length, func(d *device) string { return d.g.VBIOSVersion })
}

//export nvmlDeviceGetBoardPartNumber
func nvmlDeviceGetBoardPartNumber(h C.nvmlDevice_t, part *C.char, length C.uint) C.nvmlReturn_t {
	return str(get, h, part, length, func(d *device) string { return d.g.BoardPartNumber })
}

//export nvmlDeviceGetMinorNumber
func nvmlDeviceGetMinorNumber(h C.nvmlDevice_t, minor *C.uint) C.nvmlReturn_t {
	return with(get, h, minor, func(d *device) C.nvmlReturn_t {
		if d.mig != nil {
			return C.NVML_ERROR_NOT_SUPPORTED
		}
		*minor = C.uint(d.g.MinorNumber)
		return C.NVML_SUCCESS
	})
}

func hex32(s string) C.uint {
	v, _ := strconv.ParseUint(s, 16, 32)
	return C.uint(v)
}

//export nvmlDeviceGetPciInfo
func nvmlDeviceGetPciInfo(h C.nvmlDevice_t, pci *C.gpureadyPciInfo_v1_t) C.nvmlReturn_t {
	if pci == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	var v3 C.nvmlPciInfo_t
	if rc := nvmlDeviceGetPciInfo_v3(h, &v3); rc != C.NVML_SUCCESS {
		return rc
	}
	*pci = C.gpureadyPciInfo_v1_t{
		domain: v3.domain, bus: v3.bus, device: v3.device,
		pciDeviceId: v3.pciDeviceId, pciSubSystemId: v3.pciSubSystemId,
	}
	copy(pci.busId[:], v3.busIdLegacy[:])
	return C.NVML_SUCCESS
}

// nvmlDeviceGetPciInfo_v2 has v3's struct; v3 only changed how the driver fills busId.
//
//export nvmlDeviceGetPciInfo_v2
func nvmlDeviceGetPciInfo_v2(h C.nvmlDevice_t, pci *C.nvmlPciInfo_t) C.nvmlReturn_t {
	return nvmlDeviceGetPciInfo_v3(h, pci)
}

// putBus fills pci (cleared first) with the address of `bus` ("00000000:18:00.0").
func putBus(pci *C.nvmlPciInfo_t, bus string) {
	*pci = C.nvmlPciInfo_t{}
	parts := strings.Split(strings.TrimSuffix(bus, ".0"), ":")
	if len(parts) == 3 {
		pci.domain = hex32(parts[0])
		pci.bus = hex32(parts[1])
		pci.device = hex32(parts[2])
	}
	putFixed(pci.busId[:], bus)
	putFixed(pci.busIdLegacy[:], strings.TrimPrefix(bus, "0000"))
}

//export nvmlDeviceGetPciInfo_v3
func nvmlDeviceGetPciInfo_v3(h C.nvmlDevice_t, pci *C.nvmlPciInfo_t) C.nvmlReturn_t {
	return with(full, h, pci, func(d *device) C.nvmlReturn_t {
		putBus(pci, d.g.PCIBusID)
		pci.pciDeviceId = hex32(d.g.PCIDeviceID)
		pci.pciSubSystemId = hex32(d.g.PCISubSystemID)
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetMemoryInfo
func nvmlDeviceGetMemoryInfo(h C.nvmlDevice_t, mem *C.nvmlMemory_t) C.nvmlReturn_t {
	return with(get, h, mem, func(d *device) C.nvmlReturn_t {
		total, reserved, used := memory(d)
		// v1 counts the driver's reserved memory as used, as the real one does since driver 510.
		mem.total = C.ulonglong(total * mib)
		mem.used = C.ulonglong((reserved + used) * mib)
		mem.free = C.ulonglong((total - reserved - used) * mib)
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetMemoryInfo_v2
func nvmlDeviceGetMemoryInfo_v2(h C.nvmlDevice_t, mem *C.nvmlMemory_v2_t) C.nvmlReturn_t {
	return with(get, h, mem, func(d *device) C.nvmlReturn_t {
		if mem.version != C.nvmlMemory_v2 {
			return C.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
		}
		total, reserved, used := memory(d)
		mem.total = C.ulonglong(total * mib)
		mem.reserved = C.ulonglong(reserved * mib)
		mem.used = C.ulonglong(used * mib)
		mem.free = C.ulonglong((total - reserved - used) * mib)
		return C.NVML_SUCCESS
	})
}

// memory is (total, reserved, used) in MiB: the GPU's as nvidia-smi shows it, or the MIG device's.
func memory(d *device) (uint64, uint64, uint64) {
	if d.mig != nil {
		return uint64(d.mig.MemoryMiB), 0, 0
	}
	return uint64(d.v.MemoryTotalMiB), uint64(d.v.MemoryReservedMiB), uint64(d.v.MemoryUsedMiB)
}

//export nvmlDeviceGetBAR1MemoryInfo
func nvmlDeviceGetBAR1MemoryInfo(h C.nvmlDevice_t, bar1 *C.nvmlBAR1Memory_t) C.nvmlReturn_t {
	return with(full, h, bar1, func(d *device) C.nvmlReturn_t {
		total := C.ulonglong(d.g.BAR1MiB) * mib
		bar1.bar1Total, bar1.bar1Used, bar1.bar1Free = total, 0, total
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetBrand
func nvmlDeviceGetBrand(h C.nvmlDevice_t, brand *C.nvmlBrandType_t) C.nvmlReturn_t {
	return with(full, h, brand, func(d *device) C.nvmlReturn_t {
		*brand = C.NVML_BRAND_NVIDIA
		if d.g.Brand == "Tesla" || strings.HasPrefix(d.g.Name, "Tesla") {
			*brand = C.NVML_BRAND_TESLA
		}
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetArchitecture
func nvmlDeviceGetArchitecture(h C.nvmlDevice_t, arch *C.nvmlDeviceArchitecture_t) C.nvmlReturn_t {
	return with(full, h, arch, func(d *device) C.nvmlReturn_t {
		switch d.g.Architecture {
		case "Turing":
			*arch = C.NVML_DEVICE_ARCH_TURING
		case "Ampere":
			*arch = C.NVML_DEVICE_ARCH_AMPERE
		case "Ada Lovelace":
			*arch = C.NVML_DEVICE_ARCH_ADA
		case "Hopper":
			*arch = C.NVML_DEVICE_ARCH_HOPPER
		case "Blackwell":
			*arch = C.NVML_DEVICE_ARCH_BLACKWELL
		default:
			*arch = C.NVML_DEVICE_ARCH_UNKNOWN
		}
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetCudaComputeCapability
func nvmlDeviceGetCudaComputeCapability(h C.nvmlDevice_t, major, minor *C.int) C.nvmlReturn_t {
	return with2(full, h, major, minor, func(d *device) C.nvmlReturn_t {
		a, b := d.g.CUDAComputeCapability()
		*major, *minor = C.int(a), C.int(b)
		return C.NVML_SUCCESS
	})
}

func feature(on bool) C.nvmlEnableState_t {
	if on {
		return C.NVML_FEATURE_ENABLED
	}
	return C.NVML_FEATURE_DISABLED
}

//export nvmlDeviceGetPersistenceMode
func nvmlDeviceGetPersistenceMode(h C.nvmlDevice_t, mode *C.nvmlEnableState_t) C.nvmlReturn_t {
	return set(full, h, mode, func(d *device) C.nvmlEnableState_t { return feature(d.v.Persistence) })
}

//export nvmlDeviceGetEccMode
func nvmlDeviceGetEccMode(h C.nvmlDevice_t, current, pending *C.nvmlEnableState_t) C.nvmlReturn_t {
	return with2(full, h, current, pending, func(d *device) C.nvmlReturn_t {
		if !d.g.ECCSupported {
			return C.NVML_ERROR_NOT_SUPPORTED
		}
		*current, *pending = C.NVML_FEATURE_ENABLED, C.NVML_FEATURE_ENABLED
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetTotalEccErrors
func nvmlDeviceGetTotalEccErrors(h C.nvmlDevice_t, errType C.nvmlMemoryErrorType_t, counter C.nvmlEccCounterType_t, count *C.ulonglong) C.nvmlReturn_t {
	d, rc := full(h)
	if rc != C.NVML_SUCCESS {
		return rc
	}
	if count == nil || counter >= C.NVML_ECC_COUNTER_TYPE_COUNT || errType >= C.NVML_MEMORY_ERROR_TYPE_COUNT {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	if !d.g.ECCSupported {
		return C.NVML_ERROR_NOT_SUPPORTED
	}
	*count = 0
	if errType == C.NVML_MEMORY_ERROR_TYPE_UNCORRECTED {
		*count = C.ulonglong(d.v.ECCUncorrected)
	}
	return C.NVML_SUCCESS
}

//export nvmlDeviceGetRemappedRows
func nvmlDeviceGetRemappedRows(h C.nvmlDevice_t, corr, unc, pending, failure *C.uint) C.nvmlReturn_t {
	d, rc := full(h)
	if rc != C.NVML_SUCCESS {
		return rc
	}
	if corr == nil || unc == nil || pending == nil || failure == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	if !d.g.RowRemapping || d.v.MigCurrent { // nvidia-smi shows N/A in MIG mode
		return C.NVML_ERROR_NOT_SUPPORTED
	}
	*corr, *unc, *failure = C.uint(d.v.RemapCorrectable), C.uint(d.v.RemapUncorrectable), 0
	*pending = 0
	if d.v.RemapPending {
		*pending = 1
	}
	return C.NVML_SUCCESS
}

//export nvmlDeviceGetRetiredPages
func nvmlDeviceGetRetiredPages(h C.nvmlDevice_t, cause C.nvmlPageRetirementCause_t, count *C.uint, addresses *C.ulonglong) C.nvmlReturn_t {
	return with(full, h, count, func(d *device) C.nvmlReturn_t {
		if !d.g.PageRetirement || d.v.MigCurrent {
			return C.NVML_ERROR_NOT_SUPPORTED
		}
		n := d.v.RetiredSBE
		if cause == C.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR {
			n = d.v.RetiredDBE
		}
		room := int(*count)
		*count = C.uint(n)
		if room < n {
			if room == 0 && addresses == nil {
				return C.NVML_SUCCESS
			}
			return C.NVML_ERROR_INSUFFICIENT_SIZE
		}
		if addresses != nil {
			out := unsafe.Slice(addresses, room)
			for i := 0; i < n; i++ {
				out[i] = C.ulonglong(0x123a4000 + 0x1000*i)
			}
		}
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetRetiredPagesPendingStatus
func nvmlDeviceGetRetiredPagesPendingStatus(h C.nvmlDevice_t, pending *C.nvmlEnableState_t) C.nvmlReturn_t {
	return with(full, h, pending, func(d *device) C.nvmlReturn_t {
		if !d.g.PageRetirement || d.v.MigCurrent {
			return C.NVML_ERROR_NOT_SUPPORTED
		}
		*pending = feature(d.v.RetiredPending)
		return C.NVML_SUCCESS
	})
}

// pcie answers one of the four link queries.
func pcie(h C.nvmlDevice_t, out *C.uint, pick func(*device) int) C.nvmlReturn_t {
	return set(full, h, out, func(d *device) C.uint { return C.uint(pick(d)) })
}

//export nvmlDeviceGetCurrPcieLinkGeneration
func nvmlDeviceGetCurrPcieLinkGeneration(h C.nvmlDevice_t, gen *C.uint) C.nvmlReturn_t {
	return pcie(h, gen, func(d *device) int { return d.v.PCIeGen })
}

//export nvmlDeviceGetCurrPcieLinkWidth
func nvmlDeviceGetCurrPcieLinkWidth(h C.nvmlDevice_t, width *C.uint) C.nvmlReturn_t {
	return pcie(h, width, func(d *device) int { return d.v.PCIeWidth })
}

//export nvmlDeviceGetMaxPcieLinkGeneration
func nvmlDeviceGetMaxPcieLinkGeneration(h C.nvmlDevice_t, gen *C.uint) C.nvmlReturn_t {
	return pcie(h, gen, func(d *device) int { return d.g.MaxPCIeGen })
}

//export nvmlDeviceGetGpuMaxPcieLinkGeneration
func nvmlDeviceGetGpuMaxPcieLinkGeneration(h C.nvmlDevice_t, gen *C.uint) C.nvmlReturn_t {
	return pcie(h, gen, func(d *device) int { return d.g.MaxPCIeGen })
}

//export nvmlDeviceGetMaxPcieLinkWidth
func nvmlDeviceGetMaxPcieLinkWidth(h C.nvmlDevice_t, width *C.uint) C.nvmlReturn_t {
	return pcie(h, width, func(d *device) int { return d.g.MaxPCIeWidth })
}

//export nvmlDeviceGetNvLinkState
func nvmlDeviceGetNvLinkState(h C.nvmlDevice_t, link C.uint, active *C.nvmlEnableState_t) C.nvmlReturn_t {
	return with(full, h, active, func(d *device) C.nvmlReturn_t {
		if d.g.NVLinkLinks == 0 {
			return C.NVML_ERROR_NOT_SUPPORTED
		}
		if int(link) >= d.g.NVLinkLinks {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		*active = feature(d.v.NVLinkActive)
		return C.NVML_SUCCESS
	})
}

// clockReasons: the emulated GPUs are idle (nvidia-smi shows "Idle: Active").
func clockReasons(h C.nvmlDevice_t, reasons *C.ulonglong) C.nvmlReturn_t {
	return set(full, h, reasons, func(*device) C.ulonglong { return C.nvmlClocksEventReasonGpuIdle })
}

//export nvmlDeviceGetCurrentClocksEventReasons
func nvmlDeviceGetCurrentClocksEventReasons(h C.nvmlDevice_t, reasons *C.ulonglong) C.nvmlReturn_t {
	return clockReasons(h, reasons)
}

//export nvmlDeviceGetCurrentClocksThrottleReasons
func nvmlDeviceGetCurrentClocksThrottleReasons(h C.nvmlDevice_t, reasons *C.ulonglong) C.nvmlReturn_t {
	return clockReasons(h, reasons)
}

// supportedClockReasons: the nine reasons up to display clocks (0x1FF), as a real H200 answered (580.159.04); the
// header's nvmlClocksEventReasonAll (0x7FF) also counts reasons that GPU does not report.
const supportedClockReasons = 0x1FF

//export nvmlDeviceGetSupportedClocksEventReasons
func nvmlDeviceGetSupportedClocksEventReasons(h C.nvmlDevice_t, reasons *C.ulonglong) C.nvmlReturn_t {
	return set(full, h, reasons, func(*device) C.ulonglong { return supportedClockReasons })
}

//export nvmlDeviceGetTemperature
func nvmlDeviceGetTemperature(h C.nvmlDevice_t, sensor C.nvmlTemperatureSensors_t, temp *C.uint) C.nvmlReturn_t {
	d, rc := full(h)
	if rc != C.NVML_SUCCESS {
		return rc
	}
	if temp == nil || sensor != C.NVML_TEMPERATURE_GPU {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	*temp = C.uint(d.g.TemperatureC)
	return C.NVML_SUCCESS
}

//export nvmlDeviceGetPowerUsage
func nvmlDeviceGetPowerUsage(h C.nvmlDevice_t, mw *C.uint) C.nvmlReturn_t {
	return set(full, h, mw, func(d *device) C.uint { return C.uint(d.g.PowerIdleW*1000 + 0.5) })
}

func powerLimit(h C.nvmlDevice_t, mw *C.uint) C.nvmlReturn_t {
	return set(full, h, mw, func(d *device) C.uint { return C.uint(d.g.PowerLimitW*1000 + 0.5) })
}

//export nvmlDeviceGetPowerManagementLimit
func nvmlDeviceGetPowerManagementLimit(h C.nvmlDevice_t, mw *C.uint) C.nvmlReturn_t {
	return powerLimit(h, mw)
}

//export nvmlDeviceGetEnforcedPowerLimit
func nvmlDeviceGetEnforcedPowerLimit(h C.nvmlDevice_t, mw *C.uint) C.nvmlReturn_t {
	return powerLimit(h, mw)
}

//export nvmlDeviceGetUtilizationRates
func nvmlDeviceGetUtilizationRates(h C.nvmlDevice_t, util *C.nvmlUtilization_t) C.nvmlReturn_t {
	return with(full, h, util, func(*device) C.nvmlReturn_t {
		util.gpu, util.memory = 0, 0
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetPerformanceState
func nvmlDeviceGetPerformanceState(h C.nvmlDevice_t, state *C.nvmlPstates_t) C.nvmlReturn_t {
	return set(full, h, state, func(*device) C.nvmlPstates_t { return C.NVML_PSTATE_0 })
}

func clock(h C.nvmlDevice_t, kind C.nvmlClockType_t, mhz *C.uint, max bool) C.nvmlReturn_t {
	return with(full, h, mhz, func(d *device) C.nvmlReturn_t {
		c := d.g.Clocks
		var v int
		switch kind {
		case C.NVML_CLOCK_GRAPHICS, C.NVML_CLOCK_SM:
			v = c.GraphicsIdle
			if max {
				v = c.MaxGraphics
			}
		case C.NVML_CLOCK_MEM:
			v = c.Memory
		case C.NVML_CLOCK_VIDEO:
			v = c.VideoIdle
			if max {
				v = c.MaxVideo
			}
		default:
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		*mhz = C.uint(v)
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetClockInfo
func nvmlDeviceGetClockInfo(h C.nvmlDevice_t, kind C.nvmlClockType_t, mhz *C.uint) C.nvmlReturn_t {
	return clock(h, kind, mhz, false)
}

//export nvmlDeviceGetMaxClockInfo
func nvmlDeviceGetMaxClockInfo(h C.nvmlDevice_t, kind C.nvmlClockType_t, mhz *C.uint) C.nvmlReturn_t {
	return clock(h, kind, mhz, true)
}

// computeModes maps the machine's compute mode names to NVML's (EXCLUSIVE_THREAD is deprecated: never set).
var computeModes = map[string]C.nvmlComputeMode_t{
	machine.ComputeModeDefault:          C.NVML_COMPUTEMODE_DEFAULT,
	machine.ComputeModeProhibited:       C.NVML_COMPUTEMODE_PROHIBITED,
	machine.ComputeModeExclusiveProcess: C.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
}

//export nvmlDeviceGetComputeMode
func nvmlDeviceGetComputeMode(h C.nvmlDevice_t, mode *C.nvmlComputeMode_t) C.nvmlReturn_t {
	return set(full, h, mode, func(d *device) C.nvmlComputeMode_t { return computeModes[d.v.ComputeMode] })
}

//export nvmlDeviceSetComputeMode
func nvmlDeviceSetComputeMode(h C.nvmlDevice_t, mode C.nvmlComputeMode_t) C.nvmlReturn_t {
	d, rc := fullGPU(h)
	if rc != C.NVML_SUCCESS {
		return rc
	}
	for name, value := range computeModes {
		if value == mode {
			_, err := made(func(m *machine.Machine) (struct{}, error) {
				return struct{}{}, m.SetComputeMode(d.g.Index, name)
			})
			return rcOf(err)
		}
	}
	return C.NVML_ERROR_INVALID_ARGUMENT
}

//export nvmlDeviceGetVirtualizationMode
func nvmlDeviceGetVirtualizationMode(h C.nvmlDevice_t, mode *C.nvmlGpuVirtualizationMode_t) C.nvmlReturn_t {
	return set(full, h, mode, func(d *device) C.nvmlGpuVirtualizationMode_t {
		if d.m.Hardware.System.Virtualization == "Pass-Through" {
			return C.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH
		}
		return C.NVML_GPU_VIRTUALIZATION_MODE_NONE
	})
}

//export nvmlDeviceGetComputeRunningProcesses_v3
func nvmlDeviceGetComputeRunningProcesses_v3(h C.nvmlDevice_t, count *C.uint, infos *C.nvmlProcessInfo_t) C.nvmlReturn_t {
	return set(get, h, count, func(*device) C.uint { return 0 }) // nothing runs on emulated silicon
}

//export nvmlDeviceGetGpuFabricInfo
func nvmlDeviceGetGpuFabricInfo(h C.nvmlDevice_t, info *C.nvmlGpuFabricInfo_t) C.nvmlReturn_t {
	return with(full, h, info, func(d *device) C.nvmlReturn_t {
		hopperOrNewer := d.g.Architecture == "Hopper" || d.g.Architecture == "Blackwell"
		if !hopperOrNewer {
			return C.NVML_ERROR_NOT_SUPPORTED
		}
		*info = C.nvmlGpuFabricInfo_t{}
		info.status = C.NVML_SUCCESS
		if !d.m.Hardware.System.NVSwitch {
			// a Hopper GPU with no fabric answers, with state NOT_SUPPORTED (a real H200 in a VM, 580.159.04)
			info.state = C.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED
			return C.NVML_SUCCESS
		}
		info.state = C.NVML_GPU_FABRIC_STATE_IN_PROGRESS
		if state, _ := d.m.Fabric(); state == "Completed" {
			info.state = C.NVML_GPU_FABRIC_STATE_COMPLETED
		}
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetAddressingMode
func nvmlDeviceGetAddressingMode(h C.nvmlDevice_t, mode *C.nvmlDeviceAddressingMode_t) C.nvmlReturn_t {
	_, rc := get(h)
	if rc != C.NVML_SUCCESS {
		return rc
	}
	return C.NVML_ERROR_NOT_SUPPORTED // no HMM/ATS on emulated silicon; the DRA driver takes this as "none"
}

// go-gpuallocator (NVIDIA's device plugin, GetPreferredAllocation) ranks GPU sets by these two: without them
// the plugin died on the first multi-GPU node's allocation with "undefined symbol".
//
//export nvmlDeviceGetTopologyCommonAncestor
func nvmlDeviceGetTopologyCommonAncestor(h1, h2 C.nvmlDevice_t, level *C.nvmlGpuTopologyLevel_t) C.nvmlReturn_t {
	return with(full, h1, level, func(a *device) C.nvmlReturn_t {
		b, rc := full(h2)
		if rc != C.NVML_SUCCESS {
			return rc
		}
		if a.mig != nil || b.mig != nil {
			return C.NVML_ERROR_NOT_SUPPORTED
		}
		*level = C.nvmlGpuTopologyLevel_t(a.m.CommonAncestor(a.g, b.g))
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetNvLinkRemotePciInfo_v2
func nvmlDeviceGetNvLinkRemotePciInfo_v2(h C.nvmlDevice_t, link C.uint, pci *C.nvmlPciInfo_t) C.nvmlReturn_t {
	return with(full, h, pci, func(d *device) C.nvmlReturn_t {
		if d.g.NVLinkLinks == 0 {
			return C.NVML_ERROR_NOT_SUPPORTED
		}
		bus := d.m.NVLinkRemoteBusID(d.g, int(link))
		if bus == "" {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		putBus(pci, bus)
		return C.NVML_SUCCESS
	})
}
