package main

// nvidia-smi -q: one GPU's record as a tree, rendered as text (-q, -d groups) or XML (-q -x). Real nvidia-smi
// prints the same record two ways; building it once keeps the XML element paths and the text labels in step.
// Element order and names follow real captures: DTD v13 (drivers 580 and later) and v12 (570/575).

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gpuready.lab/silicon/machine"
)

const (
	na          = "N/A"
	deprecated  = "Requested functionality has been deprecated"
	labelWidth  = 55
	asctimeForm = "Mon Jan _2 15:04:05 2006"
)

// node is one entry of the record: a leaf (value) or a section (kids, non-nil). where is "x" for XML-only and
// "t" for text-only nodes: the two formats differ in a few places (retired pages, PCI ids, MIG devices).
type node struct {
	tag, label, value string
	kids              []node
	where             string
}

func leaf(tag, label, value string) node { return node{tag: tag, label: label, value: value} }

func section(tag, label string, kids ...node) node {
	return node{tag: tag, label: label, kids: append([]node{}, kids...)}
}

func xmlOnly(n node) node  { n.where = "x"; return n }
func textOnly(n node) node { n.where = "t"; return n }

// escapeXML escapes XML character data (quotes are left alone, as in real captures).
func escapeXML(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func quoteAttr(s string) string { return `"` + strings.ReplaceAll(escapeXML(s), `"`, "&quot;") + `"` }

// pick is yes when flag holds, else no: the value of a conditional as an expression, for the tools' tables.
func pick(flag bool, yes, no string) string {
	if flag {
		return yes
	}
	return no
}

func yn(flag bool) string     { return pick(flag, "Yes", "No") }
func en(flag bool) string     { return pick(flag, "Enabled", "Disabled") }
func active(flag bool) string { return pick(flag, "Active", "Not Active") }

// gpuNodes is GPU view v's record.
func gpuNodes(m *machine.Machine, v *machine.View, v13 bool) []node {
	g := v.GPU
	// a VM's GPU: the host's PCIe generation is not visible through the passed-through function
	passthrough := m.Hardware.System.Virtualization == "Pass-Through"
	// R590 and later deprecate the applications clocks and add the EDPp line (590.48, 595.80 and 610.43
	// captures; 580.159.04 on a lent H200 still prints the clocks and no EDPp line)
	r590 := driverBranch(m.DriverVersion()) >= 590
	c := g.Clocks
	ecc := g.ECCSupported
	eccVal := func(n int) string { return pick(ecc, strconv.Itoa(n), na) }
	mhz := func(n int) string { return fmt.Sprintf("%d MHz", n) }
	mib := func(n int) string { return fmt.Sprintf("%d MiB", n) }
	fabState, fabStatus := m.Fabric()
	bus, dev := g.PCIBusID[9:11], g.PCIBusID[12:14]
	draw := fmt.Sprintf("%.2f W", g.PowerIdleW)
	limit := fmt.Sprintf("%.2f W", g.PowerLimitW)
	temp := g.TemperatureC
	memTemp := 0
	if g.MemoryTemperatureC != nil {
		memTemp = *g.MemoryTemperatureC
	}
	withMemTemp := func(s string) string { return pick(memTemp != 0, s, na) }
	migCur, migPend := migModes(v)

	var migList []node
	for _, d := range v.MigDevices {
		migList = append(migList, section("mig_device", "MIG Device", migDeviceNodes(d, g)...))
	}
	migNodes := leaf("mig_devices", "", "None")
	if len(migList) > 0 {
		migNodes = section("mig_devices", "", migList...)
	}

	retired := retiredNodes(v)

	// The inactive remapped-row counters: every XML report has them; the text report only on the boards whose
	// captures do (H200, L40S), not the H100's (590.48).
	inactive := func(tag, label string) node {
		if g.InactiveRemapRowsText {
			return leaf(tag, label, "0")
		}
		return xmlOnly(leaf(tag, "", "0"))
	}
	remapped := leaf("remapped_rows", "Remapped Rows", na)
	if !v.MigCurrent && g.RowRemapping {
		unc := v.RemapUncorrectable
		banks := fmt.Sprintf("%d bank(s)", cmp.Or(g.RowRemapBanks, 2560)-unc)
		remapped = section("remapped_rows", "Remapped Rows",
			leaf("remapped_row_corr", "Correctable Error", strconv.Itoa(v.RemapCorrectable)),
			inactive("remapped_row_corr_inactive", "Inactive Correctable Error"),
			leaf("remapped_row_unc", "Uncorrectable Error", strconv.Itoa(unc)),
			inactive("remapped_row_unc_inactive", "Inactive Uncorrectable Error"),
			leaf("remapped_row_pending", "Pending", yn(v.RemapPending)),
			leaf("remapped_row_failure", "Remapping Failure Occurred", "No"),
			section("row_remapper_histogram", "Bank Remap Availability Histogram",
				leaf("row_remapper_histogram_max", "Max", banks),
				leaf("row_remapper_histogram_high", "High", fmt.Sprintf("%d bank(s)", unc)),
				leaf("row_remapper_histogram_partial", "Partial", "0 bank(s)"),
				leaf("row_remapper_histogram_low", "Low", "0 bank(s)"),
				leaf("row_remapper_histogram_none", "None", "0 bank(s)"),
			),
		)
	}

	celsius := func(n int) string { return fmt.Sprintf("%d C", n) }
	tlimit := leaf("gpu_temp_tlimit", "GPU T.Limit Temp", celsius(cmp.Or(g.TLimitC, 87)-temp))
	temperature := section("temperature", "Temperature",
		leaf("gpu_temp", "GPU Current Temp", celsius(temp)), tlimit,
		leaf("gpu_temp_max_threshold", "GPU Shutdown Temp", celsius(cmp.Or(g.ShutdownC, 92))),
		leaf("gpu_temp_slow_threshold", "GPU Slowdown Temp", celsius(cmp.Or(g.SlowdownC, 89))),
		leaf("gpu_temp_max_gpu_threshold", "GPU Max Operating Temp", celsius(cmp.Or(g.MaxOperatingC, 85))),
		leaf("gpu_target_temperature", "GPU Target Temperature", na),
		leaf("memory_temp", "Memory Current Temp", withMemTemp(celsius(memTemp))),
		leaf("gpu_temp_max_mem_threshold", "Memory Max Operating Temp", withMemTemp("95 C")),
	)
	if v13 {
		temperature = section("temperature", "Temperature",
			leaf("gpu_temp", "GPU Current Temp", celsius(temp)), tlimit,
			leaf("gpu_temp_max_tlimit_threshold", "GPU Shutdown T.Limit Temp", "-8 C"),
			leaf("gpu_temp_slow_tlimit_threshold", "GPU Slowdown T.Limit Temp", "-2 C"),
			leaf("gpu_temp_max_gpu_tlimit_threshold", "GPU Max Operating T.Limit Temp", "0 C"),
			leaf("gpu_target_temperature", "GPU Target Temperature", na),
			leaf("memory_temp", "Memory Current Temp", withMemTemp(celsius(memTemp))),
			leaf("gpu_temp_max_mem_tlimit_threshold", "Memory Max Operating T.Limit Temp", withMemTemp("0 C")),
		)
	}

	var health []node
	if v13 {
		health = append(health, leaf("summary", "Summary", na))
	}
	health = append(health,
		leaf("bandwidth", "Bandwidth", na),
		leaf("route_recovery_in_progress", "Route Recovery in progress", na),
		leaf("route_unhealthy", "Route Unhealthy", na),
		leaf("access_timeout_recovery", "Access Timeout Recovery", na),
	)
	if v13 {
		health = append(health,
			leaf("incorrect_configuration", "Incorrect Configuration", na),
			leaf("partition_assigned", "Partition Assigned", na))
	}
	joined := fabState != na
	fabric := section("fabric", "Fabric",
		leaf("state", "State", fabState),
		leaf("status", "Status", fabStatus),
		leaf("cliqueId", "CliqueId", pick(joined, "0", na)),
		leaf("clusterUuid", "ClusterUUID", pick(joined, "00000000-0000-0000-0000-000000000000", na)),
		section("health", "Health", health...),
	)

	unc := v.ECCUncorrected
	counts := func(tag, label string, extra ...node) node {
		return section(tag, label, append([]node{
			leaf("sram_correctable", "SRAM Correctable", eccVal(0)),
			leaf("sram_uncorrectable_parity", "SRAM Uncorrectable Parity", eccVal(0)),
			leaf("sram_uncorrectable_secded", "SRAM Uncorrectable SEC-DED", eccVal(0)),
			leaf("dram_correctable", "DRAM Correctable", eccVal(0)),
			leaf("dram_uncorrectable", "DRAM Uncorrectable", eccVal(unc)),
		}, extra...)...)
	}
	eccErrors := []node{
		counts("volatile", "Volatile"),
		counts("aggregate", "Aggregate", leaf("sram_threshold_exceeded", "SRAM Threshold Exceeded", pick(ecc, "No", na))),
		section("aggregate_uncorrectable_sram_sources", "Aggregate Uncorrectable SRAM Sources",
			leaf("sram_l2", "SRAM L2", eccVal(0)),
			leaf("sram_sm", "SRAM SM", eccVal(0)),
			leaf("sram_microcontroller", "SRAM Microcontroller", eccVal(0)),
			leaf("sram_pcie", "SRAM PCIE", eccVal(0)),
			leaf("sram_other", "SRAM Other", eccVal(0)),
		),
	}
	if v13 {
		eccErrors = append(eccErrors,
			leaf("channel_repair_pending", "Channel Repair Pending", "No"),
			leaf("tpc_repair_pending", "TPC Repair Pending", "No"),
			leaf("unrepairable_memory", "Unrepairable Memory", pick(ecc, "No", na)),
		)
	}

	idle := active(true) // the emulated GPUs are always idle
	off := active(false)
	reasons := section("clocks_event_reasons", "Clocks Event Reasons",
		leaf("clocks_event_reason_gpu_idle", "Idle", idle),
		leaf("clocks_event_reason_applications_clocks_setting", "Applications Clocks Setting", off),
		leaf("clocks_event_reason_sw_power_cap", "SW Power Cap", off),
		leaf("clocks_event_reason_hw_slowdown", "HW Slowdown", off),
		leaf("clocks_event_reason_hw_thermal_slowdown", "    HW Thermal Slowdown", off),
		leaf("clocks_event_reason_hw_power_brake_slowdown", "    HW Power Brake Slowdown", off),
		leaf("clocks_event_reason_sync_boost", "Sync Boost", off),
		leaf("clocks_event_reason_sw_thermal_slowdown", "SW Thermal Slowdown", off),
		leaf("clocks_event_reason_display_clocks_setting", "Display Clock Setting", off),
	)

	nodes := []node{
		leaf("product_name", "Product Name", g.Name),
		leaf("product_brand", "Product Brand", g.Brand),
		leaf("product_architecture", "Product Architecture", g.Architecture),
		leaf("display_mode", "Display Mode", pick(v13, deprecated, "Disabled")),
	}
	if v13 {
		nodes = append(nodes, leaf("display_attached", "Display Attached", "No"))
	}
	nodes = append(nodes,
		leaf("display_active", "Display Active", "Disabled"),
		leaf("persistence_mode", "Persistence Mode", en(v.Persistence)),
		leaf("addressing_mode", "Addressing Mode", "None"),
		section("mig_mode", "MIG Mode", leaf("current_mig", "Current", migCur), leaf("pending_mig", "Pending", migPend)),
		xmlOnly(migNodes),
	)
	for _, n := range migList {
		nodes = append(nodes, textOnly(n))
	}
	nodes = append(nodes,
		leaf("accounting_mode", "Accounting Mode", "Disabled"),
		leaf("accounting_mode_buffer_size", "Accounting Mode Buffer Size", "4000"),
		section("driver_model", "Driver Model", leaf("current_dm", "Current", na), leaf("pending_dm", "Pending", na)),
		leaf("serial", "Serial Number", g.Serial),
		leaf("uuid", "GPU UUID", g.UUID),
	)
	if v13 {
		sum := sha256.Sum256([]byte(g.UUID))
		nodes = append(nodes, leaf("pdi", "GPU PDI", "0x"+hex.EncodeToString(sum[:])[:16]))
	}
	busNum, _ := strconv.ParseInt(bus, 16, 64)
	nodes = append(nodes,
		leaf("minor_number", "Minor Number", strconv.Itoa(g.MinorNumber)),
		leaf("vbios_version", "VBIOS Version", g.VBIOSVersion),
		leaf("multigpu_board", "MultiGPU Board", "No"),
		leaf("board_id", "Board ID", fmt.Sprintf("%#x", busNum<<8)),
		leaf("board_part_number", "Board Part Number", g.BoardPartNumber),
		leaf("gpu_part_number", "GPU Part Number", g.GPUPartNumber),
		leaf("gpu_fru_part_number", "FRU Part Number", na),
		section("platformInfo", "Platform Info",
			leaf("chassis_serial_number", "Chassis Serial Number", na),
			leaf("slot_number", "Slot Number", na),
			leaf("tray_index", "Tray Index", na),
			leaf("host_id", "Host ID", na),
			leaf("peer_type", "Peer Type", na),
			leaf("module_id", "Module Id", strconv.Itoa(g.ModuleID)),
			leaf("gpu_fabric_guid", "GPU Fabric GUID", na),
		),
		section("inforom_version", "Inforom Version",
			leaf("img_version", "Image Version", g.InforomImage),
			leaf("oem_object", "OEM Object", "2.1"),
			leaf("ecc_object", "ECC Object", pick(ecc, "7.16", na)),
			leaf("pwr_object", "Power Management Object", na),
		),
		// present in the v12 (570) and v13 captures alike
		section("inforom_bbx_flush", "Inforom BBX Object Flush",
			leaf("latest_timestamp", "Latest Timestamp", na), leaf("latest_duration", "Latest Duration", na)),
		section("gpu_operation_mode", "GPU Operation Mode",
			leaf("current_gom", "Current", na), leaf("pending_gom", "Pending", na)),
		leaf("c2c_mode", "GPU C2C Mode", pick(v13, "Disabled", na)),
		section("gpu_virtualization_mode", "GPU Virtualization Mode",
			leaf("virtualization_mode", "Virtualization Mode", pick(passthrough, "Pass-Through", "None")),
			leaf("host_vgpu_mode", "Host VGPU Mode", na),
			leaf("vgpu_heterogeneous_mode", "vGPU Heterogeneous Mode", na),
		),
	)
	if !v13 {
		nodes = append(nodes, section("gpu_reset_status", "GPU Reset Status",
			leaf("reset_required", "Reset Required", yn(v.RemapPending)),
			leaf("drain_and_reset_recommended", "Drain and Reset Recommended", yn(v.RemapPending)),
		))
	}
	// PCI ids: bare hex in XML, 0x-prefixed in text.
	hexID := func(tag, label, value string) []node {
		return []node{xmlOnly(leaf(tag, label, value)), textOnly(leaf("", label, "0x"+value))}
	}
	maxGen := strconv.Itoa(g.MaxPCIeGen)
	var pci []node
	pci = append(pci, hexID("pci_bus", "Bus", bus)...)
	pci = append(pci, hexID("pci_device", "Device", dev)...)
	pci = append(pci, hexID("pci_domain", "Domain", "0000")...)
	pci = append(pci, hexID("pci_base_class", "Base Classcode", "3")...)
	pci = append(pci, hexID("pci_sub_class", "Sub Classcode", "2")...)
	pci = append(pci, hexID("pci_device_id", "Device Id", g.PCIDeviceID)...)
	pci = append(pci, leaf("pci_bus_id", "Bus Id", g.PCIBusID))
	pci = append(pci, hexID("pci_sub_system_id", "Sub System Id", g.PCISubSystemID)...)
	pci = append(pci,
		section("pci_gpu_link_info", "GPU Link Info",
			section("pcie_gen", "PCIe Generation",
				leaf("max_link_gen", "Max", maxGen),
				leaf("current_link_gen", "Current", strconv.Itoa(v.PCIeGen)),
				leaf("device_current_link_gen", "Device Current", strconv.Itoa(v.PCIeGen)),
				leaf("max_device_link_gen", "Device Max", maxGen),
				leaf("max_host_link_gen", "Host Max", pick(passthrough, na, maxGen)),
			),
			section("link_widths", "Link Width",
				leaf("max_link_width", "Max", fmt.Sprintf("%dx", g.MaxPCIeWidth)),
				leaf("current_link_width", "Current", fmt.Sprintf("%dx", v.PCIeWidth)),
			),
		),
		section("pci_bridge_chip", "Bridge Chip", leaf("bridge_chip_type", "Type", na), leaf("bridge_chip_fw", "Firmware", na)),
		leaf("replay_counter", "Replays Since Reset", "0"),
		leaf("replay_rollover_counter", "Replay Number Rollovers", "0"),
		leaf("tx_util", "Tx Throughput", "0 KB/s"),
		leaf("rx_util", "Rx Throughput", "0 KB/s"),
		leaf("atomic_caps_outbound", "Atomic Caps Outbound", na),
		leaf("atomic_caps_inbound", "Atomic Caps Inbound", na),
	)
	nodes = append(nodes,
		leaf("gpu_recovery_action", "GPU Recovery Action", pick(v.RemapPending, "Reset", "None")),
		leaf("gsp_firmware_version", "GSP Firmware Version", m.DriverVersion()),
		section("ibmnpu", "IBMNPU", leaf("relaxed_ordering_mode", "Relaxed Ordering Mode", na)),
		section("pci", "PCI", pci...),
		leaf("fan_speed", "Fan Speed", na),
		leaf("performance_state", "Performance State", "P0"),
		reasons,
	)
	if v13 {
		nodes = append(nodes, section("clocks_event_reasons_counters", "Clocks Event Reasons Counters",
			leaf("clocks_event_reasons_counters_sw_power_cap", "SW Power Capping", "0 us"),
			leaf("clocks_event_reasons_counters_sync_boost", "Sync Boost", "0 us"),
			leaf("clocks_event_reasons_counters_sw_therm_slowdown", "SW Thermal Slowdown", "0 us"),
			leaf("clocks_event_reasons_counters_hw_therm_slowdown", "HW Thermal Slowdown", "0 us"),
			leaf("clocks_event_reasons_counters_hw_power_brake", "HW Power Braking", "0 us"),
		))
	}
	util := pick(v.MigCurrent, na, "0 %")
	stats := func(tag, label string) node {
		return section(tag, label,
			leaf("session_count", "Active Sessions", "0"),
			leaf("average_fps", "Average FPS", "0"),
			leaf("average_latency", "Average Latency", "0"))
	}
	eccMode := pick(ecc, en(true), na)
	nodes = append(nodes,
		leaf("sparse_operation_mode", "Sparse Operation Mode", "Disabled"),
		section("fb_memory_usage", "FB Memory Usage",
			leaf("total", "Total", mib(v.MemoryTotalMiB)),
			leaf("reserved", "Reserved", mib(v.MemoryReservedMiB)),
			leaf("used", "Used", mib(v.MemoryUsedMiB)),
			leaf("free", "Free", mib(v.MemoryFreeMiB)),
		),
		section("bar1_memory_usage", "BAR1 Memory Usage",
			leaf("total", "Total", mib(g.BAR1MiB)), leaf("used", "Used", "1 MiB"), leaf("free", "Free", mib(g.BAR1MiB-1))),
		section("cc_protected_memory_usage", "Conf Compute Protected Memory Usage",
			leaf("total", "Total", "0 MiB"), leaf("used", "Used", "0 MiB"), leaf("free", "Free", "0 MiB")),
		leaf("compute_mode", "Compute Mode", v.ComputeMode),
		section("utilization", "Utilization",
			leaf("gpu_util", "GPU", util),
			leaf("memory_util", "Memory", util),
			leaf("encoder_util", "Encoder", util),
			leaf("decoder_util", "Decoder", util),
			leaf("jpeg_util", "JPEG", util),
			leaf("ofa_util", "OFA", util),
		),
		stats("encoder_stats", "Encoder Stats"),
		stats("fbc_stats", "FBC Stats"),
		section("dram_encryption_mode", "DRAM Encryption Mode",
			leaf("current_dram_encryption", "Current", na), leaf("pending_dram_encryption", "Pending", na)),
		section("ecc_mode", "ECC Mode", leaf("current_ecc", "Current", eccMode), leaf("pending_ecc", "Pending", eccMode)),
		section("ecc_errors", "ECC Errors", eccErrors...),
		section("retired_pages", "Retired Pages", retired...),
		remapped,
		temperature,
		// XML only: no datacenter capture's text report has it
		xmlOnly(section("supported_gpu_target_temp", "Supported GPU Target Temp",
			leaf("gpu_target_temp_min", "GPU Target Temp Min", na),
			leaf("gpu_target_temp_max", "GPU Target Temp Max", na))),
		powerReadings("gpu_power_readings", "GPU Power Readings", draw, limit,
			fmt.Sprintf("%.2f W", g.MinPowerLimitW)),
		section("gpu_memory_power_readings", "GPU Memory Power Readings ",
			leaf("average_power_draw", "Average Power Draw", na),
			leaf("instant_power_draw", "Instantaneous Power Draw", na)),
		powerReadings("module_power_readings", "Module Power Readings", na, na, na),
		leaf("power_smoothing", "Power Smoothing", na),
		section("power_profiles", "Workload Power Profiles",
			leaf("power_profile_requested_profiles", "Requested Profiles", na),
			leaf("power_profile_enforced_profiles", "Enforced Profiles", na)),
	)
	if r590 {
		nodes = append(nodes, leaf("edpp_multiplier", "EDPp Multiplier", na))
	}
	appClocks := []node{leaf("graphics_clock", "Graphics", deprecated), leaf("mem_clock", "Memory", deprecated)}
	if !r590 {
		appClocks = []node{leaf("graphics_clock", "Graphics", mhz(c.MaxGraphics)), leaf("mem_clock", "Memory", mhz(c.Memory))}
	}
	nodes = append(nodes,
		section("clocks", "Clocks",
			leaf("graphics_clock", "Graphics", mhz(c.GraphicsIdle)),
			leaf("sm_clock", "SM", mhz(c.GraphicsIdle)),
			leaf("mem_clock", "Memory", mhz(c.Memory)),
			leaf("video_clock", "Video", mhz(c.VideoIdle)),
		),
		section("applications_clocks", "Applications Clocks", appClocks...),
		section("default_applications_clocks", "Default Applications Clocks", appClocks...),
		section("deferred_clocks", "Deferred Clocks", leaf("mem_clock", "Memory", na)),
		section("max_clocks", "Max Clocks",
			leaf("graphics_clock", "Graphics", mhz(c.MaxGraphics)),
			leaf("sm_clock", "SM", mhz(c.MaxGraphics)),
			leaf("mem_clock", "Memory", mhz(c.Memory)),
			leaf("video_clock", "Video", mhz(c.MaxVideo)),
		),
		section("max_customer_boost_clocks", "Max Customer Boost Clocks", leaf("graphics_clock", "Graphics", mhz(c.MaxGraphics))),
		section("clock_policy", "Clock Policy",
			leaf("auto_boost", "Auto Boost", na), leaf("auto_boost_default", "Auto Boost Default", na)),
	)
	if !v13 {
		nodes = append(nodes, section("voltage", "Voltage", leaf("graphics_volt", "Graphics", na)))
	}
	return append(nodes,
		fabric,
		xmlOnly(leaf("processes", "Processes", "")),
		textOnly(leaf("", "Processes", "None")),
		xmlOnly(leaf("accounted_processes", "", "")),
		section("capabilities", "Capabilities", leaf("egm", "EGM", "disabled")),
	)
}

// powerReadings is a power section: the GPU's readings, or the module's (N/A on the boards the lab has).
func powerReadings(tag, label, draw, limit, minLimit string) node {
	return section(tag, label,
		xmlOnly(leaf("power_state", "Power State", "P0")),
		leaf("average_power_draw", "Average Power Draw", draw),
		leaf("instant_power_draw", "Instantaneous Power Draw", draw),
		leaf("current_power_limit", "Current Power Limit", limit),
		leaf("requested_power_limit", "Requested Power Limit", limit),
		leaf("default_power_limit", "Default Power Limit", limit),
		leaf("min_power_limit", "Min Power Limit", minLimit),
		leaf("max_power_limit", "Max Power Limit", limit))
}

// retiredNodes are the retired-pages counters (pre-Ampere GPUs with page retirement); XML and text name them
// differently.
func retiredNodes(v *machine.View) []node {
	sbe, dbe, pending, list := na, na, na, na
	if !v.MigCurrent && v.GPU.PageRetirement {
		sbe, dbe, pending, list = strconv.Itoa(v.RetiredSBE), strconv.Itoa(v.RetiredDBE), yn(v.RetiredPending), ""
	}
	return []node{
		xmlOnly(section("multiple_single_bit_retirement", "",
			leaf("retired_count", "", sbe), leaf("retired_pagelist", "", list))),
		xmlOnly(section("double_bit_retirement", "", leaf("retired_count", "", dbe), leaf("retired_pagelist", "", list))),
		xmlOnly(leaf("pending_blacklist", "", pending)),
		xmlOnly(leaf("pending_retirement", "", pending)),
		textOnly(leaf("", "Single Bit ECC", sbe)),
		textOnly(leaf("", "Double Bit ECC", dbe)),
		textOnly(leaf("", "Pending Page Blacklist", pending)),
	}
}

// migDeviceNodes is one MIG device's record.
func migDeviceNodes(d machine.MigDevice, g *machine.GPU) []node {
	p := d.Profile
	mem := p.MemoryMiB
	bar1 := migBAR1(g, p)
	itoa := strconv.Itoa
	return []node{
		leaf("index", "Index", itoa(d.Index)),
		leaf("gpu_instance_id", "GPU Instance ID", itoa(d.GI)),
		leaf("compute_instance_id", "Compute Instance ID", itoa(d.CI)),
		section("device_attributes", "Device Attributes",
			section("shared", "Shared",
				leaf("multiprocessor_count", "Multiprocessor count", itoa(d.SMCount)),
				leaf("copy_engine_count", "Copy Engine count", itoa(p.CopyEngines)),
				leaf("encoder_count", "Encoder count", itoa(p.Encoders)),
				leaf("decoder_count", "Decoder count", itoa(p.Decoders)),
				leaf("ofa_count", "OFA count", itoa(p.OFA)),
				leaf("jpg_count", "JPG count", itoa(p.JPEG)),
			),
		),
		section("ecc_error_count", "ECC Errors",
			section("volatile_count", "Volatile", leaf("sram_uncorrectable", "SRAM Uncorrectable", "0"))),
		section("fb_memory_usage", "Shared FB Memory Usage",
			leaf("total", "Total", fmt.Sprintf("%d MiB", mem)),
			leaf("reserved", "Reserved", "0 MiB"),
			leaf("used", "Used", "12 MiB"),
			leaf("free", "Free", fmt.Sprintf("%d MiB", mem-12)),
		),
		section("bar1_memory_usage", "Shared BAR1 Memory",
			leaf("total", "Total", fmt.Sprintf("%d MiB", bar1)),
			leaf("used", "Used", "0 MiB"),
			leaf("free", "Free", fmt.Sprintf("%d MiB", bar1)),
		),
	}
}

// driverBranch is the driver version's major number (580 of "580.178.04").
func driverBranch(version string) int {
	major, _, _ := strings.Cut(version, ".")
	n, _ := strconv.Atoi(major)
	return n
}

func xmlLines(nodes []node, depth int, out *[]string) {
	pad := strings.Repeat("\t", depth)
	for _, n := range nodes {
		switch {
		case n.where == "t" || n.tag == "":
		case n.kids != nil:
			*out = append(*out, pad+"<"+n.tag+">")
			xmlLines(n.kids, depth+1, out)
			*out = append(*out, pad+"</"+n.tag+">")
		case n.tag == "processes" || n.tag == "accounted_processes":
			*out = append(*out, pad+"<"+n.tag+">", pad+"</"+n.tag+">")
		case n.tag == "mig_devices":
			*out = append(*out, pad+"<"+n.tag+">", pad+"\t"+escapeXML(n.value), pad+"</"+n.tag+">")
		default:
			*out = append(*out, pad+"<"+n.tag+">"+escapeXML(n.value)+"</"+n.tag+">")
		}
	}
}

func textLines(nodes []node, depth int, out *[]string) {
	for _, n := range nodes {
		if n.where == "x" || n.label == "" {
			continue
		}
		indent, label := strings.Repeat("    ", depth), n.label
		if strings.HasPrefix(label, "    ") { // sub-reason lines are indented one more level in real output
			indent, label = indent+"    ", strings.TrimSpace(label)
		}
		if n.kids != nil {
			*out = append(*out, indent+label)
			textLines(n.kids, depth+1, out)
		} else {
			*out = append(*out, labelled(indent+label, n.value))
		}
	}
}

func labelled(label, value string) string { return fmt.Sprintf("%-*s: %s", labelWidth, label, value) }

// displayGroups are the -d groups of `nvidia-smi -q -d ...`, each the top-level sections it shows.
var displayGroups = map[string][]string{
	"MEMORY":      {"FB Memory Usage", "BAR1 Memory Usage", "Conf Compute Protected Memory Usage"},
	"UTILIZATION": {"Utilization"},
	"ECC":         {"ECC Mode", "ECC Errors"},
	"TEMPERATURE": {"Temperature"},
	"POWER":       {"GPU Power Readings", "GPU Memory Power Readings ", "Module Power Readings"},
	"CLOCK": {"Clocks", "Applications Clocks", "Default Applications Clocks", "Deferred Clocks", "Max Clocks",
		"Max Customer Boost Clocks", "Clock Policy"},
	"COMPUTE":                   {"Compute Mode"},
	"PIDS":                      {"Processes"},
	"PERFORMANCE":               {"Performance State", "Clocks Event Reasons", "Clocks Event Reasons Counters", "Sparse Operation Mode"},
	"PAGE_RETIREMENT":           {"Retired Pages"},
	"ROW_REMAPPER":              {"Remapped Rows"},
	"ACCOUNTING":                {"Accounting Mode", "Accounting Mode Buffer Size"},
	"ENCODER_STATS":             {"Encoder Stats"},
	"FBC_STATS":                 {"FBC Stats"},
	"SUPPORTED_GPU_TARGET_TEMP": {"Supported GPU Target Temp"},
	"VOLTAGE":                   {"Voltage"},
	"RESET_STATUS":              {"GPU Reset Status", "GPU Recovery Action"},
	"GSP_FIRMWARE_VERSION":      {"GSP Firmware Version"},
	"POWER_SMOOTHING":           {"Power Smoothing"},
	"POWER_PROFILES":            {"Workload Power Profiles"},
}

// report is `nvidia-smi -q` (xml false) or `nvidia-smi -q -x` (xml true) of views (GPUs on the bus), the text
// form showing only the sections of groups (upper-case, valid -d groups; none: all). It is the whole output.
func report(m *machine.Machine, views []*machine.View, xml bool, groups []string) string {
	version := m.DriverVersion()
	v13 := driverBranch(version) >= 580
	now := time.Now().Format(asctimeForm)
	var out []string
	if xml {
		header, dtd := `<?xml version="1.0"?>`, "nvsmi_device_v12.dtd"
		if v13 {
			header, dtd = `<?xml version="1.0" ?>`, "nvsmi_device_v13.dtd"
		}
		out = append(out, header,
			`<!DOCTYPE nvidia_smi_log SYSTEM "`+dtd+`">`,
			"<nvidia_smi_log>",
			"\t<timestamp>"+now+"</timestamp>",
			"\t<driver_version>"+version+"</driver_version>",
			"\t<cuda_version>"+machine.CUDAVersion(version)+"</cuda_version>",
			fmt.Sprintf("\t<attached_gpus>%d</attached_gpus>", len(m.Hardware.GPUs)),
		)
		for _, v := range views {
			out = append(out, "\t<gpu id="+quoteAttr(v.GPU.PCIBusID)+">")
			xmlLines(gpuNodes(m, v, v13), 2, &out)
			out = append(out, "\t</gpu>", "")
		}
		out = append(out, "</nvidia_smi_log>")
		return strings.Join(out, "\n") + "\n"
	}
	out = append(out, "", "==============NVSMI LOG==============", "",
		labelled("Timestamp", now),
		labelled("Driver Version", version),
		labelled("CUDA Version", machine.CUDAVersion(version)),
		"",
		labelled("Attached GPUs", strconv.Itoa(len(m.Hardware.GPUs))),
	)
	var wanted map[string]bool
	if len(groups) > 0 {
		wanted = map[string]bool{}
		for _, group := range groups {
			for _, label := range displayGroups[group] {
				wanted[label] = true
			}
		}
	}
	for _, v := range views {
		out = append(out, "GPU "+v.GPU.PCIBusID)
		nodes := gpuNodes(m, v, v13)
		if wanted != nil {
			var shown []node
			for _, n := range nodes {
				if wanted[n.label] {
					shown = append(shown, n)
				}
			}
			nodes = shown
		}
		textLines(nodes, 1, &out)
		out = append(out, "")
	}
	return strings.Join(out, "\n") + "\n"
}
