package machine

// A MIG change returns once the driver's files show it. A real driver creates (and removes) an instance's
// access capability, /proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<id>[/ci<id>]/access, inside the ioctl
// that creates (destroys) the instance, and nvidia-modprobe makes its /dev/nvidia-caps/nvidia-cap<N> node
// before nvidia-smi returns; whoever looks next finds them. NVIDIA's tools look at once: the node deploy runs
// `nvidia-ctk cdi generate` and restarts the device plugin right after laying out MIG, and both leave a MIG
// device's capability out of their CDI spec, with only a warning, when its node is missing ("Could not locate").
// A pod given that device then lacks its capabilities and sees no MIG device. In the lab the files are rendered
// outside the host (kernel_files.watch, within a fraction of a second of the state file's change), so Update waits for them
// after it has written the state and let go of its lock.

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// ContainerDevices names the variable the lab's runc wrapper sets in every GPU container (nvemu.CONTAINER_DEVICES):
// such a process's /dev was made when the container started, so only the /proc files can show a change there.
const ContainerDevices = "GPUREADY_LAB_CONTAINER_DEVICES"

// KernelFilesWait bounds the wait: past it the change stands and a line on stderr says the files lag.
const KernelFilesWait = 20 * time.Second

// ProcDriverDir is where the process finds the driver's /proc files (GPUREADY_LAB_PROC_DRIVER or /proc/driver).
func ProcDriverDir() string { return envOr("GPUREADY_LAB_PROC_DRIVER", "/proc/driver") }

// capDevice is the device node of the MIG capability with this minor, under DevDir.
func capDevice(minor int) string { return filepath.Join(DevDir(), capNode(minor)[len("/dev/"):]) }

// CapFile is one MIG instance's access capability: its /proc file (relative to ProcDriverDir) and device minor.
type CapFile struct {
	Proc  string `json:"proc"`
	Minor int    `json:"minor"`
}

// InstanceCaps are the access capabilities of gis, the MIG instances of the GPU with minor number gpuMinor: each
// GPU instance's, then its compute instances'.
func InstanceCaps(gpuMinor int, gis []GPUInstance) []CapFile {
	var out []CapFile
	for _, gi := range gis {
		base := fmt.Sprintf("nvidia/capabilities/gpu%d/mig/gi%d", gpuMinor, gi.ID)
		out = append(out, CapFile{base + "/access", GIMinor(gpuMinor, gi.ID)})
		for _, ci := range gi.CIs {
			out = append(out, CapFile{fmt.Sprintf("%s/ci%d/access", base, ci.ID), CIMinor(gpuMinor, gi.ID, ci.ID)})
		}
	}
	return out
}

// capFiles are the access capabilities of the MIG instances in m's state, by their /proc file.
func (m *Machine) capFiles() map[string]CapFile {
	out := map[string]CapFile{}
	for _, g := range m.Hardware.GPUs {
		for _, c := range InstanceCaps(g.MinorNumber, m.State.GPUs[g.UUID].GIs) {
			out[c.Proc] = c
		}
	}
	return out
}

// awaitCapFiles waits until the driver's files show the instances of after and none of those only in before:
// the /proc access files and, with devices (outside a container, whose /dev was made when it started), the
// device nodes. It returns at once where no renderer keeps the files (no mig-minors file: a unit test's root).
func awaitCapFiles(before, after map[string]CapFile, devices bool) {
	proc := ProcDriverDir()
	if _, err := os.Stat(filepath.Join(proc, "nvidia-caps", "mig-minors")); err != nil {
		return
	}
	shown := func() bool {
		for _, c := range after {
			if _, err := os.Stat(filepath.Join(proc, c.Proc)); err != nil {
				return false
			}
			if _, err := os.Stat(capDevice(c.Minor)); devices && err != nil {
				return false
			}
		}
		for key, c := range before {
			if _, kept := after[key]; !kept {
				if _, err := os.Stat(filepath.Join(proc, c.Proc)); err == nil {
					return false
				}
			}
		}
		return true
	}
	deadline := time.Now().Add(KernelFilesWait)
	for !shown() {
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "gpuready lab: the driver's MIG capability files under %s did not follow the change "+
				"within %s (is the host's supervisor running?)\n", proc, KernelFilesWait)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
