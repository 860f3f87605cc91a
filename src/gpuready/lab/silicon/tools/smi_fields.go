package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"gpuready.lab/silicon/machine"
)

// field is one --query-gpu property: its unit (printed in the header and after the value unless "nounits")
// and its value.
type field struct{ unit, value string }

// fieldAliases are the other spellings nvidia-smi accepts for a property; the header names the canonical one.
var fieldAliases = map[string]string{
	"gpu_name": "name", "gpu_serial": "serial", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id", "id": "index",
	"pcie.link.gen.gpu_current":                   "pcie.link.gen.gpucurrent",
	"clocks_throttle_reasons.active":              "clocks_event_reasons.active",
	"clocks_throttle_reasons.supported":           "clocks_event_reasons.supported",
	"clocks_throttle_reasons.gpu_idle":            "clocks_event_reasons.gpu_idle",
	"clocks_throttle_reasons.hw_slowdown":         "clocks_event_reasons.hw_slowdown",
	"clocks_throttle_reasons.sw_power_cap":        "clocks_event_reasons.sw_power_cap",
	"clocks_throttle_reasons.hw_thermal_slowdown": "clocks_event_reasons.hw_thermal_slowdown",
	"clocks_throttle_reasons.sw_thermal_slowdown": "clocks_event_reasons.sw_thermal_slowdown",
	"clocks.gr":      "clocks.current.graphics",
	"clocks.sm":      "clocks.current.sm",
	"clocks.mem":     "clocks.current.memory",
	"clocks.max.gr":  "clocks.max.graphics",
	"clocks.max.mem": "clocks.max.memory",
}

func canonical(name string) string {
	if c, ok := fieldAliases[name]; ok {
		return c
	}
	return name
}

// gpuFields are GPU view's properties by the names and units `nvidia-smi --help-query-gpu` lists.
func gpuFields(m *machine.Machine, view *machine.View) map[string]field {
	g := view.GPU
	na := "[N/A]"
	pick := func(ok bool, yes, no string) string {
		if ok {
			return yes
		}
		return no
	}
	yesNo := func(b bool) string { return pick(b, "Yes", "No") }
	rowOK := g.RowRemapping && !view.MigCurrent
	retOK := g.PageRetirement && !view.MigCurrent
	util := pick(view.MigCurrent, na, "0")
	ecc := pick(g.ECCSupported, fmt.Sprint(view.ECCUncorrected), na)
	migCur, migPend := migModes(view)
	fabState, fabStatus := m.Fabric()
	bus, dev := g.PCIBusID[9:11], g.PCIBusID[12:14]
	c := g.Clocks
	watts := func(w float64) field { return field{"W", fmt.Sprintf("%.2f", w)} }
	mib := func(n int) field { return field{"MiB", fmt.Sprint(n)} }
	mhz := func(n int) field { return field{"MHz", fmt.Sprint(n)} }
	plain := func(s string) field { return field{"", s} }
	gen, maxGen := fmt.Sprint(view.PCIeGen), fmt.Sprint(g.MaxPCIeGen)
	memTemp := "N/A"
	if g.MemoryTemperatureC != nil && *g.MemoryTemperatureC != 0 {
		memTemp = fmt.Sprint(*g.MemoryTemperatureC)
	}
	out := map[string]field{
		"timestamp":                plain(time.Now().Format("2006/01/02 15:04:05.000")),
		"driver_version":           plain(m.DriverVersion()),
		"count":                    plain(fmt.Sprint(len(m.Hardware.GPUs))),
		"name":                     plain(g.Name),
		"serial":                   plain(g.Serial),
		"uuid":                     plain(g.UUID),
		"pci.bus_id":               plain(g.PCIBusID),
		"pci.domain":               plain("0x0000"),
		"pci.bus":                  plain("0x" + bus),
		"pci.device":               plain("0x" + dev),
		"pci.device_id":            plain("0x" + g.PCIDeviceID),
		"pci.sub_device_id":        plain("0x" + g.PCISubSystemID),
		"pcie.link.gen.current":    plain(gen),
		"pcie.link.gen.gpucurrent": plain(gen),
		"pcie.link.gen.max":        plain(maxGen),
		"pcie.link.gen.gpumax":     plain(maxGen),
		"pcie.link.gen.hostmax":    plain(maxGen),
		"pcie.link.width.current":  plain(fmt.Sprint(view.PCIeWidth)),
		"pcie.link.width.max":      plain(fmt.Sprint(g.MaxPCIeWidth)),
		"index":                    plain(fmt.Sprint(g.Index)),
		"display_mode":             plain("[Requested functionality has been deprecated]"),
		"display_active":           plain("Disabled"),
		"persistence_mode":         plain(pick(view.Persistence, "Enabled", "Disabled")),
		"accounting.mode":          plain("Disabled"),
		"vbios_version":            plain(g.VBIOSVersion),
		"gpu_recovery_action":      plain(pick(view.RemapPending, "Reset", "None")),
		"fan.speed":                {"%", na},
		"pstate":                   plain("P0"),
		// an idle GPU: its clocks are held down by the idle reason only
		"clocks_event_reasons.supported":       plain("0x00000000000001FF"),
		"clocks_event_reasons.active":          plain("0x0000000000000001"),
		"clocks_event_reasons.gpu_idle":        plain("Active"),
		"memory.total":                         mib(view.MemoryTotalMiB),
		"memory.reserved":                      mib(view.MemoryReservedMiB),
		"memory.used":                          mib(view.MemoryUsedMiB),
		"memory.free":                          mib(view.MemoryFreeMiB),
		"compute_mode":                         plain(view.ComputeMode),
		"compute_cap":                          plain(g.ComputeCapability),
		"utilization.gpu":                      {"%", util},
		"utilization.memory":                   {"%", util},
		"ecc.mode.current":                     plain(pick(g.ECCSupported, "Enabled", na)),
		"ecc.mode.pending":                     plain(pick(g.ECCSupported, "Enabled", na)),
		"ecc.errors.corrected.volatile.total":  plain(pick(g.ECCSupported, "0", na)),
		"ecc.errors.corrected.aggregate.total": plain(pick(g.ECCSupported, "0", na)),
		"retired_pages.single_bit_ecc.count":   plain(pick(retOK, fmt.Sprint(view.RetiredSBE), na)),
		"retired_pages.double_bit.count":       plain(pick(retOK, fmt.Sprint(view.RetiredDBE), na)),
		"retired_pages.pending":                plain(pick(retOK, yesNo(view.RetiredPending), na)),
		"remapped_rows.correctable":            plain(pick(rowOK, fmt.Sprint(view.RemapCorrectable), na)),
		"remapped_rows.uncorrectable":          plain(pick(rowOK, fmt.Sprint(view.RemapUncorrectable), na)),
		"remapped_rows.pending":                plain(pick(rowOK, yesNo(view.RemapPending), na)),
		"remapped_rows.failure":                plain(pick(rowOK, "No", na)),
		"temperature.gpu":                      plain(fmt.Sprint(g.TemperatureC)),
		"temperature.memory":                   plain(memTemp),
		"power.management":                     plain("[Requested functionality has been deprecated]"),
		"power.draw":                           watts(g.PowerIdleW),
		"power.draw.average":                   watts(g.PowerIdleW),
		"power.draw.instant":                   watts(g.PowerIdleW),
		"power.limit":                          watts(g.PowerLimitW),
		"enforced.power.limit":                 watts(g.PowerLimitW),
		"power.default_limit":                  watts(g.PowerLimitW),
		"power.min_limit":                      watts(g.MinPowerLimitW),
		"power.max_limit":                      watts(g.PowerLimitW),
		"clocks.current.graphics":              mhz(c.GraphicsIdle),
		"clocks.current.sm":                    mhz(c.GraphicsIdle),
		"clocks.current.memory":                mhz(c.Memory),
		"clocks.current.video":                 mhz(c.VideoIdle),
		"clocks.max.graphics":                  mhz(c.MaxGraphics),
		"clocks.max.sm":                        mhz(c.MaxGraphics),
		"clocks.max.memory":                    mhz(c.Memory),
		"mig.mode.current":                     plain(strings.Replace(migCur, "N/A", na, 1)),
		"mig.mode.pending":                     plain(strings.Replace(migPend, "N/A", na, 1)),
		"fabric.state":                         plain(fabState),
		"fabric.status":                        plain(fabStatus),
	}
	for _, reason := range []string{"applications_clocks_setting", "sw_power_cap", "hw_slowdown",
		"hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown", "sync_boost"} {
		out["clocks_event_reasons."+reason] = plain("Not Active")
	}
	for _, kind := range []string{"volatile", "aggregate"} {
		for _, part := range []string{"dram", "device_memory", "total"} {
			out["ecc.errors.uncorrected."+kind+"."+part] = plain(ecc)
		}
	}
	return out
}

// queryGPU is --query-gpu=FIELDS --format=csv[,noheader][,nounits].
func queryGPU(m *machine.Machine, gpus []*machine.GPU, fieldsArg, format string) int {
	opts := strings.Split(format, ",")
	for i := range opts {
		opts[i] = strings.TrimSpace(opts[i])
	}
	valid := opts[0] == "csv"
	for _, o := range opts {
		valid = valid && (o == "csv" || o == "noheader" || o == "nounits")
	}
	if !valid {
		fmt.Printf("\"%s\" is not a valid format.\n%s\n", format, usageHint)
		return exitUsage
	}
	var names []string
	for _, name := range strings.Split(fieldsArg, ",") {
		if name = strings.TrimSpace(name); name != "" {
			names = append(names, name)
		}
	}
	sample := gpuFields(m, m.View(m.Hardware.GPUs[0].Index))
	for _, name := range names {
		if _, ok := sample[canonical(name)]; !ok {
			fmt.Printf("Field \"%s\" is not a valid field to query.\n\n%s\n", name, usageHint)
			return exitUsage
		}
	}
	live, lost := splitLost(m, gpus)
	if len(live) == 0 {
		return noDevices()
	}
	var lines []string
	if !slices.Contains(opts, "noheader") {
		var header []string
		for _, name := range names {
			f := sample[canonical(name)]
			header = append(header, canonical(name)+pick(f.unit != "", " ["+f.unit+"]", ""))
		}
		lines = append(lines, strings.Join(header, ", "))
	}
	for _, g := range gpus {
		if m.OffBus(g.Index) {
			lines = append(lines, strings.TrimSuffix(lostMessage(g), "\n"))
			continue
		}
		values := gpuFields(m, m.View(g.Index))
		var row []string
		for _, name := range names {
			f := values[canonical(name)]
			if f.unit != "" && f.value != "[N/A]" && !slices.Contains(opts, "nounits") {
				row = append(row, f.value+" "+f.unit)
			} else {
				row = append(row, f.value)
			}
		}
		lines = append(lines, strings.Join(row, ", "))
	}
	fmt.Println(strings.Join(lines, "\n"))
	return lostCode(lost)
}
