package machine

// The machine as a process in a GPU container finds it. On a real node NVML sees only the GPUs whose
// /dev/nvidiaN the container runtime gave the container, numbered from 0, and on them only the MIG devices whose
// GPU and compute instance access capabilities (/dev/nvidia-caps/nvidia-capM) it was given; the runtime also
// hides the other GPUs' /proc/driver/nvidia/gpus entries. The lab's runc wrapper (realhost.machine_mounts) names
// those device nodes in ContainerDevices, comma separated (empty: none); Load applies
// them, so the mock NVML, the mock CUDA driver and the static tools in a pod see what the pod was given.
// Every emulated tool is Go over this package, so the rule is written once, here.

import (
	"fmt"
	"os"
	"strings"
)

// The MIG capabilities (kernel_files: /proc/driver/nvidia/capabilities/mig/config and mig/monitor). Without the
// configuration capability (/dev/nvidia-caps/nvidia-cap1) the driver refuses MIG changes; with it, or with the
// monitor capability (nvidia-cap2), a process sees every GPU and compute instance. NVIDIA's container runtime
// hands them out for NVIDIA_MIG_CONFIG_DEVICES and NVIDIA_MIG_MONITOR_DEVICES (in its legacy mode); a privileged
// container gets every device node.
const (
	configCapMinor  = 1
	monitorCapMinor = 2
)

// capNode is the device node of the MIG capability with this minor, as a container's spec names it.
func capNode(minor int) string { return fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", minor) }

// containerNodes is the container's device nodes, ok false outside a container.
func containerNodes() (nodes map[string]bool, ok bool) {
	list, ok := os.LookupEnv(ContainerDevices)
	if !ok {
		return nil, false
	}
	nodes = map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			nodes[n] = true
		}
	}
	return nodes, true
}

// contain narrows m to the GPUs, faults and MIG instances the container's device nodes reveal (the file's
// comment). The full state is kept for Update, which writes back what the container could not see.
func (m *Machine) contain(nodes map[string]bool) {
	full := m.State
	m.full = &full
	m.migConfig = nodes[capNode(configCapMinor)]
	allInstances := m.migConfig || nodes[capNode(monitorCapMinor)]
	var gpus []GPU
	faults := []Fault{}
	for _, f := range m.Hardware.Faults {
		if f.GPU == nil {
			faults = append(faults, f)
		}
	}
	st := State{BootID: full.BootID, Kmod: full.Kmod, GPUs: map[string]GPUState{}}
	for _, g := range m.Hardware.GPUs {
		if !nodes[fmt.Sprintf("/dev/nvidia%d", g.MinorNumber)] {
			continue
		}
		index := len(gpus)
		for _, f := range m.Hardware.Faults {
			if f.GPU != nil && *f.GPU == g.Index {
				f.GPU = &index
				faults = append(faults, f)
			}
		}
		gs := full.GPUs[g.UUID]
		gs.GIs = visibleInstances(g, gs.GIs, nodes, allInstances)
		st.GPUs[g.UUID] = gs
		g.Index = index
		gpus = append(gpus, g)
	}
	m.Hardware.GPUs = gpus
	m.Hardware.Faults = faults
	m.State = st
}

// visibleInstances are the GPU instances (and their compute instances) whose access capabilities the container
// has, or all of them.
func visibleInstances(g GPU, gis []GPUInstance, nodes map[string]bool, all bool) []GPUInstance {
	var out []GPUInstance
	for _, gi := range gis {
		if !all && !nodes[capNode(GIMinor(g.MinorNumber, gi.ID))] {
			continue
		}
		kept := gi
		kept.CIs = nil
		for _, ci := range gi.CIs {
			if all || nodes[capNode(CIMinor(g.MinorNumber, gi.ID, ci.ID))] {
				kept.CIs = append(kept.CIs, ci)
			}
		}
		out = append(out, kept)
	}
	return out
}

// stateToWrite is the state Update writes: in a container, the container's changes over the full state, with
// the GPUs and instances it could not see kept as they were.
func (m *Machine) stateToWrite() State {
	if m.full == nil {
		return m.State
	}
	out := State{BootID: m.State.BootID, Kmod: m.State.Kmod, GPUs: map[string]GPUState{}}
	for uuid, gs := range m.full.GPUs {
		out.GPUs[uuid] = gs
	}
	for _, g := range m.Hardware.GPUs {
		changed := m.State.GPUs[g.UUID]
		if !m.migConfig { // MIG changes were refused: the instances are the full state's, hidden ones too
			changed.GIs = m.full.GPUs[g.UUID].GIs
		}
		out.GPUs[g.UUID] = changed
	}
	return out
}

// MigConfigAllowed: this process may change MIG instances and mode (outside a container, or in one given the MIG
// configuration capability).
func (m *Machine) MigConfigAllowed() bool { return m.full == nil || m.migConfig }
