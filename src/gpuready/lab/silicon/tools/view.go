package main

// lab-view prints the machine as package machine derives it, as one JSON document, for what the lab shows of the
// machine outside the mock libraries and the tools: the kernel's files (gpuready.lab.kernel_files: /dev,
// /proc/driver/nvidia, the PCI sysfs link) and the lab's dcgm-exporter. It is not an NVIDIA tool and no package
// installs it under this name; the lab runs the static binary as `nvidia-emu-tools lab-view` (each host's machine
// directory holds a copy, hosts._write_hardware). So the fault effects, the driver state as a reboot leaves it and
// the MIG devices have one derivation, View's, which the mock NVML and CUDA and every tool read too.
//
// The files it reads are package machine's (GPUREADY_LAB_HARDWARE, GPUREADY_LAB_STATE, GPUREADY_LAB_BOOT_ID);
// it only reads: it neither loads the module nor takes the state's lock.

import (
	"encoding/json"
	"fmt"
	"os"

	"gpuready.lab/silicon/machine"
)

// migView is one MIG device (one compute instance) in nvidia-smi's order: what the exporter labels its series with.
type migView struct {
	GI        int    `json:"gi"`
	CI        int    `json:"ci"`
	ProfileID int    `json:"profile_id"` // the GPU instance's profile
	Start     int    `json:"start"`      // the GPU instance's placement start
	Full      bool   `json:"full"`       // the compute instance spans its GPU instance
	UUID      string `json:"uuid"`
}

// gpuView is one GPU's View, what the Python side reads.
type gpuView struct {
	Index   int             `json:"index"`
	UUID    string          `json:"uuid"`
	Effects machine.Effects `json:"effects"` // of the GPU's faults, combined
	OffBus  bool            `json:"off_bus"`
	// The trained PCIe link: generation and width.
	PCIeGen   int `json:"pcie_gen"`
	PCIeWidth int `json:"pcie_width"`
	// Remapped rows: correctable, uncorrectable, a remap pending (as NVML's nvmlDeviceGetRemappedRows).
	RemapCorrectable   int   `json:"remap_correctable"`
	RemapUncorrectable int   `json:"remap_uncorrectable"`
	RemapPending       bool  `json:"remap_pending"`
	XIDs               []int `json:"xids"`
	MigCurrent         bool  `json:"mig_current"`
	// The GPU instances by id and their compute instances (MIG mode current only).
	GPUInstances []machine.GPUInstance `json:"gis"`
	MigDevices   []migView             `json:"mig_devices"`
	// The instances' access capabilities: /proc/driver file and /dev/nvidia-caps minor of each.
	Caps []machine.CapFile `json:"caps"`
}

// machineView is the whole document: the state's boot, the loaded module (null when none is loaded this boot), the
// host-wide faults' effects combined, the GPUs in index order, and the driver's table of capability minors
// (/proc/driver/nvidia-caps/mig-minors).
type machineView struct {
	BootID      string          `json:"boot_id"`
	Kmod        *string         `json:"kmod"`
	HostEffects machine.Effects `json:"host_effects"`
	GPUs        []gpuView       `json:"gpus"`
	MigMinors   string          `json:"mig_minors"`
}

func labView(args []string) int {
	if len(args) != 0 {
		fmt.Fprintln(os.Stderr, "usage: lab-view (reads GPUREADY_LAB_HARDWARE, GPUREADY_LAB_STATE, GPUREADY_LAB_BOOT_ID)")
		return 2
	}
	m, err := machine.Load()
	if err != nil {
		fmt.Fprintf(os.Stderr, "lab-view: %s: %v\n", machine.HardwarePath(), err)
		return 1
	}
	out := machineView{BootID: m.State.BootID, Kmod: m.State.Kmod, HostEffects: m.HostEffects(), GPUs: []gpuView{},
		MigMinors: machine.MigMinors()}
	for _, g := range m.GPUs() {
		v := m.View(g.Index)
		gv := gpuView{
			Index: g.Index, UUID: g.UUID, Effects: v.Effects, OffBus: v.OffBus,
			PCIeGen: v.PCIeGen, PCIeWidth: v.PCIeWidth,
			RemapCorrectable: v.RemapCorrectable, RemapUncorrectable: v.RemapUncorrectable, RemapPending: v.RemapPending,
			XIDs: append([]int{}, v.XIDs...), MigCurrent: v.MigCurrent,
			GPUInstances: append([]machine.GPUInstance{}, v.GPUInstances...), MigDevices: []migView{},
			Caps: append([]machine.CapFile{}, machine.InstanceCaps(g.MinorNumber, v.GPUInstances)...),
		}
		for _, d := range v.MigDevices {
			gv.MigDevices = append(gv.MigDevices, migView{
				GI: d.GI, CI: d.CI, ProfileID: d.Profile.ProfileID, Start: d.Instance.Start, Full: d.Full, UUID: d.UUID,
			})
		}
		out.GPUs = append(out.GPUs, gv)
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "lab-view: %v\n", err)
		return 1
	}
	return 0
}
