package main

// NVML init as the tools on a host see it, shared by nvidia-smi and the daemons.

import (
	"errors"
	"os"

	"gpuready.lab/silicon/machine"
)

// openDriver is NVML init as a tool on the host does it: the machine, or why NVML cannot start (no hardware file,
// no module, library/module mismatch). The first use in a boot loads the installed kernel module (nvidia-modprobe's
// job on a real host): the state records it, so a driver upgraded later mismatches until the next reboot. A
// container or an unprivileged user records nothing.
func openDriver() (*machine.Machine, error) {
	m, err := machine.Load()
	if err == nil {
		err = m.CheckLoaded()
	}
	if err != nil {
		return nil, err
	}
	if _, inContainer := os.LookupEnv(machine.ContainerDevices); !inContainer &&
		(m.State.Kmod == nil || *m.State.Kmod == "") {
		_ = machine.Update(func(*machine.Machine) error { return nil })
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
