package cudadev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"gpuready.lab/silicon/machine"
)

// Device is one CUDA device as a process enumerates it: a GPU, or a MIG device of one.
type Device struct {
	GPU *machine.GPU
	// Name is cuDeviceGetName's: the GPU's, or "<GPU> MIG <profile>" for a MIG device.
	Name string
	// Total is the memory cuMemAlloc may hand out, in bytes (the GPU's less the driver's reservation).
	Total uint64
}

// Enumerate is what cuInit finds on the machine as it is now, and its CUresult (Success or an error):
//   - devices are the machine's GPUs in index order, less those off the bus (later ordinals move up);
//     none left: ErrorNoDevice.
//   - a process sees the GPUs whose device nodes it has (/dev/nvidia<minor>; GPUREADY_LAB_DEV moves /dev): in
//     a container, those the runtime gave it. Where /dev/nvidiactl is absent device nodes are not modelled
//     (the unit tests' machines) and every GPU counts.
//   - a GPU in MIG mode is not a CUDA device: its MIG devices are, and a process uses one, the first whose GPU
//     instance's access capability node (/dev/nvidia-caps/nvidia-cap<minor>) it has.
//   - a driver_mismatch fault, or a loaded module of another version than the library:
//     ErrorSystemDriverMismatch; no machine file or no kernel module: ErrorNoDevice; an NVSwitch machine whose
//     fabric is not up (Fabric Manager not running, fabric_failed): ErrorSystemNotReady.
func Enumerate() (*machine.Machine, []Device, int) {
	m, err := machine.Current()
	if err != nil {
		return nil, nil, ErrorNoDevice // no machine: no driver for libcuda to talk to
	}
	if err := m.CheckLoaded(); err != nil {
		if errors.Is(err, machine.ErrMismatch) {
			return nil, nil, ErrorSystemDriverMismatch
		}
		return nil, nil, ErrorNoDevice
	}
	var devices []Device
	dev := machine.DevDir()
	nodes := exists(filepath.Join(dev, "nvidiactl"))
	migSeen := false
	for i := range m.Hardware.GPUs {
		g := &m.Hardware.GPUs[i]
		v := m.View(g.Index)
		if v.OffBus {
			continue // lost by the driver
		}
		if nodes && !exists(filepath.Join(dev, fmt.Sprintf("nvidia%d", g.MinorNumber))) {
			continue // not this process's: a container the runtime gave other GPUs
		}
		if v.MigCurrent {
			for k := range v.MigDevices {
				mig := &v.MigDevices[k]
				access := fmt.Sprintf("nvidia-cap%d", machine.GIMinor(g.MinorNumber, mig.GI))
				if migSeen || (nodes && !exists(filepath.Join(dev, "nvidia-caps", access))) {
					continue
				}
				migSeen = true
				name := fmt.Sprintf("%s MIG %s", g.Name, mig.Name)
				devices = append(devices, Device{GPU: g, Name: name, Total: uint64(mig.MemoryMiB) << 20})
			}
			continue
		}
		free := uint64(max(g.MemoryMiB-g.ReservedMiB, 0)) << 20
		devices = append(devices, Device{GPU: g, Name: g.Name, Total: free})
	}
	if len(devices) == 0 {
		return nil, nil, ErrorNoDevice
	}
	if state, _ := m.Fabric(); m.Hardware.System.NVSwitch && state != "Completed" {
		return nil, nil, ErrorSystemNotReady // NVSwitch GPUs are unusable until Fabric Manager set up the fabric
	}
	return m, devices, Success
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
