package main

/*
#include "shim.h"
*/
import "C"

import (
	"unsafe"

	"gpuready.lab/silicon/machine"
)

// GPU and compute instance handles and queries (creating and destroying instances: mig_write.go, through
// the driver state file nvidia-smi shares). go-nvlib's MigDevice.GetProfile walks these to name a MIG
// device's profile, so the device plugin's mixed strategy needs them.

var (
	giHandles = map[devKey]C.nvmlGpuInstance_t{}
	giKeys    = map[C.nvmlGpuInstance_t]devKey{}
	ciHandles = map[devKey]C.nvmlComputeInstance_t{}
	ciKeys    = map[C.nvmlComputeInstance_t]devKey{}
)

func giHandle(k devKey) C.nvmlGpuInstance_t {
	mu.Lock()
	defer mu.Unlock()
	if h, ok := giHandles[k]; ok {
		return h
	}
	p := (*C.struct_nvmlGpuInstance_st)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_nvmlGpuInstance_st{}))))
	h := C.nvmlGpuInstance_t{handle: p}
	giHandles[k], giKeys[h] = h, k
	return h
}

func ciHandle(k devKey) C.nvmlComputeInstance_t {
	mu.Lock()
	defer mu.Unlock()
	if h, ok := ciHandles[k]; ok {
		return h
	}
	p := (*C.struct_nvmlComputeInstance_st)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_nvmlComputeInstance_st{}))))
	h := C.nvmlComputeInstance_t{handle: p}
	ciHandles[k], ciKeys[h] = h, k
	return h
}

// gpuInstance is one GPU instance as a call sees it now.
type gpuInstance struct {
	d    *device // the parent GPU
	gi   machine.GPUInstance
	prof *machine.MigProfile
}

func findGI(d *device, id int) (*gpuInstance, C.nvmlReturn_t) {
	for _, gi := range d.v.GPUInstances {
		if gi.ID == id {
			prof := d.g.Profile(gi.ProfileID)
			if prof == nil {
				return nil, C.NVML_ERROR_UNKNOWN
			}
			return &gpuInstance{d: d, gi: gi, prof: prof}, C.NVML_SUCCESS
		}
	}
	return nil, C.NVML_ERROR_NOT_FOUND
}

func getGI(h C.nvmlGpuInstance_t) (*gpuInstance, C.nvmlReturn_t) {
	mu.Lock()
	k, ok := giKeys[h]
	mu.Unlock()
	if !ok {
		return nil, C.NVML_ERROR_INVALID_ARGUMENT
	}
	d, rc := get(handleFor(devKey{k.gpu, -1, -1}))
	if rc != C.NVML_SUCCESS {
		return nil, rc
	}
	return findGI(d, k.gi)
}

// parentGPU resolves a full GPU handle that must be in MIG mode.
func parentGPU(h C.nvmlDevice_t) (*device, C.nvmlReturn_t) {
	d, rc := get(h)
	if rc != C.NVML_SUCCESS {
		return nil, rc
	}
	if d.mig != nil || !d.g.MIGCapable {
		return nil, C.NVML_ERROR_NOT_SUPPORTED
	}
	if !d.v.MigCurrent {
		return nil, C.NVML_ERROR_INVALID_ARGUMENT
	}
	return d, C.NVML_SUCCESS
}

//export nvmlDeviceGetGpuInstances
func nvmlDeviceGetGpuInstances(h C.nvmlDevice_t, profileID C.uint, out *C.nvmlGpuInstance_t, count *C.uint) C.nvmlReturn_t {
	return with(parentGPU, h, count, func(d *device) C.nvmlReturn_t {
		prof := d.g.Profile(int(profileID))
		if prof == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		var found []machine.GPUInstance
		for _, gi := range d.v.GPUInstances {
			if gi.ProfileID == int(profileID) {
				found = append(found, gi)
			}
		}
		if len(found) > 0 && out == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		// The caller sizes the array for the profile's instanceCount, as NVML documents.
		if len(found) > 0 {
			slots := unsafe.Slice(out, len(found))
			for i, gi := range found {
				slots[i] = giHandle(devKey{d.g.Index, gi.ID, -1})
			}
		}
		*count = C.uint(len(found))
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetGpuInstanceById
func nvmlDeviceGetGpuInstanceById(h C.nvmlDevice_t, id C.uint, out *C.nvmlGpuInstance_t) C.nvmlReturn_t {
	return with(parentGPU, h, out, func(d *device) C.nvmlReturn_t {
		gi, rc := findGI(d, int(id))
		if rc != C.NVML_SUCCESS {
			return rc
		}
		*out = giHandle(devKey{d.g.Index, gi.gi.ID, -1})
		return C.NVML_SUCCESS
	})
}

//export nvmlGpuInstanceGetInfo
func nvmlGpuInstanceGetInfo(h C.nvmlGpuInstance_t, info *C.nvmlGpuInstanceInfo_t) C.nvmlReturn_t {
	return with(getGI, h, info, func(gi *gpuInstance) C.nvmlReturn_t {
		*info = C.nvmlGpuInstanceInfo_t{
			device:    handleFor(devKey{gi.d.g.Index, -1, -1}),
			id:        C.uint(gi.gi.ID),
			profileId: C.uint(gi.gi.ProfileID),
			placement: C.nvmlGpuInstancePlacement_t{start: C.uint(gi.gi.Start), size: C.uint(gi.gi.Size)},
		}
		return C.NVML_SUCCESS
	})
}

// ciProfile answers a compute instance profile query: the profile (0 = NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, ...)
// inside this GPU instance, as nvidia-smi mig -lcip lists them (tools/mig.go).
func ciProfile(h C.nvmlGpuInstance_t, profile, engProfile C.uint) (C.nvmlComputeInstanceProfileInfo_t, string, C.nvmlReturn_t) {
	var info C.nvmlComputeInstanceProfileInfo_t
	gi, rc := getGI(h)
	if rc != C.NVML_SUCCESS {
		return info, "", rc
	}
	if profile >= C.NVML_COMPUTE_INSTANCE_PROFILE_COUNT || engProfile >= C.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT {
		return info, "", C.NVML_ERROR_INVALID_ARGUMENT
	}
	p := gi.prof
	slices, ok := machine.CISlices(p, int(profile))
	if !ok {
		return info, "", C.NVML_ERROR_NOT_SUPPORTED
	}
	sm, name := p.SMCount*slices/p.ComputeSlices, "MIG "+machine.CIName(p, slices)
	info = C.nvmlComputeInstanceProfileInfo_t{
		id: profile, sliceCount: C.uint(slices), instanceCount: C.uint(len(machine.CIStarts(p, slices))),
		multiprocessorCount: C.uint(sm), sharedCopyEngineCount: C.uint(p.CopyEngines),
		sharedDecoderCount: C.uint(p.Decoders), sharedEncoderCount: C.uint(p.Encoders),
		sharedJpegCount: C.uint(p.JPEG), sharedOfaCount: C.uint(p.OFA),
	}
	return info, name, C.NVML_SUCCESS
}

//export nvmlGpuInstanceGetComputeInstanceProfileInfo
func nvmlGpuInstanceGetComputeInstanceProfileInfo(h C.nvmlGpuInstance_t, profile, engProfile C.uint, info *C.nvmlComputeInstanceProfileInfo_t) C.nvmlReturn_t {
	if info == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	got, _, rc := ciProfile(h, profile, engProfile)
	if rc == C.NVML_SUCCESS {
		*info = got
	}
	return rc
}

//export nvmlGpuInstanceGetComputeInstanceProfileInfoV
func nvmlGpuInstanceGetComputeInstanceProfileInfoV(h C.nvmlGpuInstance_t, profile, engProfile C.uint, info *C.nvmlComputeInstanceProfileInfo_v2_t) C.nvmlReturn_t {
	if info == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	version := info.version
	if version != C.nvmlComputeInstanceProfileInfo_v2 && version != C.nvmlComputeInstanceProfileInfo_v3 {
		return C.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
	}
	got, name, rc := ciProfile(h, profile, engProfile)
	if rc != C.NVML_SUCCESS {
		return rc
	}
	if version == C.nvmlComputeInstanceProfileInfo_v3 { // v3 is v2 plus capabilities (none here)
		(*C.nvmlComputeInstanceProfileInfo_v3_t)(unsafe.Pointer(info)).capabilities = 0
	}
	info.id, info.sliceCount, info.instanceCount = got.id, got.sliceCount, got.instanceCount
	info.multiprocessorCount, info.sharedCopyEngineCount = got.multiprocessorCount, got.sharedCopyEngineCount
	info.sharedDecoderCount, info.sharedEncoderCount = got.sharedDecoderCount, got.sharedEncoderCount
	info.sharedJpegCount, info.sharedOfaCount = got.sharedJpegCount, got.sharedOfaCount
	putFixed(info.name[:], name)
	return C.NVML_SUCCESS
}

//export nvmlGpuInstanceGetComputeInstances
func nvmlGpuInstanceGetComputeInstances(h C.nvmlGpuInstance_t, profileID C.uint, out *C.nvmlComputeInstance_t, count *C.uint) C.nvmlReturn_t {
	return with(getGI, h, count, func(gi *gpuInstance) C.nvmlReturn_t {
		var found []machine.ComputeInstance
		for _, ci := range gi.gi.CIs {
			if ci.ProfileID == int(profileID) {
				found = append(found, ci)
			}
		}
		if len(found) > 0 && out == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		if len(found) > 0 {
			slots := unsafe.Slice(out, len(found))
			for i, ci := range found {
				slots[i] = ciHandle(devKey{gi.d.g.Index, gi.gi.ID, ci.ID})
			}
		}
		*count = C.uint(len(found))
		return C.NVML_SUCCESS
	})
}

//export nvmlGpuInstanceGetComputeInstanceById
func nvmlGpuInstanceGetComputeInstanceById(h C.nvmlGpuInstance_t, id C.uint, out *C.nvmlComputeInstance_t) C.nvmlReturn_t {
	return with(getGI, h, out, func(gi *gpuInstance) C.nvmlReturn_t {
		for _, ci := range gi.gi.CIs {
			if ci.ID == int(id) {
				*out = ciHandle(devKey{gi.d.g.Index, gi.gi.ID, ci.ID})
				return C.NVML_SUCCESS
			}
		}
		return C.NVML_ERROR_NOT_FOUND
	})
}

//export nvmlComputeInstanceGetInfo_v2
func nvmlComputeInstanceGetInfo_v2(h C.nvmlComputeInstance_t, info *C.nvmlComputeInstanceInfo_t) C.nvmlReturn_t {
	mu.Lock()
	k, ok := ciKeys[h]
	mu.Unlock()
	if !ok || info == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	d, rc := get(handleFor(devKey{k.gpu, -1, -1}))
	if rc != C.NVML_SUCCESS {
		return rc
	}
	gi, rc := findGI(d, k.gi)
	if rc != C.NVML_SUCCESS {
		return rc
	}
	for _, ci := range gi.gi.CIs {
		if ci.ID == k.ci {
			*info = C.nvmlComputeInstanceInfo_t{
				device:      handleFor(devKey{k.gpu, -1, -1}),
				gpuInstance: giHandle(devKey{k.gpu, k.gi, -1}),
				id:          C.uint(ci.ID),
				profileId:   C.uint(ci.ProfileID),
				placement:   C.nvmlComputeInstancePlacement_t{start: C.uint(ci.Start), size: C.uint(ci.Size)},
			}
			return C.NVML_SUCCESS
		}
	}
	return C.NVML_ERROR_NOT_FOUND
}
