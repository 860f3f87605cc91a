package main

/*
#include "shim.h"
*/
import "C"

import (
	"strings"
	"unsafe"

	"gpuready.lab/silicon/machine"
)

//export nvmlDeviceGetMigMode
func nvmlDeviceGetMigMode(h C.nvmlDevice_t, current, pending *C.uint) C.nvmlReturn_t {
	return with2(get, h, current, pending, func(d *device) C.nvmlReturn_t {
		if d.mig != nil || !d.g.MIGCapable {
			return C.NVML_ERROR_NOT_SUPPORTED
		}
		*current, *pending = C.uint(feature(d.v.MigCurrent)), C.uint(feature(d.v.MigPending))
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetMaxMigDeviceCount
func nvmlDeviceGetMaxMigDeviceCount(h C.nvmlDevice_t, count *C.uint) C.nvmlReturn_t {
	return with(get, h, count, func(d *device) C.nvmlReturn_t {
		if d.mig != nil || !d.g.MIGCapable {
			return C.NVML_ERROR_NOT_SUPPORTED
		}
		*count = 0 // MIG off: no MIG device slots, though MIG capable (a real H200, 580.159.04)
		if d.v.MigCurrent {
			*count = C.uint(d.g.MIGComputeSlices)
		}
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetMigDeviceHandleByIndex
func nvmlDeviceGetMigDeviceHandleByIndex(h C.nvmlDevice_t, index C.uint, out *C.nvmlDevice_t) C.nvmlReturn_t {
	d, rc := get(h)
	if rc != C.NVML_SUCCESS {
		return rc
	}
	if out == nil || d.mig != nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	if !d.g.MIGCapable {
		return C.NVML_ERROR_NOT_SUPPORTED
	}
	if int(index) >= len(d.v.MigDevices) {
		return C.NVML_ERROR_NOT_FOUND
	}
	m := d.v.MigDevices[index]
	*out = handleFor(devKey{d.g.Index, m.GI, m.CI})
	return C.NVML_SUCCESS
}

//export nvmlDeviceGetDeviceHandleFromMigDeviceHandle
func nvmlDeviceGetDeviceHandleFromMigDeviceHandle(h C.nvmlDevice_t, out *C.nvmlDevice_t) C.nvmlReturn_t {
	d, rc := get(h)
	if rc != C.NVML_SUCCESS {
		return rc
	}
	if out == nil || d.mig == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	*out = handleFor(devKey{d.g.Index, -1, -1})
	return C.NVML_SUCCESS
}

//export nvmlDeviceIsMigDeviceHandle
func nvmlDeviceIsMigDeviceHandle(h C.nvmlDevice_t, isMig *C.uint) C.nvmlReturn_t {
	return with(get, h, isMig, func(d *device) C.nvmlReturn_t {
		*isMig = 0
		if d.mig != nil {
			*isMig = 1
		}
		return C.NVML_SUCCESS
	})
}

func instanceID(h C.nvmlDevice_t, id *C.uint, gi bool) C.nvmlReturn_t {
	return with(get, h, id, func(d *device) C.nvmlReturn_t {
		if d.mig == nil {
			return C.NVML_ERROR_NOT_SUPPORTED
		}
		*id = C.uint(d.mig.CI)
		if gi {
			*id = C.uint(d.mig.GI)
		}
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetGpuInstanceId
func nvmlDeviceGetGpuInstanceId(h C.nvmlDevice_t, id *C.uint) C.nvmlReturn_t {
	return instanceID(h, id, true)
}

//export nvmlDeviceGetComputeInstanceId
func nvmlDeviceGetComputeInstanceId(h C.nvmlDevice_t, id *C.uint) C.nvmlReturn_t {
	return instanceID(h, id, false)
}

//export nvmlDeviceGetAttributes_v2
func nvmlDeviceGetAttributes_v2(h C.nvmlDevice_t, a *C.nvmlDeviceAttributes_t) C.nvmlReturn_t {
	return with(get, h, a, func(d *device) C.nvmlReturn_t {
		*a = C.nvmlDeviceAttributes_t{}
		if d.mig == nil {
			a.multiprocessorCount = C.uint(d.g.SMCount)
			a.memorySizeMB = C.ulonglong(d.g.MemoryMiB)
			a.gpuInstanceSliceCount = C.uint(d.g.MIGComputeSlices)
			a.computeInstanceSliceCount = C.uint(d.g.MIGComputeSlices)
			return C.NVML_SUCCESS
		}
		p := d.mig.Profile
		a.multiprocessorCount = C.uint(d.mig.SMCount)
		a.sharedCopyEngineCount = C.uint(p.CopyEngines)
		a.sharedDecoderCount = C.uint(p.Decoders)
		a.sharedEncoderCount = C.uint(p.Encoders)
		a.sharedJpegCount = C.uint(p.JPEG)
		a.sharedOfaCount = C.uint(p.OFA)
		a.gpuInstanceSliceCount = C.uint(p.ComputeSlices)
		a.computeInstanceSliceCount = C.uint(d.mig.Compute.Size)
		a.memorySizeMB = C.ulonglong(p.MemoryMiB)
		return C.NVML_SUCCESS
	})
}

// profileIndex is the NVML_GPU_INSTANCE_PROFILE_* constant of a profile, -1 when NVML has none.
func profileIndex(p machine.MigProfile) int {
	base := map[int]int{1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}
	variant := func(table map[int]int) int {
		if v, ok := table[p.ComputeSlices]; ok {
			return v
		}
		return -1
	}
	switch {
	case strings.HasSuffix(p.Name, "+me.all"):
		return variant(map[int]int{1: 0xF, 2: 0x10})
	case strings.HasSuffix(p.Name, "+me"):
		return variant(map[int]int{1: 0x7, 2: 0x8})
	case strings.HasSuffix(p.Name, "-me"):
		return variant(map[int]int{1: 0xD, 2: 0xE})
	case strings.HasSuffix(p.Name, "+gfx"):
		return variant(map[int]int{1: 0xA, 2: 0xB, 3: 0x11, 4: 0xC})
	case p.ComputeSlices == 1 && p.MemorySlices > 1:
		return 0x9 // 1g.20gb: 1_SLICE_REV2
	}
	return variant(base)
}

// profileFor finds the GPU's profile with this NVML profile index.
// driverProfileCount: R580 answers INVALID_ARGUMENT from profile 17 on (a real H200, 580.159.04), though newer
// headers count 18 (NVML_GPU_INSTANCE_PROFILE_COUNT).
const driverProfileCount = 17

func profileFor(h C.nvmlDevice_t, index C.uint) (*device, *machine.MigProfile, C.nvmlReturn_t) {
	d, rc := get(h)
	if rc != C.NVML_SUCCESS {
		return nil, nil, rc
	}
	if d.mig != nil || !d.g.MIGCapable {
		return nil, nil, C.NVML_ERROR_NOT_SUPPORTED
	}
	for i := range d.g.MIGProfiles {
		if profileIndex(d.g.MIGProfiles[i]) == int(index) {
			return d, &d.g.MIGProfiles[i], C.NVML_SUCCESS
		}
	}
	if index >= driverProfileCount {
		return nil, nil, C.NVML_ERROR_INVALID_ARGUMENT
	}
	return nil, nil, C.NVML_ERROR_NOT_SUPPORTED
}

func p2p(p *machine.MigProfile) C.uint {
	if p.P2P {
		return 1
	}
	return 0
}

//export nvmlDeviceGetGpuInstanceProfileInfo
func nvmlDeviceGetGpuInstanceProfileInfo(h C.nvmlDevice_t, index C.uint, info *C.nvmlGpuInstanceProfileInfo_t) C.nvmlReturn_t {
	if info == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	_, p, rc := profileFor(h, index)
	if rc != C.NVML_SUCCESS {
		return rc
	}
	*info = C.nvmlGpuInstanceProfileInfo_t{
		id: C.uint(p.ProfileID), isP2pSupported: p2p(p), sliceCount: C.uint(p.ComputeSlices),
		instanceCount: C.uint(p.MaxInstances), multiprocessorCount: C.uint(p.SMCount),
		copyEngineCount: C.uint(p.CopyEngines), decoderCount: C.uint(p.Decoders),
		encoderCount: C.uint(p.Encoders), jpegCount: C.uint(p.JPEG), ofaCount: C.uint(p.OFA),
		memorySizeMB: C.ulonglong(p.MemoryMiB),
	}
	return C.NVML_SUCCESS
}

//export nvmlDeviceGetGpuInstanceProfileInfoV
func nvmlDeviceGetGpuInstanceProfileInfoV(h C.nvmlDevice_t, index C.uint, info *C.nvmlGpuInstanceProfileInfo_v2_t) C.nvmlReturn_t {
	if info == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	version := info.version
	if version != C.nvmlGpuInstanceProfileInfo_v2 && version != C.nvmlGpuInstanceProfileInfo_v3 {
		return C.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
	}
	_, p, rc := profileFor(h, index)
	if rc != C.NVML_SUCCESS {
		return rc
	}
	name := "MIG " + p.Name
	if version == C.nvmlGpuInstanceProfileInfo_v3 {
		v3 := (*C.nvmlGpuInstanceProfileInfo_v3_t)(unsafe.Pointer(info))
		*v3 = C.nvmlGpuInstanceProfileInfo_v3_t{
			version: version, id: C.uint(p.ProfileID), sliceCount: C.uint(p.ComputeSlices),
			instanceCount: C.uint(p.MaxInstances), multiprocessorCount: C.uint(p.SMCount),
			copyEngineCount: C.uint(p.CopyEngines), decoderCount: C.uint(p.Decoders),
			encoderCount: C.uint(p.Encoders), jpegCount: C.uint(p.JPEG), ofaCount: C.uint(p.OFA),
			memorySizeMB: C.ulonglong(p.MemoryMiB),
		}
		if p.P2P {
			v3.capabilities = C.NVML_GPU_INSTANCE_PROFILE_CAPS_P2P
		}
		putFixed(v3.name[:], name)
		return C.NVML_SUCCESS
	}
	*info = C.nvmlGpuInstanceProfileInfo_v2_t{
		version: version, id: C.uint(p.ProfileID), isP2pSupported: p2p(p), sliceCount: C.uint(p.ComputeSlices),
		instanceCount: C.uint(p.MaxInstances), multiprocessorCount: C.uint(p.SMCount),
		copyEngineCount: C.uint(p.CopyEngines), decoderCount: C.uint(p.Decoders),
		encoderCount: C.uint(p.Encoders), jpegCount: C.uint(p.JPEG), ofaCount: C.uint(p.OFA),
		memorySizeMB: C.ulonglong(p.MemoryMiB),
	}
	putFixed(info.name[:], name)
	return C.NVML_SUCCESS
}

//export nvmlDeviceGetGpuInstancePossiblePlacements_v2
func nvmlDeviceGetGpuInstancePossiblePlacements_v2(h C.nvmlDevice_t, profileID C.uint, placements *C.nvmlGpuInstancePlacement_t, count *C.uint) C.nvmlReturn_t {
	return with(get, h, count, func(d *device) C.nvmlReturn_t {
		if d.mig != nil || !d.g.MIGCapable {
			return C.NVML_ERROR_NOT_SUPPORTED
		}
		for _, p := range d.g.MIGProfiles {
			if p.ProfileID != int(profileID) {
				continue
			}
			if placements == nil {
				*count = C.uint(len(p.Placements))
				return C.NVML_SUCCESS
			}
			if int(*count) < len(p.Placements) {
				*count = C.uint(len(p.Placements))
				return C.NVML_ERROR_INSUFFICIENT_SIZE
			}
			out := unsafe.Slice(placements, len(p.Placements))
			for i, start := range p.Placements {
				out[i] = C.nvmlGpuInstancePlacement_t{start: C.uint(start), size: C.uint(p.PlacementSize)}
			}
			*count = C.uint(len(p.Placements))
			return C.NVML_SUCCESS
		}
		return C.NVML_ERROR_NOT_SUPPORTED
	})
}
