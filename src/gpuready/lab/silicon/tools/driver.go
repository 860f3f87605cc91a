package main

// NVML init as the tools on a host see it, shared by nvidia-smi and the daemons.

import (
	"errors"

	"gpuready.lab/silicon/machine"
)

// openDriver is NVML init as a tool on the host does it: the machine, or why NVML cannot start (no hardware file,
// no module, library/module mismatch). The first use in a boot loads the installed kernel module first
// (machine's LoadModule, nvidia-modprobe's job on a real host), so a driver upgraded later mismatches until the
// next reboot; then NVML compares the module's version with the library's. nvidia-smi, dcgmi (whose nv-hostengine
// needs NVML) and the daemons start from it.
func openDriver() (*machine.Machine, error) {
	m, err := machine.Load()
	if err != nil {
		return nil, err
	}
	m.LoadModule()
	if err := m.CheckLoaded(); err != nil {
		return nil, err
	}
	return m, nil
}

// nvmlFailure is what the NVIDIA tools print when NVML cannot start for err (from openDriver).
func nvmlFailure(err error) string {
	if errors.Is(err, machine.ErrMismatch) {
		return "Failed to initialize NVML: Driver/library version mismatch"
	}
	return "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. " +
		"Make sure that the latest NVIDIA driver is installed and running."
}
