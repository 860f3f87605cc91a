package machine

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Two GPUs (minors 0 and 1) in MIG mode; GPU 1 has an XID fault. GPU 1 holds GI 1 (CIs 0 and 1) and GI 2 (CI 0).
const containHW = `{"schema":1,"gpus":[
{"index":0,"minor_number":0,"uuid":"GPU-a","mig_capable":true,"memory_mib":81920},
{"index":1,"minor_number":1,"uuid":"GPU-b","mig_capable":true,"memory_mib":81920,"mig_profiles":[
{"name":"3g.40gb","profile_id":9,"compute_slices":3,"memory_slices":4,"max_instances":2,"placements":[0,4],"placement_size":4}]}],
"faults":[{"fault":"a","gpu":1,"effects":{"xid":79,"off_bus":true}},{"fault":"b","gpu":null,"effects":{"fabric_failed":true}}]}`

const containState = `{"boot_id":"boot-1","kmod":"580.178.04","gpus":{
"GPU-a":{"mig_current":true,"mig_pending":true,"persistence":false,"gis":[]},
"GPU-b":{"mig_current":true,"mig_pending":true,"persistence":false,"gis":[
{"id":1,"profile_id":9,"start":0,"size":4,"cis":[{"id":0,"profile_id":1,"start":0,"size":1},{"id":1,"profile_id":1,"start":1,"size":1}]},
{"id":2,"profile_id":9,"start":4,"size":4,"cis":[{"id":0,"profile_id":2,"start":0,"size":3}]}]}}}`

// A container given GPU 1's GI 1 and its CI 1 only.
func containSetup(t *testing.T, nodes string) string {
	dir := labDir(t, containHW, "boot-1")
	write(t, filepath.Join(dir, "state.json"), containState)
	t.Setenv(ContainerDevices, nodes)
	return dir
}

func gpu1Nodes(extra string) string {
	return "/dev/nvidiactl,/dev/nvidia1," + capNode(GIMinor(1, 1)) + "," + capNode(CIMinor(1, 1, 1)) + extra
}

func TestContainerSeesOnlyItsGPUsInstancesAndFaults(t *testing.T) {
	containSetup(t, gpu1Nodes(""))
	m, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.GPUs()) != 1 || m.GPUs()[0].UUID != "GPU-b" || m.GPUs()[0].Index != 0 || m.GPUs()[0].MinorNumber != 1 {
		t.Fatalf("GPUs %+v", m.GPUs())
	}
	// GPU 1's fault is the container's GPU 0's; the host-wide fault stays
	if !m.OffBus(0) || len(m.XIDs(0)) != 1 || !m.HostEffects().FabricFailed {
		t.Fatalf("faults %+v", m.Hardware.Faults)
	}
	v := m.View(0)
	if len(v.MigDevices) != 1 || v.MigDevices[0].GI != 1 || v.MigDevices[0].CI != 1 || v.MigDevices[0].Index != 0 {
		t.Fatalf("MIG devices %+v", v.MigDevices)
	}
	if m.MigConfigAllowed() {
		t.Fatal("a container without the config capability may change MIG")
	}
	if _, err := m.CreateGPUInstance(0, 9, -1); !errors.Is(err, ErrNoPermission) {
		t.Fatalf("create GI in a container: %v", err)
	}
}

func readState(t *testing.T, dir string) GPUState {
	raw, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st State
	if err := json.Unmarshal(raw, &st); err != nil || len(st.GPUs) != 2 {
		t.Fatalf("state %s: %v", raw, err)
	}
	return st.GPUs["GPU-b"]
}

func TestAContainersChangeKeepsTheInstancesItCouldNotSee(t *testing.T) {
	dir := containSetup(t, gpu1Nodes(""))
	if err := Update(func(m *Machine) error { return m.SetComputeMode(0, ComputeModeProhibited) }); err != nil {
		t.Fatal(err)
	}
	b := readState(t, dir)
	if b.ComputeMode != ComputeModeProhibited || len(b.GIs) != 2 || len(b.GIs[0].CIs) != 2 {
		t.Fatalf("state %+v", b)
	}
}

func TestTheMigMonitorCapabilitySeesEveryInstanceAndChangesNone(t *testing.T) {
	containSetup(t, "/dev/nvidiactl,/dev/nvidia1,"+capNode(monitorCapMinor))
	m, err := Load()
	if err != nil || len(m.View(0).MigDevices) != 3 || m.MigConfigAllowed() {
		t.Fatalf("%v: allowed %v, %+v", err, m.MigConfigAllowed(), m.View(0).MigDevices)
	}
}

func TestTheMigConfigCapabilitySeesAndChangesEveryInstance(t *testing.T) {
	dir := containSetup(t, "/dev/nvidiactl,/dev/nvidia1,"+capNode(configCapMinor))
	err := Update(func(m *Machine) error {
		if !m.MigConfigAllowed() || len(m.View(0).MigDevices) != 3 {
			t.Fatalf("config capability: allowed %v, %+v", m.MigConfigAllowed(), m.View(0).MigDevices)
		}
		return m.DestroyComputeInstance(0, 1, 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	b := readState(t, dir)
	if len(b.GIs) != 2 || len(b.GIs[0].CIs) != 1 || b.GIs[0].CIs[0].ID != 0 || len(b.GIs[1].CIs) != 1 {
		t.Fatalf("instances %+v", b.GIs)
	}
}

func TestNoDeviceNodesNoGPUs(t *testing.T) {
	containSetup(t, "")
	m, err := Load()
	if err != nil || len(m.GPUs()) != 0 || !m.HostEffects().FabricFailed {
		t.Fatalf("%v %+v", err, m.Hardware)
	}
}
