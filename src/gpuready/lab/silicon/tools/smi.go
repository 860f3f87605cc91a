package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"gpuready.lab/silicon/machine"
)

// computeModes: -c values as nvidia-smi takes them (a number or a name), as nvidia_smi.COMPUTE_MODES has them.
var computeModes = map[string]string{
	"0": machine.ComputeModeDefault, "DEFAULT": machine.ComputeModeDefault,
	"2": machine.ComputeModeProhibited, "PROHIBITED": machine.ComputeModeProhibited,
	"3": machine.ComputeModeExclusiveProcess, "EXCLUSIVE_PROCESS": machine.ComputeModeExclusiveProcess,
}

// Exit codes as nvidia-smi's (nvemu.EXIT_*).
const (
	exitNoPermission = 4
	exitNotFound     = 6
	exitNoDriver     = 9
	exitMismatch     = 18
	exitUsage        = 2
)

// smi is nvidia-smi's -c: "-i ID[,ID] -c MODE" (ID: index, UUID or PCI bus id; all GPUs without -i).
func smi(args []string) int {
	var ids, mode string
	for i := 0; i < len(args); i++ {
		arg := args[i]
		value := ""
		if i+1 < len(args) {
			value = args[i+1]
		}
		switch {
		case arg == "-i" || arg == "--id":
			ids, i = value, i+1
		case strings.HasPrefix(arg, "--id="):
			ids = strings.TrimPrefix(arg, "--id=")
		case arg == "-c" || arg == "--compute-mode":
			mode, i = value, i+1
		default:
			fmt.Fprintf(os.Stderr, "nvidia-smi %s: the lab's nvidia-smi runs only -c (compute mode) in a container "+
				"without Python; run it on the host\n", strings.Join(args, " "))
			return exitUsage
		}
	}
	name, ok := computeModes[strings.ToUpper(mode)]
	if !ok {
		fmt.Printf("Invalid value \"%s\" for option -c\n", mode)
		return exitUsage
	}
	var lines []string
	err := machine.Update(func(m *machine.Machine) error {
		gpus, err := selectGPUs(m, ids)
		if err != nil {
			return err
		}
		for _, g := range gpus {
			if m.View(g.Index).ComputeMode == name {
				lines = append(lines, fmt.Sprintf("Compute mode is already set to %s for GPU %s.",
					strings.ToUpper(name), g.PCIBusID))
				continue
			}
			if err := m.SetComputeMode(g.Index, name); err != nil {
				return err
			}
			lines = append(lines, fmt.Sprintf("Set compute mode to %s for GPU %s.", strings.ToUpper(name), g.PCIBusID))
		}
		return nil
	})
	switch {
	case errors.Is(err, machine.ErrNotFound):
		fmt.Println("No devices were found")
		return exitNotFound
	case errors.Is(err, machine.ErrNoPermission):
		fmt.Println("Unable to set the compute mode: Insufficient Permissions")
		return exitNoPermission
	case errors.Is(err, machine.ErrMismatch):
		fmt.Println("Failed to initialize NVML: Driver/library version mismatch")
		return exitMismatch
	case err != nil:
		fmt.Printf("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. (%v)\n", err)
		return exitNoDriver
	}
	for _, line := range lines {
		fmt.Println(line)
	}
	fmt.Println("All done.")
	return 0
}

// selectGPUs resolves -i as nvemu.select does: indexes, UUIDs or PCI bus ids, comma separated; all without one.
func selectGPUs(m *machine.Machine, ids string) ([]*machine.GPU, error) {
	if ids == "" {
		out := make([]*machine.GPU, 0, len(m.Hardware.GPUs))
		for i := range m.Hardware.GPUs {
			out = append(out, &m.Hardware.GPUs[i])
		}
		return out, nil
	}
	var out []*machine.GPU
	for _, id := range strings.Split(ids, ",") {
		id = strings.TrimSpace(id)
		found := false
		for i := range m.Hardware.GPUs {
			g := &m.Hardware.GPUs[i]
			bus := strings.ToLower(g.PCIBusID)
			if n, err := strconv.Atoi(id); (err == nil && n == g.Index) || id == g.UUID ||
				strings.ToLower(id) == bus || (len(bus) > 4 && strings.ToLower(id) == bus[4:]) {
				out, found = append(out, g), true
			}
		}
		if !found {
			return nil, machine.ErrNotFound
		}
	}
	return out, nil
}
