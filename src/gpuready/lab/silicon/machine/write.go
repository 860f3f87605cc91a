package machine

// Changing the driver state, as the tools and the mock NVML do: under one lock (an exclusive flock
// on "<state file>.lock"), read the state as in effect now (a state of an earlier boot reads as a fresh
// boot), change it, write it back atomically (a temporary ".state-*" file renamed over the state file) in
// the layout the lab's Python side reads (json.dumps(indent=1, sort_keys=True)). So a MIG change made through NVML (mock
// libnvidia-ml's nvmlDeviceSetMigMode, nvmlDeviceCreateGpuInstance, ...) is what nvidia-smi lists at once,
// and the other way round.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ErrNoPermission: the state's lock cannot be taken (an unprivileged caller); nothing is changed, as NVML
// changes nothing for such a user (NVML_ERROR_NO_PERMISSION).
var ErrNoPermission = errors.New("no permission to change the driver state")

// Update runs change on the machine as it is now, under the driver state lock, and writes the state back
// when change returns nil. It first checks the module as NVML init does (CheckLoaded), so it fails as NVML init
// fails, and records the installed module as loaded on first use in this boot.
func Update(change func(m *Machine) error) error {
	before, after, err := update(change)
	if err == nil && !sameCapFiles(before, after) {
		_, inContainer := os.LookupEnv(ContainerDevices)
		awaitCapFiles(before, after, !inContainer) // capfiles.go: outside the lock, which the renderer may want
	}
	return err
}

func sameCapFiles(a, b map[string]CapFile) bool {
	if len(a) != len(b) {
		return false
	}
	for key := range a {
		if _, ok := b[key]; !ok {
			return false
		}
	}
	return true
}

// update is Update under the lock; it returns the MIG capabilities before and after the change.
func update(change func(m *Machine) error) (before, after map[string]CapFile, err error) {
	err = withStateLock(func(path string) error {
		m, err := Load()
		if err != nil {
			return err
		}
		if err := m.CheckLoaded(); err != nil {
			return err
		}
		if m.State.Kmod == nil || *m.State.Kmod == "" {
			kmod := InstalledKmodVersion()
			m.State.Kmod = &kmod
		}
		before = m.capFiles()
		if err := change(m); err != nil {
			return err
		}
		after = m.capFiles()
		return writeState(path, m.stateToWrite())
	})
	if err != nil {
		return nil, nil, err
	}
	return before, after, nil
}

// withStateLock runs locked with the state file's path under the driver state lock; ErrNoPermission when the
// lock cannot be taken.
func withStateLock(locked func(path string) error) error {
	path := StatePath()
	_ = os.MkdirAll(filepath.Dir(path), 0o755)
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o666)
	if err != nil {
		return ErrNoPermission
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return ErrNoPermission
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	return locked(path)
}

// LoadModule is the first use of the driver in a boot, which loads the installed kernel module (nvidia-modprobe's
// job on a real host): the state records its version, so a driver upgraded later mismatches until the next
// reboot. Call it on a machine just loaded, before CheckLoaded. It records the module whether or not it then
// matches the library (a module is loaded before NVML compares versions), and
// nothing with a driver_mismatch fault, without an installed module, once one is loaded, in a container or for a
// caller who cannot take the lock (the tools then go on read-only).
func (m *Machine) LoadModule() {
	_, inContainer := os.LookupEnv(ContainerDevices)
	if inContainer || m.HostEffects().DriverMismatch || (m.State.Kmod != nil && *m.State.Kmod != "") {
		return
	}
	_ = withStateLock(func(path string) error {
		now, err := Load() // under the lock: another command may have loaded it meanwhile
		if err != nil || now.HostEffects().DriverMismatch || (now.State.Kmod != nil && *now.State.Kmod != "") {
			return err
		}
		kmod := InstalledKmodVersion()
		if kmod == "" {
			return nil
		}
		now.State.Kmod = &kmod
		return writeState(path, now.stateToWrite())
	})
}

// stateJSON is the state in the layout the lab's tests compare: keys sorted, one-space indent, lists
// never null.
func stateJSON(st State) ([]byte, error) {
	for uuid, g := range st.GPUs {
		if g.GIs == nil {
			g.GIs = []GPUInstance{}
		}
		for i := range g.GIs {
			if g.GIs[i].CIs == nil {
				g.GIs[i].CIs = []ComputeInstance{}
			}
		}
		st.GPUs[uuid] = g
	}
	raw, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	var generic any // maps marshal with sorted keys, as sort_keys=True
	if err := json.Unmarshal(raw, &generic); err != nil {
		return nil, err
	}
	return json.MarshalIndent(generic, "", " ")
}

func writeState(path string, st State) error {
	data, err := stateJSON(st)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".state-")
	if err != nil {
		return ErrNoPermission
	}
	// readable by every NVML caller (CreateTemp makes it 0600): the lab's GPU pods run as non-root users
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// Errors of the MIG changes, each the NVML error the real driver gives.
var (
	ErrNotSupported          = errors.New("Not Supported")            // not MIG capable / not in MIG mode
	ErrInUse                 = errors.New("In use by another client") // instances left
	ErrNotFound              = errors.New("Not Found")
	ErrInvalidArgument       = errors.New("Invalid Argument")
	ErrInsufficientResources = errors.New("Insufficient Resources")
)

// GPUByUUID is the GPU with this UUID, nil when none.
func (m *Machine) GPUByUUID(uuid string) *GPU {
	for i := range m.Hardware.GPUs {
		if m.Hardware.GPUs[i].UUID == uuid {
			return &m.Hardware.GPUs[i]
		}
	}
	return nil
}

// SetMigMode sets the GPU's pending MIG mode (nvidia-smi -mig, tools/smi.go): it takes effect at the next GPU
// reset or reboot, which the lab's hosts (like VMs with passthrough GPUs) cannot do in place. Returns
// whether the change is pending (current mode differs).
func (m *Machine) SetMigMode(index int, enable bool) (bool, error) {
	if !m.MigConfigAllowed() {
		return false, ErrNoPermission
	}
	g := m.GPU(index)
	if g == nil {
		return false, ErrInvalidArgument
	}
	if !g.MIGCapable {
		return false, ErrNotSupported
	}
	st := m.State.GPUs[g.UUID]
	if !enable && len(st.GIs) > 0 {
		return false, ErrInUse
	}
	st.MigPending = enable
	m.State.GPUs[g.UUID] = st
	return st.MigCurrent != enable, nil
}

// Compute modes as nvidia-smi names them, the names the state file holds.
const (
	ComputeModeDefault          = "Default"
	ComputeModeProhibited       = "Prohibited"
	ComputeModeExclusiveProcess = "Exclusive_Process"
)

// SetPersistence is nvidia-smi -pm: the driver's (legacy) persistence mode until the next boot.
func (m *Machine) SetPersistence(index int, enable bool) error {
	g := m.GPU(index)
	if g == nil {
		return ErrInvalidArgument
	}
	st := m.State.GPUs[g.UUID]
	st.Persistence = enable
	m.State.GPUs[g.UUID] = st
	return nil
}

// Timeslices are nvidia-smi compute-policy --set-timeslice's values, by number.
var Timeslices = []string{"Default", "Short", "Medium", "Long"}

// SetTimeslice is nvidia-smi compute-policy --set-timeslice: the time slice of time-shared processes.
func (m *Machine) SetTimeslice(index, slice int) error {
	g := m.GPU(index)
	if g == nil || slice < 0 || slice >= len(Timeslices) {
		return ErrInvalidArgument
	}
	st := m.State.GPUs[g.UUID]
	st.Timeslice = &slice
	m.State.GPUs[g.UUID] = st
	return nil
}

// SetComputeMode is nvidia-smi -c (tools/smi.go) and nvmlDeviceSetComputeMode: the GPU's
// compute mode until the next boot. What NVIDIA's MPS control daemon and DRA driver set for MPS sharing.
func (m *Machine) SetComputeMode(index int, mode string) error {
	g := m.GPU(index)
	if g == nil {
		return ErrInvalidArgument
	}
	switch mode {
	case ComputeModeDefault, ComputeModeProhibited, ComputeModeExclusiveProcess:
	default:
		return ErrInvalidArgument
	}
	st := m.State.GPUs[g.UUID]
	st.ComputeMode = mode
	m.State.GPUs[g.UUID] = st
	return nil
}

// ResetGPU is what a GPU reset does (nvidia-smi -r): pending MIG mode takes effect, instances go.
func (m *Machine) ResetGPU(index int) error {
	g := m.GPU(index)
	if g == nil {
		return ErrInvalidArgument
	}
	st := m.State.GPUs[g.UUID]
	st.MigCurrent, st.GIs = st.MigPending, []GPUInstance{}
	m.State.GPUs[g.UUID] = st
	return nil
}

// migState is the GPU and its state, which must be in MIG mode now; the caller must hold the MIG configuration
// capability (MigConfigAllowed).
func (m *Machine) migState(index int) (*GPU, GPUState, error) {
	if !m.MigConfigAllowed() {
		return nil, GPUState{}, ErrNoPermission
	}
	g := m.GPU(index)
	if g == nil {
		return nil, GPUState{}, ErrInvalidArgument
	}
	st := m.State.GPUs[g.UUID]
	if !g.MIGCapable || !st.MigCurrent {
		return nil, GPUState{}, ErrNotSupported
	}
	return g, st, nil
}

func occupied(gis []GPUInstance) map[int]bool {
	used := map[int]bool{}
	for _, gi := range gis {
		for s := gi.Start; s < gi.Start+gi.Size; s++ {
			used[s] = true
		}
	}
	return used
}

func hasSuffix(s, suffix string) bool {
	return len(s) >= len(suffix) && s[len(s)-len(suffix):] == suffix
}

// RoomFor is where one more instance of prof may start now (nvidia-smi mig -cgi, tools/mig.go): the profile's
// instance limit, the compute slices, the one set of media extensions and free memory slices.
func RoomFor(g *GPU, gis []GPUInstance, prof *MigProfile) []int {
	count, compute := 0, 0
	me := false
	for _, gi := range gis {
		p := g.Profile(gi.ProfileID)
		if p == nil {
			continue
		}
		if p.ProfileID == prof.ProfileID {
			count++
		}
		compute += p.ComputeSlices
		me = me || hasSuffix(p.Name, "+me")
	}
	total := g.MIGComputeSlices
	if total == 0 {
		total = 7
	}
	if count >= prof.MaxInstances || compute+prof.ComputeSlices > total || (hasSuffix(prof.Name, "+me") && me) {
		return nil
	}
	used := occupied(gis)
	var out []int
	for _, s := range prof.Placements {
		free := true
		for i := s; i < s+prof.PlacementSize; i++ {
			free = free && !used[i]
		}
		if free {
			out = append(out, s)
		}
	}
	return out
}

// FreeCount is how many more instances of prof fit now, placed highest first as creation places them
// (nvidia-smi mig -lgip): NVML's remaining capacity.
func FreeCount(g *GPU, gis []GPUInstance, prof *MigProfile) int {
	trial := append([]GPUInstance(nil), gis...)
	n := 0
	for {
		starts := RoomFor(g, trial, prof)
		if len(starts) == 0 {
			return n
		}
		trial = append(trial, GPUInstance{ProfileID: prof.ProfileID, Start: starts[len(starts)-1], Size: prof.PlacementSize})
		n++
	}
}

// CreateGPUInstance creates a GPU instance of profile id profileID at start, or at the
// highest free placement when start < 0; the instance id follows the driver's numbering by placement.
func (m *Machine) CreateGPUInstance(index, profileID, start int) (GPUInstance, error) {
	g, st, err := m.migState(index)
	if err != nil {
		return GPUInstance{}, err
	}
	prof := g.Profile(profileID)
	if prof == nil {
		return GPUInstance{}, ErrInvalidArgument
	}
	if start >= 0 && !contains(prof.Placements, start) {
		return GPUInstance{}, ErrInvalidArgument
	}
	starts := RoomFor(g, st.GIs, prof)
	if len(starts) == 0 || (start >= 0 && !contains(starts, start)) {
		return GPUInstance{}, ErrInsufficientResources
	}
	if start < 0 {
		start = starts[0]
		for _, s := range starts {
			start = max(start, s)
		}
	}
	slices := g.MIGMemorySlices
	if slices == 0 {
		slices = 8
	}
	size := prof.PlacementSize
	gi := GPUInstance{ID: slices/size - 1 + start/size, ProfileID: prof.ProfileID, Start: start, Size: size, CIs: []ComputeInstance{}}
	st.GIs = append(st.GIs, gi)
	m.State.GPUs[g.UUID] = st
	return gi, nil
}

func contains(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// giState is migState and the position of GPU instance gi in that state; ErrNotFound when there is none such.
func (m *Machine) giState(index, gi int) (*GPU, GPUState, int, error) {
	g, st, err := m.migState(index)
	if err != nil {
		return nil, GPUState{}, -1, err
	}
	for i := range st.GIs {
		if st.GIs[i].ID == gi {
			return g, st, i, nil
		}
	}
	return nil, GPUState{}, -1, ErrNotFound
}

// DestroyGPUInstance destroys GPU instance gi: refused while it has compute instances.
func (m *Machine) DestroyGPUInstance(index, gi int) error {
	g, st, i, err := m.giState(index, gi)
	if err != nil {
		return err
	}
	if len(st.GIs[i].CIs) > 0 {
		return ErrInUse
	}
	st.GIs = append(st.GIs[:i:i], st.GIs[i+1:]...)
	m.State.GPUs[g.UUID] = st
	return nil
}

// CISlicesByProfile is NVML_COMPUTE_INSTANCE_PROFILE_* -> compute slices.
var CISlicesByProfile = map[int]int{0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6}

// CISlices is the compute slices of a compute instance of NVML compute instance profile id inside a GPU
// instance of prof, and whether that GPU instance offers the profile: up to its own size, 6 and 8 slices only
// as the whole GPU instance.
func CISlices(prof *MigProfile, id int) (int, bool) {
	slices, ok := CISlicesByProfile[id]
	if !ok || slices > prof.ComputeSlices || (slices != prof.ComputeSlices && (slices == 6 || slices == 8)) {
		return 0, false
	}
	return slices, true
}

// CIName is the name NVML and nvidia-smi give a compute instance of `slices` slices in a GPU instance of prof:
// the GPU instance's profile name when it takes the whole, else "<slices>c.<name>".
func CIName(prof *MigProfile, slices int) string {
	if slices == prof.ComputeSlices {
		return prof.Name
	}
	return fmt.Sprintf("%dc.%s", slices, prof.Name)
}

// CIStarts is where a compute instance of size slices may start in a GPU instance.
func CIStarts(prof *MigProfile, size int) []int {
	step := 1
	for step < size {
		step *= 2
	}
	var out []int
	for s := 0; s+size <= prof.ComputeSlices; s += step {
		out = append(out, s)
	}
	return out
}

// FreeCIStarts are the starts of CIStarts not overlapping the GPU instance's compute instances.
func FreeCIStarts(prof *MigProfile, gi GPUInstance, size int) []int {
	used := map[int]bool{}
	for _, ci := range gi.CIs {
		for s := ci.Start; s < ci.Start+ci.Size; s++ {
			used[s] = true
		}
	}
	var out []int
	for _, s := range CIStarts(prof, size) {
		free := true
		for i := s; i < s+size; i++ {
			free = free && !used[i]
		}
		if free {
			out = append(out, s)
		}
	}
	return out
}

// CreateComputeInstance creates a compute instance of NVML compute profile ciProfile in GPU instance gi
// at start, or at the lowest free start when start < 0; its id is the lowest free one.
func (m *Machine) CreateComputeInstance(index, gi, ciProfile, start int) (ComputeInstance, error) {
	g, st, i, err := m.giState(index, gi)
	if err != nil {
		return ComputeInstance{}, err
	}
	prof := g.Profile(st.GIs[i].ProfileID)
	if prof == nil {
		return ComputeInstance{}, ErrNotFound
	}
	slices, ok := CISlices(prof, ciProfile)
	if !ok {
		return ComputeInstance{}, ErrNotSupported
	}
	if start >= 0 && !contains(CIStarts(prof, slices), start) {
		return ComputeInstance{}, ErrInvalidArgument
	}
	free := FreeCIStarts(prof, st.GIs[i], slices)
	if len(free) == 0 || (start >= 0 && !contains(free, start)) {
		return ComputeInstance{}, ErrInsufficientResources
	}
	if start < 0 {
		start = free[0]
	}
	taken := map[int]bool{}
	for _, ci := range st.GIs[i].CIs {
		taken[ci.ID] = true
	}
	id := 0
	for taken[id] {
		id++
	}
	ci := ComputeInstance{ID: id, ProfileID: ciProfile, Start: start, Size: slices}
	gis := append([]GPUInstance(nil), st.GIs...) // the loaded state may be shared: copy what changes
	gis[i].CIs = append(append([]ComputeInstance(nil), gis[i].CIs...), ci)
	st.GIs = gis
	m.State.GPUs[g.UUID] = st
	return ci, nil
}

// DestroyComputeInstance destroys compute instance ci of GPU instance gi.
func (m *Machine) DestroyComputeInstance(index, gi, ci int) error {
	g, st, i, err := m.giState(index, gi)
	if err != nil {
		return err
	}
	gis := append([]GPUInstance(nil), st.GIs...)
	var kept []ComputeInstance
	for _, c := range gis[i].CIs {
		if c.ID != ci {
			kept = append(kept, c)
		}
	}
	if len(kept) == len(gis[i].CIs) {
		return ErrNotFound
	}
	if kept == nil {
		kept = []ComputeInstance{}
	}
	gis[i].CIs = kept
	st.GIs = gis
	m.State.GPUs[g.UUID] = st
	return nil
}
