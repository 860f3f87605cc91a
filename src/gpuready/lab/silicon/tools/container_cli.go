package main

// nvidia-container-cli, libnvidia-container's command-line tool: the one container toolkit part the lab emulates.
//
// nvidia-ctk, nvidia-container-runtime, nvidia-cdi-hook and nvidia-container-runtime-hook are NVIDIA's real
// binaries (gpuready.lab.nvidia_tools). libnvidia-container is C that loads the real driver's files and the lab
// does not build it; only the legacy runtime mode needs it (the real hook runs `nvidia-container-cli configure`;
// toolkit >= 1.18 defaults to jit-cdi mode, which does not), so its CLI stays emulated. The lab's
// libnvidia-container-tools package installs this ELF as /usr/bin/nvidia-container-cli; libnvidia-container1
// ships the toolkit version it reports (/usr/lib/nvidia-container-emu/version).
//
// The real tool talks to the driver through NVML: it dlopens libnvidia-ml.so.1 and fails when that is missing.
// Here the library is missing when machine.LibraryInstalled says so (the lab's libnvidia-ml1 package is not
// installed and the lab names no driver version). Output shapes follow the real tool: --version, info, list;
// configure checks what the real one checks before it mounts anything (the driver, the devices asked for) and
// mounts nothing.

import (
	"crypto/sha1"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"gpuready.lab/silicon/machine"
)

const (
	toolkitDir            = "/usr/lib/nvidia-container-emu"
	defaultToolkitVersion = "1.20.0"
	containerCLIUsage     = "Usage: nvidia-container-cli [OPTION...] COMMAND [ARG...]"
	exitContainerUsage    = 64 // EX_USAGE, as the real tool's argp exits
)

// toolkitVersion is the installed toolkit's version: GPUREADY_LAB_TOOLKIT_VERSION, libnvidia-container1's version
// file, or the lab's default toolkit.
func toolkitVersion() string {
	if v := os.Getenv("GPUREADY_LAB_TOOLKIT_VERSION"); v != "" {
		return v
	}
	if b, err := os.ReadFile(toolkitDir + "/version"); err == nil {
		if v := strings.TrimSpace(string(b)); v != "" {
			return v
		}
	}
	return defaultToolkitVersion
}

// containerCLI is nvidia-container-cli: global options (--load-kmods, --ldcache=, --user=, --debug=, --root=,
// --no-pivot, ...) come before the command, as the real hook passes them.
func containerCLI(args []string) int {
	command, rest := "", []string(nil)
	for i, arg := range args {
		if arg == "-V" || arg == "--version" {
			command = "--version"
			break
		}
		if !strings.HasPrefix(arg, "-") {
			command, rest = arg, args[i+1:]
			break
		}
	}
	switch command {
	case "--version":
		v := toolkitVersion()
		fmt.Printf("cli-version: %s\nlib-version: %s\nbuild date: 2025-10-10T12:00+00:00\n"+
			"build revision: %x\nbuild compiler: x86_64-linux-gnu-gcc-7 7.5.0\nbuild platform: x86_64\n"+
			"build flags: -D_GNU_SOURCE -D_FORTIFY_SOURCE=2 -DNDEBUG -std=gnu11 -O2 -g\n",
			v, v, sha1.Sum([]byte("nvidia-container-toolkit "+v)))
		return 0
	case "info", "list", "configure":
	default:
		fmt.Fprintln(os.Stderr, containerCLIUsage)
		return exitContainerUsage
	}
	m, err := containerDriver()
	if err != nil {
		fmt.Fprintf(os.Stderr, "nvidia-container-cli: initialization error: %v\n", err)
		return 1
	}
	switch command {
	case "configure":
		return containerConfigure(m, rest)
	case "list":
		fmt.Println("/dev/nvidiactl\n/dev/nvidia-uvm\n/dev/nvidia-uvm-tools\n/dev/nvidia-modeset")
		for _, g := range containerGPUs(m) {
			fmt.Printf("/dev/nvidia%d\n", g.MinorNumber)
		}
		fmt.Println("/usr/bin/nvidia-smi")
		return 0
	}
	fmt.Printf("NVRM version:   %s\nCUDA version:   %s\n\n", m.LibraryVersion, machine.CUDAVersion(m.LibraryVersion))
	for _, g := range containerGPUs(m) {
		fmt.Printf("Device Index:   %d\nDevice Minor:   %d\nModel:          %s\nBrand:          Nvidia\n"+
			"GPU UUID:       %s\nBus Location:   %s\nArchitecture:   %s\n\n",
			g.Index, g.MinorNumber, g.Name, g.UUID, g.PCIBusID, g.ComputeCapability)
	}
	return 0
}

// containerDriver is the machine after NVML init, or an error in the toolkit's wording.
func containerDriver() (*machine.Machine, error) {
	if !machine.LibraryInstalled() {
		return nil, errors.New("load library failed: libnvidia-ml.so.1: cannot open shared object file: " +
			"no such file or directory")
	}
	m, err := openDriver()
	switch {
	case err == nil:
		return m, nil
	case errors.Is(err, machine.ErrMismatch):
		return nil, errors.New("nvml error: driver/library version mismatch")
	}
	return nil, errors.New("nvml error: driver not loaded")
}

// containerGPUs are the GPUs NVML finds: those on the bus.
func containerGPUs(m *machine.Machine) []*machine.GPU {
	var out []*machine.GPU
	for i := range m.Hardware.GPUs {
		if g := &m.Hardware.GPUs[i]; !m.OffBus(g.Index) {
			out = append(out, g)
		}
	}
	return out
}

// containerConfigure checks the devices --device= names (indexes, UUIDs, "<gpu>:<mig>", MIG UUIDs, all), then
// that a container root file system is given; the real tool would mount the driver into it here.
func containerConfigure(m *machine.Machine, args []string) int {
	known := map[string]bool{"all": true}
	for _, g := range containerGPUs(m) {
		known[strconv.Itoa(g.Index)], known[g.UUID] = true, true
		for _, d := range m.View(g.Index).MigDevices {
			known[fmt.Sprintf("%d:%d", g.Index, d.Index)], known[d.UUID] = true, true
		}
	}
	devices, found, rootfs := "", false, false
	for _, arg := range args {
		if v, ok := strings.CutPrefix(arg, "--device="); ok && !found {
			devices, found = v, true
		}
		rootfs = rootfs || !strings.HasPrefix(arg, "-")
	}
	for _, d := range strings.Split(devices, ",") {
		if d != "" && !known[d] {
			fmt.Fprintf(os.Stderr, "nvidia-container-cli: device error: %s: unknown device\n", d)
			return 1
		}
	}
	if !rootfs {
		fmt.Fprintln(os.Stderr, "nvidia-container-cli: configure: missing container root file system")
		return exitContainerUsage
	}
	return 0
}
