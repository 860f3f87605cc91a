// Package machine is the lab's one emulated machine as NVIDIA's user-space libraries see it.
//
// It reads the files of the lab (their paths also in src/gpuready/lab/emulator/nvemu.py): the hardware
// file the lab writes (GPUs and injected faults; env GPUREADY_LAB_HARDWARE), the driver state file
// (MIG mode, GPU/compute instances, persistence, the loaded kernel module; env GPUREADY_LAB_STATE)
// and the user-space driver version (env GPUREADY_LAB_DRIVER_VERSION or
// /usr/lib/nvidia-emu/driver-version). The mock libnvidia-ml.so.1 and libcuda.so.1 and every emulated tool
// (../tools: nvidia-smi, dcgmi, the daemons, ...) answer from it, so NVIDIA's real tools and the emulated ones
// see one machine.
//
// Changes (write.go) take the state file's lock and write it. In a GPU container the machine is what the
// container's device nodes reveal (contain.go). Derived facts (fault effects combined, ECC counts, PCIe link, MIG
// devices, XIDs, the state as this boot leaves it) are View's, the one derivation: the mock NVML, CUDA and the
// tools read it, and the lab's Python side (kernel_files, the lab's dcgm-exporter) reads it as JSON from the
// tools' lab-view (nvemu.read_view).
//
// Usage: Current() returns the machine as it is now, re-reading the files only when they changed,
// so a fault injected while a process runs is seen by its next call.
package machine

import (
	"cmp"
	"crypto/sha1"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Default paths, as in nvemu.py.
const (
	DefaultHardware      = "/opt/gpuready-lab/machine/hardware.json"
	DefaultState         = "/var/lib/nvidia-emu/state.json"
	DriverDir            = "/usr/lib/nvidia-emu"
	DefaultDriverVersion = "580.178.04"
)

// CUDAByBranch is the CUDA version each driver branch supports.
var CUDAByBranch = map[string]string{
	"595": "13.2", "590": "13.1", "580": "13.0", "575": "12.9", "570": "12.8", "550": "12.4",
}

// Errors Load and Machine.CheckLoaded give; NVML init maps them to its own codes.
var (
	// ErrNoDriver: no machine file, or no kernel module installed (NVML_ERROR_DRIVER_NOT_LOADED).
	ErrNoDriver = errors.New("couldn't communicate with the NVIDIA driver")
	// ErrMismatch: loaded kernel module and library differ, or a driver_mismatch fault
	// (NVML_ERROR_LIB_RM_VERSION_MISMATCH).
	ErrMismatch = errors.New("Driver/library version mismatch")
)

// MigProfile is one GPU instance profile of the GPU's model (hardware.json "mig_profiles").
type MigProfile struct {
	Name          string  `json:"name"`
	ProfileID     int     `json:"profile_id"`
	ComputeSlices int     `json:"compute_slices"`
	MemorySlices  int     `json:"memory_slices"`
	MemoryMiB     int     `json:"memory_mib"`
	MemoryGiB     float64 `json:"memory_gib"`
	MaxInstances  int     `json:"max_instances"`
	Placements    []int   `json:"placements"`
	PlacementSize int     `json:"placement_size"`
	SMCount       int     `json:"sm_count"`
	CopyEngines   int     `json:"copy_engines"`
	Decoders      int     `json:"decoders"`
	Encoders      int     `json:"encoders"`
	JPEG          int     `json:"jpeg"`
	OFA           int     `json:"ofa"`
	P2P           bool    `json:"p2p"`
}

// Clocks are the board's clocks in MHz.
type Clocks struct {
	GraphicsIdle int `json:"graphics_idle"`
	Memory       int `json:"memory"`
	VideoIdle    int `json:"video_idle"`
	MaxGraphics  int `json:"max_graphics"`
	MaxVideo     int `json:"max_video"`
}

// GPU is one GPU of the hardware file, as hardware.make_hardware writes it.
type GPU struct {
	Index              int          `json:"index"`
	MinorNumber        int          `json:"minor_number"`
	Name               string       `json:"name"`
	Brand              string       `json:"brand"`
	Architecture       string       `json:"architecture"`
	Family             string       `json:"family"`
	UUID               string       `json:"uuid"`
	Serial             string       `json:"serial"`
	PCIBusID           string       `json:"pci_bus_id"`        // "00000000:18:00.0"
	PCIDeviceID        string       `json:"pci_device_id"`     // "233010DE"
	PCISubSystemID     string       `json:"pci_sub_system_id"` // "16C110DE"
	MemoryMiB          int          `json:"memory_mib"`
	ReservedMiB        int          `json:"reserved_mib"`
	BAR1MiB            int          `json:"bar1_mib"`
	PowerLimitW        float64      `json:"power_limit_w"`
	MinPowerLimitW     float64      `json:"min_power_limit_w"`
	PowerIdleW         float64      `json:"power_idle_w"`
	TemperatureC       int          `json:"temperature_c"`
	MemoryTemperatureC *int         `json:"memory_temperature_c"`
	MaxPCIeGen         int          `json:"max_pcie_gen"`
	MaxPCIeWidth       int          `json:"max_pcie_width"`
	NVLinkLinks        int          `json:"nvlink_links"`
	NVLinkGbps         float64      `json:"nvlink_gbps"`
	MIGCapable         bool         `json:"mig_capable"`
	MIGComputeSlices   int          `json:"mig_compute_slices"`
	MIGMemorySlices    int          `json:"mig_memory_slices"`
	MIGProfiles        []MigProfile `json:"mig_profiles"`
	ComputeCapability  string       `json:"compute_capability"` // "9.0"
	SMCount            int          `json:"sm_count"`
	VBIOSVersion       string       `json:"vbios_version"`
	BoardPartNumber    string       `json:"board_part_number"`
	GPUPartNumber      string       `json:"gpu_part_number"`
	InforomImage       string       `json:"inforom_image"`
	ModuleID           int          `json:"module_id"`
	NUMANode           int          `json:"numa_node"`
	CPUAffinity        string       `json:"cpu_affinity"`
	Clocks             Clocks       `json:"clocks"`
	ECCSupported       bool         `json:"ecc_supported"`
	RowRemapping       bool         `json:"row_remapping"`
	RowRemapBanks      int          `json:"row_remap_banks"`
	PageRetirement     bool         `json:"page_retirement"`
	// InactiveRemapRowsText: the board's `nvidia-smi -q` text lists the inactive remapped-row counters (H200, L40S).
	InactiveRemapRowsText bool `json:"inactive_remap_rows_text"`
	// Temperature thresholds in C; make_hardware writes none, so nvidia-smi -q uses its defaults (0: absent).
	TLimitC       int `json:"tlimit_c"`
	ShutdownC     int `json:"shutdown_c"`
	SlowdownC     int `json:"slowdown_c"`
	MaxOperatingC int `json:"max_operating_c"`
}

// CUDAComputeCapability is ComputeCapability as (major, minor).
func (g *GPU) CUDAComputeCapability() (int, int) {
	major, minor, _ := strings.Cut(g.ComputeCapability, ".")
	a, _ := strconv.Atoi(major)
	b, _ := strconv.Atoi(minor)
	return a, b
}

// Fault is one injected fault; GPU is nil for a host-wide fault. Its name is only a label: what it does
// is its Effects, which the lab writes with it (faults.py, the one place each fault is defined).
type Fault struct {
	Fault   string  `json:"fault"`
	GPU     *int    `json:"gpu"`
	Effects Effects `json:"effects"`
}

// Effects is what a fault does (gpuready.lab.faults.Effects documents each field). A field missing from
// the hardware file is healthy: a zero factor or divisor counts as 1.
type Effects struct {
	OffBus              bool    `json:"off_bus"`
	XID                 int     `json:"xid"`
	ECCUncorrected      int     `json:"ecc_uncorrected"`
	DBERemapped         int     `json:"dbe_remapped"`
	RowRemapPending     bool    `json:"row_remap_pending"`
	RetiredPagesPending bool    `json:"retired_pages_pending"`
	PCIeGenDrop         int     `json:"pcie_gen_drop"`
	PCIeWidthDivisor    int     `json:"pcie_width_divisor"`
	NVLinkDown          bool    `json:"nvlink_down"`
	BandwidthFactor     float64 `json:"bandwidth_factor"`
	DCGMMemoryFails     bool    `json:"dcgm_memory_fails"`
	FabricFailed        bool    `json:"fabric_failed"`
	DriverMismatch      bool    `json:"driver_mismatch"`
}

// combine adds e to the effects so far as faults.Effects.combined does: flags OR, counts add, the
// worst factor or PCIe field, the largest XID.
func (c Effects) combine(e Effects) Effects {
	c.OffBus = c.OffBus || e.OffBus
	c.XID = max(c.XID, e.XID)
	c.ECCUncorrected += e.ECCUncorrected
	c.DBERemapped += e.DBERemapped
	c.RowRemapPending = c.RowRemapPending || e.RowRemapPending
	c.RetiredPagesPending = c.RetiredPagesPending || e.RetiredPagesPending
	c.PCIeGenDrop = max(c.PCIeGenDrop, e.PCIeGenDrop)
	c.PCIeWidthDivisor = max(c.PCIeWidthDivisor, e.PCIeWidthDivisor, 1)
	c.NVLinkDown = c.NVLinkDown || e.NVLinkDown
	c.BandwidthFactor = min(c.BandwidthFactor, factor(e.BandwidthFactor))
	c.DCGMMemoryFails = c.DCGMMemoryFails || e.DCGMMemoryFails
	c.FabricFailed = c.FabricFailed || e.FabricFailed
	c.DriverMismatch = c.DriverMismatch || e.DriverMismatch
	return c
}

func factor(f float64) float64 {
	if f <= 0 {
		return 1
	}
	return f
}

// healthy is the effects of no fault.
var healthy = Effects{PCIeWidthDivisor: 1, BandwidthFactor: 1}

// System is the machine's board-level facts.
type System struct {
	Description   string `json:"description"`
	NVSwitch      bool   `json:"nvswitch"`
	NVSwitchCount int    `json:"nvswitch_count"`
	NUMANodes     int    `json:"numa_nodes"`
	CPUs          int    `json:"cpus"`
	// Virtualization is nvidia-smi's "Virtualization Mode": "None" on bare metal, "Pass-Through" in a VM.
	Virtualization string `json:"virtualization"`
}

// Hardware is the whole hardware file.
type Hardware struct {
	Schema    int     `json:"schema"`
	Profile   string  `json:"profile"`
	NodeIndex int     `json:"node_index"`
	System    System  `json:"system"`
	GPUs      []GPU   `json:"gpus"`
	Faults    []Fault `json:"faults"`
}

// ComputeInstance is one compute instance inside a GPU instance (state.json).
type ComputeInstance struct {
	ID        int `json:"id"`
	ProfileID int `json:"profile_id"`
	Start     int `json:"start"`
	Size      int `json:"size"`
}

// GPUInstance is one GPU instance (state.json).
type GPUInstance struct {
	ID        int               `json:"id"`
	ProfileID int               `json:"profile_id"`
	Start     int               `json:"start"`
	Size      int               `json:"size"`
	CIs       []ComputeInstance `json:"cis"`
}

// GPUState is what the driver keeps for one GPU (state.json "gpus"[uuid]).
type GPUState struct {
	MigCurrent  bool          `json:"mig_current"`
	MigPending  bool          `json:"mig_pending"`
	Persistence bool          `json:"persistence"`
	GIs         []GPUInstance `json:"gis"`
	// ComputeMode as nvidia-smi names it ("Default", "Exclusive_Process", "Prohibited"); "" until set
	// (the driver's default), so it is absent from the file until then.
	ComputeMode string `json:"compute_mode,omitempty"`
	// Timeslice is nvidia-smi compute-policy's --set-timeslice (0 default, 1 short, 2 medium, 3 long), what
	// NVIDIA's DRA driver sets for a TimeSlicing claim; absent until set, lost at boot.
	Timeslice *int `json:"timeslice,omitempty"`
}

// State is the driver state as in effect now: a state file from an earlier boot reads as a fresh
// boot (pending MIG mode current, no instances, no module loaded); kernel_files reads it so too, through lab-view.
type State struct {
	BootID string              `json:"boot_id"`
	Kmod   *string             `json:"kmod"`
	GPUs   map[string]GPUState `json:"gpus"`
}

// MigDevice is one MIG device (one compute instance), numbered as nvidia-smi numbers them.
type MigDevice struct {
	Index     int // 0.. over the GPU's MIG devices, by GI id then CI id
	GI        int
	CI        int
	Profile   MigProfile // the GPU instance's profile
	Instance  GPUInstance
	Compute   ComputeInstance
	Name      string // "1g.10gb"
	Full      bool   // the compute instance spans its whole GPU instance
	SMCount   int
	MemoryMiB int
	UUID      string // "MIG-<uuid5>", MigUUID
}

// Machine is one consistent reading of the files.
type Machine struct {
	Hardware       Hardware
	State          State
	LibraryVersion string // the user-space driver (NVML) version
	ReadAt         time.Time
	// In a container (contain.go): the full state behind State, and whether the container has the MIG
	// configuration capability. full is nil outside a container.
	full      *State
	migConfig bool
}

// HardwarePath is the hardware file's path (GPUREADY_LAB_HARDWARE or the default).
func HardwarePath() string { return envOr("GPUREADY_LAB_HARDWARE", DefaultHardware) }

// StatePath is the driver state file's path (GPUREADY_LAB_STATE or the default).
func StatePath() string { return envOr("GPUREADY_LAB_STATE", DefaultState) }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func readText(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// LibraryVersion is the installed user-space driver version (DriverDir/driver-version, of libnvidia-ml1).
func LibraryVersion() string {
	if v := os.Getenv("GPUREADY_LAB_DRIVER_VERSION"); v != "" {
		return v
	}
	if v := readText(filepath.Join(DriverDir, "driver-version")); v != "" {
		return v
	}
	return DefaultDriverVersion
}

// LibraryInstalled: the user-space driver (libnvidia-ml1: the mock libnvidia-ml.so.1 and DriverDir's
// driver-version) is installed, or the lab names its version (GPUREADY_LAB_DRIVER_VERSION, as the tests
// do). Unlike LibraryVersion and InstalledKmodVersion, which
// take a host without DriverDir for a development host with the default driver, a missing driver-version file is no
// library: a tool that exists without the driver (nvidia-container-cli, of the container toolkit) must fail on a lab
// host without the driver packages as the real one fails to load libnvidia-ml.so.1.
func LibraryInstalled() bool {
	return os.Getenv("GPUREADY_LAB_DRIVER_VERSION") != "" || readText(filepath.Join(DriverDir, "driver-version")) != ""
}

// InstalledKmodVersion is the kernel module version on disk (DriverDir/kmod-version, of the kernel module
// package), "" when none is installed.
func InstalledKmodVersion() string {
	if v := os.Getenv("GPUREADY_LAB_DRIVER_VERSION"); v != "" {
		return v
	}
	if st, err := os.Stat(DriverDir); err != nil || !st.IsDir() {
		return DefaultDriverVersion
	}
	return readText(filepath.Join(DriverDir, "kmod-version"))
}

// CUDAVersion is the CUDA version of a driver version ("580.x" -> "13.0").
func CUDAVersion(driver string) string {
	branch, _, _ := strings.Cut(driver, ".")
	if v, ok := CUDAByBranch[branch]; ok {
		return v
	}
	return "13.0"
}

// BootID is the current boot id (GPUREADY_LAB_BOOT_ID or the kernel's).
func BootID() string {
	if v := os.Getenv("GPUREADY_LAB_BOOT_ID"); v != "" {
		return v
	}
	if v := readText("/proc/sys/kernel/random/boot_id"); v != "" {
		return v
	}
	return "unknown-boot"
}

// Load reads the machine now. ErrNoDriver when there is no readable hardware file.
func Load() (*Machine, error) {
	raw, err := os.ReadFile(HardwarePath())
	if err != nil {
		return nil, ErrNoDriver
	}
	m := &Machine{LibraryVersion: LibraryVersion(), ReadAt: time.Now()}
	if err := json.Unmarshal(raw, &m.Hardware); err != nil {
		return nil, ErrNoDriver
	}
	m.State = loadState(StatePath(), m.Hardware.GPUs)
	if nodes, ok := containerNodes(); ok {
		m.contain(nodes)
	}
	return m, nil
}

func loadState(path string, gpus []GPU) State {
	var st State
	if raw, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(raw))) > 0 {
		_ = json.Unmarshal(raw, &st)
	}
	current := BootID()
	if st.BootID != current {
		fresh := State{BootID: current, GPUs: map[string]GPUState{}}
		for _, g := range gpus {
			old, ok := st.GPUs[g.UUID]
			mig := ok && old.MigPending && g.MIGCapable
			fresh.GPUs[g.UUID] = GPUState{MigCurrent: mig, MigPending: mig}
		}
		st = fresh
	}
	if st.GPUs == nil {
		st.GPUs = map[string]GPUState{}
	}
	for _, g := range gpus {
		if _, ok := st.GPUs[g.UUID]; !ok {
			st.GPUs[g.UUID] = GPUState{}
		}
	}
	return st
}

// CheckLoaded fails as NVML init does: ErrMismatch for a driver_mismatch fault or a loaded module
// of another version, ErrNoDriver when no module is installed (read-only: a module not loaded yet counts as
// the installed one, which LoadModule records on first use).
func (m *Machine) CheckLoaded() error {
	if m.HostEffects().DriverMismatch {
		return ErrMismatch
	}
	kmod := ""
	if m.State.Kmod != nil {
		kmod = *m.State.Kmod
	}
	if kmod == "" {
		kmod = InstalledKmodVersion()
		if kmod == "" {
			return ErrNoDriver
		}
	}
	if kmod != m.LibraryVersion {
		return ErrMismatch
	}
	return nil
}

// DriverVersion is the version NVML reports (the library's).
func (m *Machine) DriverVersion() string { return m.LibraryVersion }

// CUDADriverVersion is the CUDA version as NVML's integer (13.0 -> 13000).
func (m *Machine) CUDADriverVersion() int {
	major, minor, _ := strings.Cut(CUDAVersion(m.LibraryVersion), ".")
	a, _ := strconv.Atoi(major)
	b, _ := strconv.Atoi(minor)
	return a*1000 + b*10
}

// GPUs are the machine's GPUs in index order, off the bus or not.
func (m *Machine) GPUs() []GPU { return m.Hardware.GPUs }

// GPU is the GPU with this index, nil when there is none.
func (m *Machine) GPU(index int) *GPU {
	for i := range m.Hardware.GPUs {
		if m.Hardware.GPUs[i].Index == index {
			return &m.Hardware.GPUs[i]
		}
	}
	return nil
}

// HostEffects are the combined effects of the host-wide faults.
func (m *Machine) HostEffects() Effects { return m.effects(nil) }

// GPUEffects are the combined effects of the faults injected on GPU index.
func (m *Machine) GPUEffects(index int) Effects { return m.effects(&index) }

func (m *Machine) effects(index *int) Effects {
	out := healthy
	for _, f := range m.Hardware.Faults {
		if (f.GPU == nil && index == nil) || (f.GPU != nil && index != nil && *f.GPU == *index) {
			out = out.combine(f.Effects)
		}
	}
	return out
}

// OffBus: the GPU fell off the bus (an off_bus fault); the driver lost it.
func (m *Machine) OffBus(index int) bool { return m.GPUEffects(index).OffBus }

// XIDs are the XID errors the driver has raised for GPU index, one per fault with an XID, in the order
// the faults were injected (faults.py's journal_messages logs them).
func (m *Machine) XIDs(index int) []int {
	var out []int
	for _, f := range m.Hardware.Faults {
		if f.GPU != nil && *f.GPU == index && f.Effects.XID != 0 {
			out = append(out, f.Effects.XID)
		}
	}
	return out
}

// View is what one GPU reports now: hardware, driver state and faults.
type View struct {
	GPU *GPU
	// Effects are the combined effects of the GPU's faults.
	Effects    Effects
	OffBus     bool
	MigCurrent bool
	MigPending bool
	// Persistence: the driver's persistence mode, or nvidia-persistenced running.
	Persistence bool
	// ComputeMode: "Default" until set (nvidia-smi -c, nvmlDeviceSetComputeMode); one per GPU, lost at boot.
	ComputeMode string
	// GPUInstances are the GPU instances by id (MIG mode current only); MigDevices their compute instances.
	GPUInstances []GPUInstance
	MigDevices   []MigDevice
	// Memory in MiB: total, reserved by the driver, used, free.
	MemoryTotalMiB, MemoryReservedMiB, MemoryUsedMiB, MemoryFreeMiB int
	// Uncorrected ECC errors (volatile = aggregate here; 0 without faults).
	ECCUncorrected int
	// Current PCIe link (the maximum, lowered by PCIeGenDrop and PCIeWidthDivisor).
	PCIeGen, PCIeWidth int
	// Retired pages (pre-Ampere): single-bit, double-bit, pending.
	RetiredSBE, RetiredDBE int
	RetiredPending         bool
	// Row remapping: correctable, uncorrectable, pending.
	RemapCorrectable, RemapUncorrectable int
	RemapPending                         bool
	// NVLinkActive: the GPU's links are up (false with NVLinkDown or no links).
	NVLinkActive bool
	// BandwidthFactor: every copy involving the GPU moves at this fraction of its normal rate (1: healthy).
	BandwidthFactor float64
	XIDs            []int
}

// View is GPU index's view, nil when there is no such GPU.
func (m *Machine) View(index int) *View {
	g := m.GPU(index)
	if g == nil {
		return nil
	}
	st := m.State.GPUs[g.UUID]
	f := m.GPUEffects(index)
	v := &View{
		GPU:             g,
		Effects:         f,
		OffBus:          m.OffBus(index),
		MigCurrent:      st.MigCurrent && g.MIGCapable,
		MigPending:      st.MigPending && g.MIGCapable,
		Persistence:     st.Persistence || PersistencedRunning(),
		ComputeMode:     cmp.Or(st.ComputeMode, ComputeModeDefault),
		PCIeGen:         max(1, g.MaxPCIeGen-f.PCIeGenDrop),
		PCIeWidth:       max(1, g.MaxPCIeWidth/f.PCIeWidthDivisor),
		NVLinkActive:    g.NVLinkLinks > 0 && !f.NVLinkDown,
		XIDs:            m.XIDs(index),
		ECCUncorrected:  f.ECCUncorrected,
		BandwidthFactor: f.BandwidthFactor,
	}
	if v.MigCurrent {
		v.GPUInstances = append([]GPUInstance(nil), st.GIs...)
		sort.Slice(v.GPUInstances, func(i, j int) bool { return v.GPUInstances[i].ID < v.GPUInstances[j].ID })
		v.MigDevices = migDevices(g, st)
	}
	v.MemoryTotalMiB = g.MemoryMiB
	v.MemoryReservedMiB = g.ReservedMiB
	v.MemoryUsedMiB = 12 * len(v.MigDevices)
	v.MemoryFreeMiB = g.MemoryMiB - g.ReservedMiB - v.MemoryUsedMiB
	if f.RetiredPagesPending {
		v.RetiredDBE = 1 + f.DBERemapped
		v.RetiredPending = true
	}
	if f.RowRemapPending {
		v.RemapUncorrectable, v.RemapPending = 1, true
	}
	if g.RowRemapping {
		v.RemapUncorrectable += f.DBERemapped
	}
	return v
}

// Fabric is the GPU fabric (state, status) as nvidia-smi prints it: "N/A" without NVSwitches,
// "In Progress" until Fabric Manager runs, then "Completed"/"Success".
func (m *Machine) Fabric() (string, string) {
	if !m.Hardware.System.NVSwitch {
		return "N/A", "N/A"
	}
	if m.HostEffects().FabricFailed || !FabricManagerRunning() {
		return "In Progress", "N/A"
	}
	return "Completed", "Success"
}

// Profile is the GPU's MIG profile with this profile id, nil when it has none.
func (g *GPU) Profile(id int) *MigProfile {
	for i := range g.MIGProfiles {
		if g.MIGProfiles[i].ProfileID == id {
			return &g.MIGProfiles[i]
		}
	}
	return nil
}

func migDevices(g *GPU, st GPUState) []MigDevice {
	profiles := map[int]MigProfile{}
	for _, p := range g.MIGProfiles {
		profiles[p.ProfileID] = p
	}
	gis := append([]GPUInstance(nil), st.GIs...)
	sort.Slice(gis, func(i, j int) bool { return gis[i].ID < gis[j].ID })
	var out []MigDevice
	for _, gi := range gis {
		prof := profiles[gi.ProfileID]
		cis := append([]ComputeInstance(nil), gi.CIs...)
		sort.Slice(cis, func(i, j int) bool { return cis[i].ID < cis[j].ID })
		for _, ci := range cis {
			full := prof.ComputeSlices <= 0 || ci.Size >= prof.ComputeSlices
			sm := prof.SMCount
			if !full {
				sm = prof.SMCount * ci.Size / prof.ComputeSlices
			}
			out = append(out, MigDevice{
				Index: len(out), GI: gi.ID, CI: ci.ID, Profile: prof, Instance: gi, Compute: ci,
				Name: prof.Name, Full: full, SMCount: sm, MemoryMiB: prof.MemoryMiB,
				UUID: MigUUID(g.UUID, gi.ID, ci.ID),
			})
		}
	}
	return out
}

// MigUUID is a MIG device's UUID: "MIG-" + uuid5(NAMESPACE_OID, "gpu/gi/ci"), name-based as real ones are.
func MigUUID(gpuUUID string, gi, ci int) string {
	ns := []byte{0x6b, 0xa7, 0xb8, 0x12, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	h := sha1.New()
	h.Write(ns)
	fmt.Fprintf(h, "%s/%d/%d", gpuUUID, gi, ci)
	u := h.Sum(nil)[:16]
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("MIG-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

func alive(pidFile string) bool {
	pid := readText(pidFile)
	if pid == "" {
		return false
	}
	if _, err := strconv.Atoi(pid); err != nil {
		return false
	}
	if _, err := os.Stat("/proc/" + pid); err == nil {
		return true
	}
	return locked(pidFile)
}

// locked: the daemon holds its pid file's lock (the static tools' holdPidFile). A GPU container sees the pid
// file, which the lab mounts into it, but not the daemon's pid: that is in the host's PID namespace.
func locked(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// PersistencedPidFile is nvidia-persistenced's pid file (GPUREADY_LAB_PERSISTENCED_PID or the real daemon's).
func PersistencedPidFile() string {
	return envOr("GPUREADY_LAB_PERSISTENCED_PID", "/run/nvidia-persistenced/nvidia-persistenced.pid")
}

// FabricManagerPidFile is nv-fabricmanager's pid file (GPUREADY_LAB_FABRICMANAGER_PID or the real daemon's).
func FabricManagerPidFile() string {
	return envOr("GPUREADY_LAB_FABRICMANAGER_PID", "/run/nvidia-fabricmanager/nv-fabricmanager.pid")
}

// PersistencedRunning: nvidia-persistenced's pid file names a live process.
func PersistencedRunning() bool { return alive(PersistencedPidFile()) }

// FabricManagerRunning: nv-fabricmanager's pid file names a live process.
func FabricManagerRunning() bool { return alive(FabricManagerPidFile()) }

// HostEngineRunning: nv-hostengine, DCGM's daemon that dcgmi connects to, is up. Only a pid file named by
// GPUREADY_LAB_HOSTENGINE_PID is checked (it must name a live process); without the variable the engine counts
// as up, as the lab's hosts run dcgmi without it.
func HostEngineRunning() bool {
	pidFile := os.Getenv("GPUREADY_LAB_HOSTENGINE_PID")
	return pidFile == "" || alive(pidFile)
}

// fileKey identifies a file's content cheaply: a rewrite (atomic rename) changes inode or mtime.
type fileKey struct {
	ok    bool
	ino   uint64
	mtime int64
	size  int64
}

func keyOf(path string) fileKey {
	st, err := os.Stat(path)
	if err != nil {
		return fileKey{}
	}
	return fileKey{ok: true, ino: inode(st), mtime: st.ModTime().UnixNano(), size: st.Size()}
}

var (
	mu       sync.Mutex
	cached   *Machine
	cacheKey [3]string
	cacheErr error
)

// Current is the machine now, re-read only when the hardware file, the state file, the paths or
// the driver version changed since the last call (a stat each, cheap enough for every NVML call).
// The result is shared: callers must not modify it.
func Current() (*Machine, error) {
	hw, st := HardwarePath(), StatePath()
	key := [3]string{
		fmt.Sprintf("%s|%+v", hw, keyOf(hw)),
		fmt.Sprintf("%s|%+v|%s", st, keyOf(st), BootID()),
		LibraryVersion(),
	}
	mu.Lock()
	defer mu.Unlock()
	if (cached != nil || cacheErr != nil) && key == cacheKey {
		return cached, cacheErr
	}
	cached, cacheErr = Load()
	cacheKey = key
	return cached, cacheErr
}

// Topology levels, as NVML numbers them (nvmlGpuTopologyLevel_t).
const (
	TopologyInternal = 0  // the same GPU
	TopologyNode     = 40 // PCIe host bridges within one NUMA node
	TopologySystem   = 50 // across NUMA nodes
)

// CommonAncestor is the closest PCIe ancestor of GPUs a and b, as nvmlDeviceGetTopologyCommonAncestor answers:
// the lab places each GPU under its own host bridge, so two GPUs meet at their NUMA node or across the system.
// nvidia-smi's `topo -m` (tools/smi_read.go) draws the same NODE/SYS matrix.
func (m *Machine) CommonAncestor(a, b *GPU) int {
	switch {
	case a.Index == b.Index:
		return TopologyInternal
	case a.NUMANode == b.NUMANode:
		return TopologyNode
	default:
		return TopologySystem
	}
}

// NVLinkRemoteBusID is the PCI bus id at the far end of GPU g's NVLink `link`, "" when the link has no GPU
// or switch there. With NVSwitches every link ends on a switch (links spread over them, as on an HGX board),
// so no GPU is a direct NVLink peer of another; without, the links are spread evenly over the other GPUs, as
// `topo -m` draws them. The switches' bus ids are the lab's own (0000:05:00.0 onwards), not a capture's.
func (m *Machine) NVLinkRemoteBusID(g *GPU, link int) string {
	if link < 0 || link >= g.NVLinkLinks {
		return ""
	}
	if m.Hardware.System.NVSwitch {
		switches := max(1, m.Hardware.System.NVSwitchCount)
		return fmt.Sprintf("00000000:%02X:00.0", 5+link%switches)
	}
	var peers []*GPU
	for i := range m.Hardware.GPUs {
		if m.Hardware.GPUs[i].Index != g.Index {
			peers = append(peers, &m.Hardware.GPUs[i])
		}
	}
	if len(peers) == 0 {
		return ""
	}
	return peers[link%len(peers)].PCIBusID
}

// MIG capability minors, as the driver numbers them: each GPU has room for 15 GPU instances of 8 compute
// instances, after the driver's own three (0, then config and monitor). The lab renders every minor from here:
// MigMinors, InstanceCaps (through lab-view for the kernel's files) and the tools' own checks.
const (
	gisPerGPU     = 15
	cisPerGI      = 8
	migMinorsGPUs = 32 // /proc/driver/nvidia-caps/mig-minors lists 32 GPUs' minors, whatever the machine holds
)

// GIMinor is the minor of /dev/nvidia-caps/nvidia-cap<N>, the access capability of GPU instance gi of the GPU
// with minor number gpuMinor (its /proc/driver/nvidia/capabilities/gpu<i>/mig/gi<gi>/access says it).
func GIMinor(gpuMinor, gi int) int { return 3 + (gpuMinor*gisPerGPU+gi)*(1+cisPerGI) }

// CIMinor is the minor of compute instance ci's access capability in GPU instance gi.
func CIMinor(gpuMinor, gi, ci int) int { return GIMinor(gpuMinor, gi) + 1 + ci }

// MigMinors is the text of /proc/driver/nvidia-caps/mig-minors, the driver's table of every capability minor
// (nvidia-modprobe and NVIDIA's container toolkit read a node's minor there).
func MigMinors() string {
	var b strings.Builder
	fmt.Fprintf(&b, "config %d\nmonitor %d\n", configCapMinor, monitorCapMinor)
	for gpu := range migMinorsGPUs {
		for gi := range gisPerGPU {
			fmt.Fprintf(&b, "gpu%d/gi%d/access %d\n", gpu, gi, GIMinor(gpu, gi))
			for ci := range cisPerGI {
				fmt.Fprintf(&b, "gpu%d/gi%d/ci%d/access %d\n", gpu, gi, ci, CIMinor(gpu, gi, ci))
			}
		}
	}
	return b.String()
}

// DevDir is where the process finds the driver's device nodes (GPUREADY_LAB_DEV or /dev).
func DevDir() string { return envOr("GPUREADY_LAB_DEV", "/dev") }
