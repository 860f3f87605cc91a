package main

import (
	"os"

	"gpuready.lab/silicon/machine"
)

// initDriver is the machine as NVML init finds it (machine.ErrNoDriver, machine.ErrMismatch when it fails), for the
// tools that read it. The first command of a boot loads the installed kernel module (nvidia-modprobe's job on a
// real host): the state records it, so a driver upgraded later mismatches until the next reboot. A container or an
// unprivileged user records nothing.
func initDriver() (*machine.Machine, error) {
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
