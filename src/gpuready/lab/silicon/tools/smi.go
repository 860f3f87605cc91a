package main

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"gpuready.lab/silicon/machine"
)

// computeModes: -c values as nvidia-smi takes them (a number or a name).
var computeModes = map[string]string{
	"0": machine.ComputeModeDefault, "DEFAULT": machine.ComputeModeDefault,
	"2": machine.ComputeModeProhibited, "PROHIBITED": machine.ComputeModeProhibited,
	"3": machine.ComputeModeExclusiveProcess, "EXCLUSIVE_PROCESS": machine.ComputeModeExclusiveProcess,
}

// Exit codes as nvidia-smi's (nvidia-smi(1), RETURN VALUE).
const (
	exitNotSupported = 3
	exitNoPermission = 4
	exitNotFound     = 6
	exitNoDriver     = 9
	exitMismatch     = 18
	exitUsage        = 2
	exitOther        = 255
)

const usageHint = "Please run 'nvidia-smi -h' for help."

// settings is every nvidia-smi command that changes the driver state, through package machine as the mock
// NVML's setters do: "-c MODE" (compute mode), "-mig 0|1" (pending MIG mode), "-pm 0|1" (persistence mode), "-r"
// (GPU reset: pending MIG mode takes effect, instances go), each on "-i ID[,ID]" (index, UUID or PCI bus id; all
// GPUs without -i). smi (smi_read.go) sends here every command line that has one of them.
func settings(args []string) int {
	var ids, action, value string
	for i := 0; i < len(args); i++ {
		arg := args[i]
		next := func() bool {
			if i+1 >= len(args) {
				fmt.Printf("Option \"%s\" requires a value.\n\n%s\n", arg, usageHint)
				return false
			}
			i++
			value = args[i]
			return true
		}
		switch {
		case arg == "-i" || arg == "--id":
			if !next() {
				return exitUsage
			}
			ids = value
		case strings.HasPrefix(arg, "--id="):
			ids = strings.TrimPrefix(arg, "--id=")
		case arg == "-c" || arg == "--compute-mode", arg == "-mig" || arg == "--multi-instance-gpu",
			arg == "-pm" || arg == "--persistence-mode":
			if !next() {
				return exitUsage
			}
			action = arg
		case arg == "-r" || arg == "--gpu-reset":
			action = "-r"
		default:
			fmt.Printf("Invalid combination of input arguments.\n\n%s\n", usageHint)
			return exitUsage
		}
	}
	switch action {
	case "-c", "--compute-mode":
		return computeMode(ids, value)
	case "-mig", "--multi-instance-gpu":
		return migMode(ids, value)
	case "-pm", "--persistence-mode":
		return persistenceMode(ids, value)
	case "-r":
		return gpuReset(ids)
	}
	fmt.Printf("Invalid combination of input arguments.\n\n%s\n", usageHint)
	return exitUsage
}

// driverFailure prints what nvidia-smi prints when err (from machine.Update or Load) stops it, and its exit code.
func driverFailure(err error, noPermission string) int {
	switch {
	case errors.Is(err, machine.ErrNotFound):
		fmt.Println("No devices were found")
		return exitNotFound
	case errors.Is(err, machine.ErrNoPermission):
		fmt.Println(noPermission)
		return exitNoPermission
	}
	fmt.Println(nvmlFailure(err))
	if errors.Is(err, machine.ErrMismatch) {
		return exitMismatch
	}
	return exitNoDriver
}

// forEach is one setting on each GPU -i names, under one machine.Update: set changes GPU g, prints its line and
// returns its exit code (the last non-zero one is the command's); a machine error stops there. "All done."
// follows when done. The state is written whatever happened, so what a command did before it failed stays done,
// as in the real driver.
func forEach(ids, noPermission string, done bool, set func(m *machine.Machine, g *machine.GPU) (int, error)) int {
	rc := 0
	err := machine.Update(func(m *machine.Machine) error {
		gpus, err := selectGPUs(m, ids)
		if err != nil {
			rc = driverFailure(err, "")
			return nil
		}
		for _, g := range gpus {
			code, err := set(m, g)
			if err != nil {
				rc = driverFailure(err, "")
				return nil
			}
			rc = cmp.Or(code, rc)
		}
		if done {
			fmt.Println("All done.")
		}
		return nil
	})
	if err != nil {
		return driverFailure(err, noPermission)
	}
	return rc
}

// onOff is a 0|1|ENABLED|DISABLED option's value; false after saying so for any other.
func onOff(option, value string) (enable, ok bool) {
	switch value {
	case "1", "ENABLED":
		return true, true
	case "0", "DISABLED":
		return false, true
	}
	fmt.Printf("Invalid value \"%s\" for option %s\n\n%s\n", value, option, usageHint)
	return false, false
}

// computeMode is -c: the compute mode of each GPU until the next boot.
func computeMode(ids, mode string) int {
	name, ok := computeModes[strings.ToUpper(mode)]
	if !ok {
		fmt.Printf("Invalid value \"%s\" for option -c\n", mode)
		return exitUsage
	}
	return forEach(ids, "Unable to set the compute mode: Insufficient Permissions", true,
		func(m *machine.Machine, g *machine.GPU) (int, error) {
			word := "Set compute mode to"
			if m.View(g.Index).ComputeMode == name {
				word = "Compute mode is already set to"
			} else if err := m.SetComputeMode(g.Index, name); err != nil {
				return 0, err
			}
			fmt.Printf("%s %s for GPU %s.\n", word, strings.ToUpper(name), g.PCIBusID)
			return 0, nil
		})
}

// migMode is -mig: the pending MIG mode, which the lab's hosts (like VMs with passthrough GPUs, which cannot
// reset a GPU) apply at the next reboot, with the message real drivers print then.
func migMode(ids, value string) int {
	enable, ok := onOff("-mig", value)
	if !ok {
		return exitUsage
	}
	word, done := "disable", "Disabled"
	if enable {
		word, done = "enable", "Enabled"
	}
	return forEach(ids, "Unable to set the MIG mode: Insufficient Permissions", true,
		func(m *machine.Machine, g *machine.GPU) (int, error) {
			pending, err := m.SetMigMode(g.Index, enable)
			switch {
			case errors.Is(err, machine.ErrNotSupported):
				fmt.Printf("Unable to %s MIG Mode for GPU %s: Not Supported\nTreating as warning and moving on.\n",
					word, g.PCIBusID)
				return exitNotSupported, nil
			case errors.Is(err, machine.ErrInUse):
				fmt.Printf("Unable to disable MIG Mode for GPU %s: In use by another client\n", g.PCIBusID)
				return exitOther, nil
			case err != nil:
				return 0, err
			case pending:
				fmt.Printf("Warning: MIG mode is in pending %s state for GPU %s:Not Supported\n"+
					"Reboot the system or try nvidia-smi --gpu-reset to make MIG mode effective on GPU %s\n",
					word, g.PCIBusID, g.PCIBusID)
			default:
				fmt.Printf("%s MIG Mode for GPU %s\n", done, g.PCIBusID)
			}
			return 0, nil
		})
}

// persistenceMode is -pm: the driver's legacy persistence mode (nvidia-persistenced is the other way).
func persistenceMode(ids, value string) int {
	enable, ok := onOff("-pm", value)
	if !ok {
		return exitUsage
	}
	word := pick(enable, "Enabled", "Disabled")
	return forEach(ids, "Unable to set persistence mode: Insufficient Permissions", true,
		func(m *machine.Machine, g *machine.GPU) (int, error) {
			fmt.Printf("%s Legacy persistence mode for GPU %s.\n", word, g.PCIBusID)
			return 0, m.SetPersistence(g.Index, enable)
		})
}

// computePolicy is "compute-policy -i ID --set-timeslice N", which NVIDIA's DRA driver runs for a TimeSlicing
// claim (and with 0 when it unprepares one).
func computePolicy(args []string) int {
	var ids, value string
	for i := 0; i < len(args); i += 2 {
		if i+1 >= len(args) {
			fmt.Printf("Option \"%s\" requires a value.\n\n%s\n", args[i], usageHint)
			return exitUsage
		}
		switch args[i] {
		case "-i", "--id":
			ids = args[i+1]
		case "--set-timeslice":
			value = args[i+1]
		default:
			fmt.Printf("Invalid combination of input arguments.\n%s\n\n%s\n", args[i], usageHint)
			return exitUsage
		}
	}
	slice, err := strconv.Atoi(value)
	if err != nil || slice < 0 || slice >= len(machine.Timeslices) {
		fmt.Printf("Invalid value \"%s\" for option --set-timeslice (0 to %d)\n\n%s\n", value,
			len(machine.Timeslices)-1, usageHint)
		return exitUsage
	}
	return forEach(ids, "Unable to set the timeslice: Insufficient Permissions", false,
		func(m *machine.Machine, g *machine.GPU) (int, error) {
			fmt.Printf("Set timeslice to %s for GPU %s.\n", machine.Timeslices[slice], g.PCIBusID)
			return 0, m.SetTimeslice(g.Index, slice)
		})
}

// gpuReset is -r, which must name its GPUs with -i.
func gpuReset(ids string) int {
	if ids == "" {
		fmt.Println("-r/--gpu-reset requires -i/--id to select a GPU.")
		return exitOther
	}
	return forEach(ids, "Unable to reset this GPU: Insufficient Permissions", true,
		func(m *machine.Machine, g *machine.GPU) (int, error) {
			fmt.Printf("GPU %s was successfully reset.\n", g.PCIBusID)
			return 0, m.ResetGPU(g.Index)
		})
}

// selectGPUs resolves -i (findGPU): indexes, UUIDs or PCI bus ids, comma separated; all without one.
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
		g := findGPU(m, strings.TrimSpace(id))
		if g == nil {
			return nil, machine.ErrNotFound
		}
		out = append(out, g)
	}
	return out, nil
}

// findGPU is the GPU an id names, nil when none: its index as written ("1", not "01"), its UUID, or its PCI bus
// id, with or without the domain's first four digits, in any case (the rule the lab's Python nvidia-smi and
// dcgmi followed). nvidia-smi -i and dcgmi -i name GPUs by it.
func findGPU(m *machine.Machine, id string) *machine.GPU {
	var found *machine.GPU
	for i := range m.Hardware.GPUs {
		g := &m.Hardware.GPUs[i]
		bus := strings.ToLower(g.PCIBusID)
		short := ""
		if len(bus) > 4 {
			short = bus[4:]
		}
		if id == strconv.Itoa(g.Index) || id == g.UUID || strings.ToLower(id) == bus || strings.ToLower(id) == short {
			found = g // the last match, as before
		}
	}
	return found
}
