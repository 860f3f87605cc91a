// Command nvidia-emu-tools is every emulated NVIDIA tool of the lab, over package machine, the emulated machine the
// mock NVML and CUDA driver answer from: one static binary (no cgo, no Python), so it also runs in NVIDIA's own
// images (busybox and glibc only) that the nvidia runtime gives the host's driver files through CDI. Each lab package
// installs it where NVIDIA's package installs the real tool; it picks the tool by the name it is run as or by its
// first argument:
//
//   - nvidia-cuda-mps-control (installed as /usr/bin/nvidia-cuda-mps-control by the lab's driver package, so the
//     real nvidia-ctk lists it in the CDI spec as it lists NVIDIA's): the MPS control daemon and its client, as
//     NVIDIA's MPS control daemon image (k8s-device-plugin cmd/mps-control-daemon) and the device plugin in MPS
//     mode drive it;
//   - nvidia-smi (installed as /usr/bin/nvidia-smi by the lab's nvidia-smi package, an ELF file as NVIDIA's is,
//     so it runs in every container the nvidia runtime gives it to): its reads (smi_read.go, smi_fields.go,
//     smi_report.go: -L, the table, -q, --query-gpu, topo, nvlink) and its changes (smi.go: -c, -mig, -pm, -r,
//     compute-policy; mig.go: nvidia-smi mig), all over package machine, which the mock NVML answers from too
//     (nvmlDeviceSetComputeMode, nvmlDeviceSetMigMode and nvmlDeviceCreateGpuInstance change the same state);
//   - nvidia-container-cli (container_cli.go; installed as /usr/bin/nvidia-container-cli by the lab's
//     libnvidia-container-tools package): libnvidia-container's CLI, which the real nvidia-container-runtime-hook
//     runs in the toolkit's legacy mode: --version, info, list, and configure's checks;
//   - nvbandwidth (nvbandwidth.go; installed as /usr/bin/nvbandwidth by the lab's nvbandwidth package): the copy
//     bandwidth of the devices cuInit finds, by the model the mock libcuda.so.1 times copies with;
//   - dcgmi (dcgmi.go, dcgmi_render.go; installed as /usr/bin/dcgmi by the lab's datacenter-gpu-manager-4-core
//     package): DCGM's diag -r 1|2|3 and --version over package machine, its tests failing as the machine's
//     faults make real DCGM fail them;
//   - the driver's daemons, each installed as /usr/bin/<name> and forking as its Type=forking unit expects
//     (daemon.go: NVML must initialise; the daemon holds its pid file's lock, which package machine's alive takes
//     for a live daemon from a GPU container): nvidia-persistenced (persistenced.go; the driver package's) and
//     nv-fabricmanager (fabricmanager.go; nvidia-fabricmanager's), whose pid files nvidia-smi and the mock NVML
//     read for persistence mode and the fabric state, and nv-hostengine (hostengine.go; DCGM's host engine, the
//     daemon of nvidia-dcgm.service);
//   - lab-view (view.go): not an NVIDIA tool; the machine's derived view as JSON for what the lab renders outside
//     the tools (the kernel's files, the lab's dcgm-exporter), run from each host's machine directory;
package main

import (
	"fmt"
	"os"
	"path/filepath"
)

var tools = map[string]func(args []string) int{
	"dcgmi":                   dcgmi,
	"nvidia-container-cli":    containerCLI,
	"nvidia-cuda-mps-control": mpsControl,
	"nvidia-smi":              smi,
	"nvbandwidth":             nvbandwidth,
	"nvidia-persistenced":     persistenced,
	"nv-fabricmanager":        fabricManager,
	"nv-hostengine":           hostEngine,
	"lab-view":                labView,
}

func main() {
	if tool, ok := tools[filepath.Base(os.Args[0])]; ok {
		os.Exit(tool(os.Args[1:]))
	}
	if len(os.Args) > 1 {
		if tool, ok := tools[os.Args[1]]; ok {
			os.Exit(tool(os.Args[2:]))
		}
	}
	fmt.Fprintf(os.Stderr, "usage: %s dcgmi|nvidia-container-cli|nvidia-cuda-mps-control|nvidia-smi|nvbandwidth|nvidia-persistenced|nv-fabricmanager|nv-hostengine|lab-view [ARGS]\n", filepath.Base(os.Args[0]))
	os.Exit(2)
}
