package machine

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

const hw = `{"schema":1,"profile":"a100-80gb-4","system":{"nvswitch":false},
"gpus":[{"index":0,"uuid":"GPU-aaaa","name":"NVIDIA A100-SXM4-80GB","mig_capable":true,"memory_mib":81920,
"reserved_mib":869,"max_pcie_gen":4,"max_pcie_width":16,"row_remapping":true,"compute_capability":"8.0",
"mig_profiles":[{"name":"3g.40gb","profile_id":9,"compute_slices":3,"memory_mib":40192,"sm_count":42}]},
{"index":1,"uuid":"GPU-bbbb","max_pcie_gen":4,"max_pcie_width":16}],
"faults":[%s]}`

func setup(t *testing.T, faults string) string {
	return labDir(t, sprintf(hw, faults), "boot-1")
}

// labDir is a temporary lab directory whose hardware.json holds hardware (no state.json yet), with the
// environment pointing the machine at it: the driver 580.178.04 loaded in boot bootID.
func labDir(t *testing.T, hardware, bootID string) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("GPUREADY_LAB_HARDWARE", filepath.Join(dir, "hardware.json"))
	t.Setenv("GPUREADY_LAB_STATE", filepath.Join(dir, "state.json"))
	t.Setenv("GPUREADY_LAB_BOOT_ID", bootID)
	t.Setenv("GPUREADY_LAB_DRIVER_VERSION", "580.178.04")
	write(t, filepath.Join(dir, "hardware.json"), hardware)
	return dir
}

func sprintf(f, a string) string { return fmt.Sprintf(f, a) }

func write(t *testing.T, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestFaultsAndMig(t *testing.T) {
	dir := setup(t, "")
	write(t, filepath.Join(dir, "state.json"), `{"boot_id":"boot-1","kmod":"580.178.04","gpus":{"GPU-aaaa":
{"mig_current":true,"mig_pending":true,"persistence":true,"gis":[{"id":1,"profile_id":9,"start":4,"size":4,
"cis":[{"id":0,"profile_id":2,"start":0,"size":3}]}]}}}`)
	m, err := Current()
	if err != nil || m.CheckLoaded() != nil {
		t.Fatal(err)
	}
	v := m.View(0)
	if !v.MigCurrent || len(v.MigDevices) != 1 || v.MigDevices[0].GI != 1 || v.MigDevices[0].SMCount != 42 {
		t.Fatalf("mig: %+v", v.MigDevices)
	}
	// Python: "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_OID, "GPU-aaaa/1/0"))
	if got := v.MigDevices[0].UUID; got != "MIG-c56cc3df-3c79-5f45-9138-94c9dfe43c07" {
		t.Fatalf("uuid %s", got)
	}
	if m.OffBus(1) {
		t.Fatal("healthy GPU off bus")
	}
	write(t, filepath.Join(dir, "hardware.json"), sprintf(hw, `{"fault":"a","gpu":1,"effects":{"off_bus":true,"xid":79}},{"fault":"b","gpu":0,"effects":{"pcie_gen_drop":2,"pcie_width_divisor":2}}`))
	m2, _ := Current()
	if m2 == m || !m2.OffBus(1) || len(m2.XIDs(1)) != 1 || m2.XIDs(1)[0] != 79 || m2.View(0).PCIeGen != 2 {
		t.Fatal("fault injected while running not seen")
	}
	write(t, filepath.Join(dir, "hardware.json"), sprintf(hw, `{"fault":"c","gpu":null,"effects":{"driver_mismatch":true}}`))
	m3, _ := Current()
	if m3.CheckLoaded() != ErrMismatch {
		t.Fatal("driver_mismatch fault does not fail init")
	}
	if v := m3.View(0); v.PCIeWidth != 16 || v.BandwidthFactor != 1 || v.OffBus || len(v.XIDs) != 0 {
		t.Fatalf("a host-wide fault changed a GPU: %+v", v)
	}
	write(t, filepath.Join(dir, "hardware.json"), sprintf(hw, `{"fault":"d","gpu":0,"effects":{"xid":48,"ecc_uncorrected":1,"dbe_remapped":1}},{"fault":"e","gpu":0,"effects":{"ecc_uncorrected":2,"bandwidth_factor":0.4}}`))
	m4, _ := Current()
	if v := m4.View(0); v.ECCUncorrected != 3 || v.RemapUncorrectable != 1 || v.BandwidthFactor != 0.4 || v.PCIeWidth != 16 {
		t.Fatalf("combined effects: %+v", v)
	}
}

func TestBootResetsState(t *testing.T) {
	dir := setup(t, "")
	write(t, filepath.Join(dir, "state.json"), `{"boot_id":"boot-0","kmod":"570.1","gpus":{"GPU-aaaa":
{"mig_current":false,"mig_pending":true,"gis":[{"id":1,"profile_id":9,"start":0,"size":4,"cis":[]}]}}}`)
	m, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	v := m.View(0)
	if !v.MigCurrent || len(v.MigDevices) != 0 || m.CheckLoaded() != nil {
		t.Fatalf("reboot: %+v %v", v, m.CheckLoaded())
	}
}

func TestNoHardware(t *testing.T) {
	t.Setenv("GPUREADY_LAB_HARDWARE", filepath.Join(t.TempDir(), "none.json"))
	if _, err := Load(); err != ErrNoDriver {
		t.Fatal(err)
	}
}

// A daemon's pid file seen from a container: its pid is another PID namespace's, so only its lock tells.
func TestAliveByTheDaemonsLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fm.pid")
	write(t, path, "999999999\n")
	if alive(path) {
		t.Fatal("a dead pid without a lock counts as alive")
	}
	held, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := syscall.Flock(int(held.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if !alive(path) {
		t.Fatal("a locked pid file does not count as alive")
	}
}

// nv-hostengine counts as running without a pid file to check; with one, only while its process lives.
func TestHostEngineRunning(t *testing.T) {
	t.Setenv("GPUREADY_LAB_HOSTENGINE_PID", "")
	if !HostEngineRunning() {
		t.Fatal("without GPUREADY_LAB_HOSTENGINE_PID the engine is down")
	}
	path := filepath.Join(t.TempDir(), "nv-hostengine.pid")
	t.Setenv("GPUREADY_LAB_HOSTENGINE_PID", path)
	if HostEngineRunning() {
		t.Fatal("no pid file, yet the engine is up")
	}
	write(t, path, fmt.Sprintf("%d\n", os.Getpid()))
	if !HostEngineRunning() {
		t.Fatal("a live pid, yet the engine is down")
	}
}
