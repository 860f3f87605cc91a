package machine

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An A100's 3g/1g profiles (placements as the catalogue gives them, 8 memory slices).
const writeHW = `{"schema":1,"gpus":[{"index":0,"uuid":"GPU-w","mig_capable":true,"mig_compute_slices":7,
"mig_memory_slices":8,"memory_mib":81920,"mig_profiles":[
{"name":"3g.40gb","profile_id":9,"compute_slices":3,"memory_slices":4,"max_instances":2,"placements":[0,4],"placement_size":4},
{"name":"1g.10gb","profile_id":19,"compute_slices":1,"memory_slices":1,"max_instances":7,"placements":[0,1,2,3,4,5,6],"placement_size":1}]}]}`

func writeSetup(t *testing.T, state string) string {
	dir := labDir(t, writeHW, "boot-2")
	if state != "" {
		write(t, filepath.Join(dir, "state.json"), state)
	}
	return dir
}

func TestUpdateWritesNvemuLayout(t *testing.T) {
	// A state of an earlier boot with MIG pending: this boot starts with MIG on and no instances.
	dir := writeSetup(t, `{"boot_id":"boot-1","kmod":"580.178.04","gpus":{"GPU-w":{"mig_current":false,
"mig_pending":true,"persistence":true,"gis":[]}}}`)
	var gis []GPUInstance
	err := Update(func(m *Machine) error {
		for _, p := range []int{9, 19, 19} {
			gi, err := m.CreateGPUInstance(0, p, -1)
			if err != nil {
				return err
			}
			gis = append(gis, gi)
		}
		_, err := m.CreateComputeInstance(0, gis[0].ID, 2, -1)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Highest placement first, ids by placement: 3g at 4 is GI 2, 1g at 3 GI 10, at 2 GI 9.
	if gis[0].ID != 2 || gis[0].Start != 4 || gis[1].ID != 10 || gis[2].ID != 9 {
		t.Fatalf("instances %+v", gis)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	// readable by non-root NVML callers (a GPU pod's user)
	if info, err := os.Stat(filepath.Join(dir, "state.json")); err != nil || info.Mode().Perm() != 0o644 {
		t.Fatalf("state.json mode %v %v", info.Mode(), err)
	}
	text := string(raw)
	if !strings.HasPrefix(text, "{\n \"boot_id\": \"boot-2\",\n \"gpus\": {") || !strings.Contains(text, "\"cis\": []") ||
		!strings.HasSuffix(text, " \"kmod\": \"580.178.04\"\n}") {
		t.Fatalf("not the state layout the tests compare:\n%s", text)
	}
	var st State
	if err := json.Unmarshal(raw, &st); err != nil || !st.GPUs["GPU-w"].MigCurrent || st.GPUs["GPU-w"].Persistence {
		t.Fatalf("state %+v %v", st, err)
	}
	// No room for a second 3g: 3+1+1 of 7 compute slices are taken.
	err = Update(func(m *Machine) error { _, err := m.CreateGPUInstance(0, 9, -1); return err })
	if !errors.Is(err, ErrInsufficientResources) {
		t.Fatalf("second 3g: %v", err)
	}
	err = Update(func(m *Machine) error { return m.DestroyGPUInstance(0, 2) })
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("destroying a GI with a CI: %v", err)
	}
	err = Update(func(m *Machine) error {
		if _, err := m.SetMigMode(0, false); !errors.Is(err, ErrInUse) {
			t.Errorf("disabling MIG with instances: %v", err)
		}
		if err := m.DestroyComputeInstance(0, 2, 0); err != nil {
			return err
		}
		return m.DestroyGPUInstance(0, 2)
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load()
	if err != nil || len(m.State.GPUs["GPU-w"].GIs) != 2 {
		t.Fatalf("after destroy: %+v %v", m, err)
	}
}

func TestSetMigModePendsUntilReset(t *testing.T) {
	writeSetup(t, "")
	var pending bool
	if err := Update(func(m *Machine) (err error) { pending, err = m.SetMigMode(0, true); return }); err != nil || !pending {
		t.Fatalf("pending %v err %v", pending, err)
	}
	m, _ := Load()
	if v := m.View(0); v.MigCurrent || !v.MigPending {
		t.Fatalf("before reset: %+v", v)
	}
	if err := Update(func(m *Machine) error { _, err := m.CreateGPUInstance(0, 19, -1); return err }); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("create without MIG mode: %v", err)
	}
	if err := Update(func(m *Machine) error { return m.ResetGPU(0) }); err != nil {
		t.Fatal(err)
	}
	m, _ = Load()
	if v := m.View(0); !v.MigCurrent || !v.MigPending {
		t.Fatalf("after reset: %+v", v)
	}
}

// A MIG change returns once the driver's files show it (capfiles.go): here a goroutine stands in for the lab's
// renderer and makes the new instances' /proc access files and /dev nodes only after it has seen the state
// change; Update must not return before them. Where no renderer keeps the files (no mig-minors), it waits not.
func TestUpdateReturnsOnceTheCapabilityFilesShowTheChange(t *testing.T) {
	dir := writeSetup(t, `{"boot_id":"boot-2","kmod":"580.178.04","gpus":{"GPU-w":{"mig_current":true,
"mig_pending":true,"persistence":true,"gis":[]}}}`)
	proc, dev := filepath.Join(dir, "proc-driver"), filepath.Join(dir, "dev")
	t.Setenv("GPUREADY_LAB_PROC_DRIVER", proc)
	t.Setenv("GPUREADY_LAB_DEV", dev)
	create := func(m *Machine) error {
		gi, err := m.CreateGPUInstance(0, 9, -1)
		if err == nil {
			_, err = m.CreateComputeInstance(0, gi.ID, 2, -1)
		}
		return err
	}
	if err := Update(create); err != nil { // no renderer: no wait
		t.Fatal(err)
	}
	mkfile := func(path, text string) error { // also from the renderer's goroutine, where t.Fatal may not run
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		return os.WriteFile(path, []byte(text), 0o644)
	}
	if err := mkfile(filepath.Join(proc, "nvidia-caps", "mig-minors"), "config 1\nmonitor 2\n"); err != nil {
		t.Fatal(err)
	}
	rendered := make(chan []string)
	go func() { // the renderer: files for every instance in the state once it holds two GPU instances
		for {
			if m, err := Load(); err == nil && len(m.State.GPUs["GPU-w"].GIs) == 2 {
				var made []string
				for _, c := range m.capFiles() {
					if mkfile(filepath.Join(proc, c.Proc), "DeviceFileMinor: 0\n") == nil &&
						mkfile(capDevice(c.Minor), "") == nil {
						made = append(made, capDevice(c.Minor))
					}
				}
				rendered <- made
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	if err := Update(create); err != nil {
		t.Fatal(err)
	}
	select {
	case made := <-rendered:
		if len(made) != 4 { // two GPU instances with a compute instance each
			t.Fatalf("rendered %v", made)
		}
	default:
		t.Fatal("Update returned before the capability files of the new instances existed")
	}
}

// The first use in a boot records the installed module; a driver_mismatch fault or a container records nothing.
func TestLoadModule(t *testing.T) {
	dir := writeSetup(t, "")
	state := filepath.Join(dir, "state.json")
	firstUse := func() *Machine {
		t.Helper()
		m, err := Load()
		if err != nil {
			t.Fatal(err)
		}
		m.LoadModule()
		return m
	}
	write(t, filepath.Join(dir, "hardware.json"), strings.Replace(writeHW, `"gpus"`,
		`"faults":[{"fault":"m","gpu":null,"effects":{"driver_mismatch":true}}],"gpus"`, 1))
	if firstUse(); fileExists(state) {
		t.Fatal("a driver_mismatch fault loaded the module")
	}
	write(t, filepath.Join(dir, "hardware.json"), writeHW)
	t.Setenv(ContainerDevices, "/dev/nvidia0")
	if firstUse(); fileExists(state) {
		t.Fatal("a container loaded the module")
	}
	os.Unsetenv(ContainerDevices)
	if firstUse(); !fileExists(state) {
		t.Fatal("the first use did not load the module")
	}
	if m := firstUse(); m.State.Kmod == nil || *m.State.Kmod != "580.178.04" || m.State.BootID != "boot-2" {
		t.Fatalf("state after the first use: %+v", m.State)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
