package main

// MIG changes through NVML, as the real library makes them for nvidia-mig-parted, the MIG manager and
// nvidia-smi: the mock changes the emulated driver's state file through machine.Update (the state's lock and
// layout), so the emulated nvidia-smi sees an instance created here at once and NVML sees one nvidia-smi
// created. The placement and numbering rules are package machine's, which nvidia-smi mig uses too (tools/mig.go).

/*
#include "shim.h"
*/
import "C"

import (
	"errors"

	"gpuready.lab/silicon/machine"
)

// rcOf is the NVML return code of a machine error.
func rcOf(err error) C.nvmlReturn_t {
	switch {
	case err == nil:
		return C.NVML_SUCCESS
	case errors.Is(err, machine.ErrNoPermission):
		return C.NVML_ERROR_NO_PERMISSION
	case errors.Is(err, machine.ErrNotSupported):
		return C.NVML_ERROR_NOT_SUPPORTED
	case errors.Is(err, machine.ErrInUse):
		return C.NVML_ERROR_IN_USE
	case errors.Is(err, machine.ErrNotFound):
		return C.NVML_ERROR_NOT_FOUND
	case errors.Is(err, machine.ErrInvalidArgument):
		return C.NVML_ERROR_INVALID_ARGUMENT
	case errors.Is(err, machine.ErrInsufficientResources):
		return C.NVML_ERROR_INSUFFICIENT_RESOURCES
	case errors.Is(err, machine.ErrMismatch):
		return C.NVML_ERROR_LIB_RM_VERSION_MISMATCH
	case errors.Is(err, machine.ErrNoDriver):
		return C.NVML_ERROR_DRIVER_NOT_LOADED
	}
	return C.NVML_ERROR_UNKNOWN
}

// fullGPU resolves a handle that must name a whole GPU (not a MIG device).
func fullGPU(h C.nvmlDevice_t) (*device, C.nvmlReturn_t) {
	d, rc := get(h)
	if rc != C.NVML_SUCCESS {
		return nil, rc
	}
	if d.mig != nil {
		return nil, C.NVML_ERROR_INVALID_ARGUMENT
	}
	return d, C.NVML_SUCCESS
}

//export nvmlDeviceSetMigMode
func nvmlDeviceSetMigMode(h C.nvmlDevice_t, mode C.uint, activationStatus *C.nvmlReturn_t) C.nvmlReturn_t {
	d, rc := fullGPU(h)
	if rc != C.NVML_SUCCESS {
		return rc
	}
	if activationStatus == nil || (mode != C.NVML_DEVICE_MIG_DISABLE && mode != C.NVML_DEVICE_MIG_ENABLE) {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	if !d.g.MIGCapable {
		return C.NVML_ERROR_NOT_SUPPORTED
	}
	pending, err := made(func(m *machine.Machine) (bool, error) {
		return m.SetMigMode(d.g.Index, mode == C.NVML_DEVICE_MIG_ENABLE)
	})
	if err != nil {
		// Disabling with instances left is refused (nvidia-smi: "Unable to disable MIG Mode ...: In use by
		// another client"); the mode is unchanged.
		return rcOf(err)
	}
	*activationStatus = C.NVML_SUCCESS
	if pending {
		// The lab's hosts cannot reset a GPU in place (nvidia-smi -mig, tools/smi.go): the new mode waits for a GPU
		// reset (nvidia-smi -r) or a reboot, reported as the emulated nvidia-smi reports it ("Not Supported").
		*activationStatus = C.NVML_ERROR_NOT_SUPPORTED
	}
	return C.NVML_SUCCESS
}

// giProfileID checks a GPU instance profile id (nvmlGpuInstanceProfileInfo_t.id) of a GPU in MIG mode.
func giProfileID(d *device, profileID C.uint) C.nvmlReturn_t {
	if !d.g.MIGCapable || !d.v.MigCurrent {
		return C.NVML_ERROR_NOT_SUPPORTED
	}
	if d.g.Profile(int(profileID)) == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	return C.NVML_SUCCESS
}

//export nvmlDeviceGetGpuInstanceRemainingCapacity
func nvmlDeviceGetGpuInstanceRemainingCapacity(h C.nvmlDevice_t, profileID C.uint, count *C.uint) C.nvmlReturn_t {
	return with(fullGPU, h, count, func(d *device) C.nvmlReturn_t {
		if rc := giProfileID(d, profileID); rc != C.NVML_SUCCESS {
			return rc
		}
		*count = C.uint(machine.FreeCount(d.g, d.v.GPUInstances, d.g.Profile(int(profileID))))
		return C.NVML_SUCCESS
	})
}

// made runs one write on the emulated machine (machine.Update: under its lock, then saved) and returns what
// the write made.
func made[T any](write func(m *machine.Machine) (T, error)) (T, error) {
	var out T
	err := machine.Update(func(m *machine.Machine) error {
		var err error
		out, err = write(m)
		return err
	})
	return out, err
}

func createGI(h C.nvmlDevice_t, profileID C.uint, start int, out *C.nvmlGpuInstance_t) C.nvmlReturn_t {
	return with(fullGPU, h, out, func(d *device) C.nvmlReturn_t {
		if rc := giProfileID(d, profileID); rc != C.NVML_SUCCESS {
			return rc
		}
		gi, err := made(func(m *machine.Machine) (machine.GPUInstance, error) {
			return m.CreateGPUInstance(d.g.Index, int(profileID), start)
		})
		if err != nil {
			return rcOf(err)
		}
		*out = giHandle(devKey{d.g.Index, gi.ID, -1})
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceCreateGpuInstance
func nvmlDeviceCreateGpuInstance(h C.nvmlDevice_t, profileID C.uint, out *C.nvmlGpuInstance_t) C.nvmlReturn_t {
	return createGI(h, profileID, -1, out)
}

//export nvmlDeviceCreateGpuInstanceWithPlacement
func nvmlDeviceCreateGpuInstanceWithPlacement(h C.nvmlDevice_t, profileID C.uint, placement *C.nvmlGpuInstancePlacement_t, out *C.nvmlGpuInstance_t) C.nvmlReturn_t {
	if placement == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	d, rc := fullGPU(h)
	if rc != C.NVML_SUCCESS {
		return rc
	}
	if rc := giProfileID(d, profileID); rc != C.NVML_SUCCESS {
		return rc
	}
	if int(placement.size) != d.g.Profile(int(profileID)).PlacementSize {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	return createGI(h, profileID, int(placement.start), out)
}

//export nvmlGpuInstanceDestroy
func nvmlGpuInstanceDestroy(h C.nvmlGpuInstance_t) C.nvmlReturn_t {
	gi, rc := getGI(h)
	if rc == C.NVML_ERROR_NOT_FOUND {
		return C.NVML_ERROR_INVALID_ARGUMENT // destroyed already: the handle is no longer valid
	}
	if rc != C.NVML_SUCCESS {
		return rc
	}
	return rcOf(machine.Update(func(m *machine.Machine) error {
		return m.DestroyGPUInstance(gi.d.g.Index, gi.gi.ID)
	}))
}

//export nvmlGpuInstanceGetComputeInstanceRemainingCapacity
func nvmlGpuInstanceGetComputeInstanceRemainingCapacity(h C.nvmlGpuInstance_t, profileID C.uint, count *C.uint) C.nvmlReturn_t {
	gi, rc := getGI(h)
	if rc != C.NVML_SUCCESS {
		return rc
	}
	if count == nil || profileID >= C.NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	if _, _, rc := ciProfile(h, profileID, 0); rc != C.NVML_SUCCESS {
		return rc
	}
	// Compute instances are placed lowest first, each at a start of its own size's grid.
	slices := machine.CISlicesByProfile[int(profileID)]
	trial := gi.gi
	n := 0
	for {
		free := machine.FreeCIStarts(gi.prof, trial, slices)
		if len(free) == 0 {
			break
		}
		trial.CIs = append(append([]machine.ComputeInstance(nil), trial.CIs...), machine.ComputeInstance{Start: free[0], Size: slices})
		n++
	}
	*count = C.uint(n)
	return C.NVML_SUCCESS
}

func createCI(h C.nvmlGpuInstance_t, profileID C.uint, start int, out *C.nvmlComputeInstance_t) C.nvmlReturn_t {
	return with(getGI, h, out, func(gi *gpuInstance) C.nvmlReturn_t {
		if profileID >= C.NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		ci, err := made(func(m *machine.Machine) (machine.ComputeInstance, error) {
			return m.CreateComputeInstance(gi.d.g.Index, gi.gi.ID, int(profileID), start)
		})
		if err != nil {
			return rcOf(err)
		}
		*out = ciHandle(devKey{gi.d.g.Index, gi.gi.ID, ci.ID})
		return C.NVML_SUCCESS
	})
}

//export nvmlGpuInstanceCreateComputeInstance
func nvmlGpuInstanceCreateComputeInstance(h C.nvmlGpuInstance_t, profileID C.uint, out *C.nvmlComputeInstance_t) C.nvmlReturn_t {
	return createCI(h, profileID, -1, out)
}

//export nvmlGpuInstanceCreateComputeInstanceWithPlacement
func nvmlGpuInstanceCreateComputeInstanceWithPlacement(h C.nvmlGpuInstance_t, profileID C.uint, placement *C.nvmlComputeInstancePlacement_t, out *C.nvmlComputeInstance_t) C.nvmlReturn_t {
	if placement == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	if slices, ok := machine.CISlicesByProfile[int(profileID)]; !ok || int(placement.size) != slices {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	return createCI(h, profileID, int(placement.start), out)
}

//export nvmlComputeInstanceDestroy
func nvmlComputeInstanceDestroy(h C.nvmlComputeInstance_t) C.nvmlReturn_t {
	mu.Lock()
	k, ok := ciKeys[h]
	mu.Unlock()
	if !ok {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	if _, rc := fullGPU(handleFor(devKey{k.gpu, -1, -1})); rc != C.NVML_SUCCESS {
		return rc
	}
	err := machine.Update(func(m *machine.Machine) error { return m.DestroyComputeInstance(k.gpu, k.gi, k.ci) })
	if errors.Is(err, machine.ErrNotFound) {
		return C.NVML_ERROR_INVALID_ARGUMENT // destroyed already: the handle is no longer valid
	}
	return rcOf(err)
}
