package main

// dcgmi (DCGM 4.x): `dcgmi diag -r 1|2|3|NAMES [-j] [-i GPUS] [-v]` and `dcgmi --version` (installed as
// /usr/bin/dcgmi by the lab's datacenter-gpu-manager-4-core package). The answers follow what DCGM 4.x prints, so
// that gpuready.nvidia.dcgm_diag.parse_diag_json reads the emulator exactly as it reads real captures
// (tests/fixtures/dcgm-diag); the output is dcgmi_render.go's:
//
//   - -j: the DCGM 4 document: "DCGM Diagnostic" -> "test_categories" -> "tests" -> "results" ("entity_group"
//     "GPU", "entity_group_id" 1, "entity_id", "status", "info", "warnings" objects with "error_category",
//     "error_id", "error_severity", "warning") and "test_summary"; "entity_groups" and "metadata" ("Driver
//     Version Detected", "version") beside it. Layout as jsoncpp writes it in the DCGM 4.5.2 captures: tab
//     indents, `"key" : ` with a line break before objects and arrays, keys sorted.
//   - without -j: the table DCGM 4.x prints ("Successfully ran diagnostic for group.", the Metadata block, one row
//     per test with "GPU<n>: <status>" lines, Warning rows wrapped at 45 characters), as seen in NVIDIA/DCGM#253
//     (4.2.3, 4.4.1) and #282 (4.4.1). Per-GPU failure rows and -v Info rows were not seen in a capture and are
//     approximate.
//   - Tests per level (DCGM 4): 1 = software; 2 = + memory, pcie (the level-2 documents of DCGM 4.2.3-4.5.2 hold
//     exactly these three); 3 = + diagnostic, targeted_stress, targeted_power, memory_bandwidth (the DCGM docs'
//     level table; level-3 membership was not checked against a 4.x capture). Named tests (-r memory,pcie) and the
//     aliases quick/short/medium/long work too.
//   - Exit status: 0 when nothing failed (a Warn alone is still 0), 226 when a test failed (DCGM_ST_NVVS_ERROR,
//     -30, as the shell sees it; the DCGM 4.2.3/4.5.2 captures exited 226), 235 when nv-hostengine cannot be
//     reached (DCGM_ST_CONNECTION_NOT_VALID, -21; value from dcgm_structs, not seen in a capture).
//
// Fault effects (gpuready.lab.faults.Effects, read through package machine's View), as real DCGM reports them:
//
//   - the software test checks persistence mode like DCGM does (error 29, the exact wording of the real capture):
//     a host without persistence mode fails it, as real hosts do;
//   - dcgm_memory_fails: the memory test fails on that GPU with DCGM_FR_FAULTY_MEMORY (52) "Found 1 faulty memory
//     elements on GPU <n> Run a field diagnostic on the GPU." (message + next step, the format of the captured
//     warning; category/severity numbers from dcgm_errors.h's enums, the severity chosen by us);
//   - bandwidth_factor (a fraction of the normal copy rate) and pcie_gen_drop/pcie_width_divisor (the link trained
//     below its maximum, View's link, which nvidia-smi reports too): the pcie test fails with DCGM_FR_LOW_BANDWIDTH
//     (30) "Bandwidth of GPU <n> in direction d2h of <x> did not exceed minimum required bandwidth of <y>. ..." for
//     d2h and h2d (directions and wording from DCGM's pcie plugin). The minimum used here is half the theoretical
//     bandwidth of the GPU's maximum link (machine.LinkGBps); DCGM's real per-SKU min_bandwidth values were not
//     looked up;
//   - row_remap_pending: the software test fails with "Page Retirement/Row Remap: GPU <n> had memory errors and
//     row remappings are pending ..." (DCGM_FR_PENDING_ROW_REMAP, 85; the sub-check prefix is assumed from the
//     persistence message's);
//   - off_bus: the GPU is not visible to DCGM: it is left out of the run (and of "entity_groups"); naming only
//     lost GPUs with -i is an error (approximate wording);
//   - driver_mismatch (or no loaded driver, no hardware file): NVML cannot start, so nv-hostengine is not running
//     and dcgmi prints the real connection error ("Error: unable to establish a connection to the specified
//     host: localhost" / "Error: Unable to connect to host engine. Host engine connection
//     invalid/disconnected."). The same happens when GPUREADY_LAB_HOSTENGINE_PID names a pid file whose process
//     is gone (machine.HostEngineRunning).
//
// Measured values (bandwidth, latency, allocated bytes, gigaflops) are plausible fixed fractions of the hardware
// file's figures, not measurements.

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"gpuready.lab/silicon/machine"
)

const dcgmVersion = "4.5.2" // DCGM 4.5.2, the version of the captures it follows (dcgmi and nv-hostengine)

// dcgmi's exit statuses: DCGM's return codes as the shell sees them.
const (
	dcgmExitNVVSError  = 226 // DCGM_ST_NVVS_ERROR (-30)
	dcgmExitConnection = 235 // DCGM_ST_CONNECTION_NOT_VALID (-21)
	dcgmExitGPULost    = 238 // DCGM_ST_GPU_IS_LOST (-18)
	dcgmExitBadParam   = 255 // DCGM_ST_BADPARAM (-1)
)

const dcgmConnectError = "Error: unable to establish a connection to the specified host: localhost\n" +
	"Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"

// dcgmLevels are the tests of each run level, dcgmLevelAliases the levels' names.
var (
	dcgmLevels = map[int][]string{
		1: {"software"},
		2: {"software", "memory", "pcie"},
		3: {"software", "memory", "pcie", "diagnostic", "targeted_stress", "targeted_power", "memory_bandwidth"},
	}
	dcgmLevelAliases = map[string]int{"quick": 1, "short": 1, "medium": 2, "long": 3}
)

// dcgmTests are the tests by name, each with its category; the document lists categories in dcgmCategoryOrder.
var (
	dcgmTests = map[string]struct {
		category string
		run      func(v *machine.View) dcgmResult
	}{
		"software":         {"Deployment", softwareTest},
		"memory":           {"Hardware", memoryTest},
		"diagnostic":       {"Hardware", diagnosticTest},
		"pcie":             {"Integration", pcieTest},
		"targeted_stress":  {"Stress", passTest},
		"targeted_power":   {"Stress", passTest},
		"memory_bandwidth": {"Stress", passTest},
	}
	dcgmCategoryOrder = []string{"Deployment", "Hardware", "Integration", "Stress"}
)

// The pcie test's figures: fractions of the link's theoretical rate a healthy GPU measures, and the least it must.
const (
	healthyD2H, healthyH2D, healthyBidir = 0.86, 0.85, 1.55
	minBandwidthFraction                 = 0.5
)

const systemTriage = "Check DCGM and system logs for errors. Reset GPU. Restart DCGM. Rerun diagnostics."

// dcgmError is one of dcgm_errors.h's errors: its category (8 software other, 10 hardware memory, 1 performance
// threshold), id and severity (1 monitor, 2 isolate, 5 config).
type dcgmError struct{ category, id, severity int }

var (
	errPersistence  = dcgmError{8, 29, 5}
	errRowRemap     = dcgmError{10, 85, 6}
	errFaultyMemory = dcgmError{10, 52, 2}
	errLowBandwidth = dcgmError{1, 30, 1}
)

// dcgmWarning is one warning of a result: the error and its text.
type dcgmWarning struct {
	dcgmError
	text string
}

// dcgmResult is one test's result on one GPU.
type dcgmResult struct {
	gpu      *machine.GPU
	status   string // "Pass", "Fail" (or "Skip", "Warn", which the emulated tests never give)
	warnings []dcgmWarning
	info     []string
}

// dcgmTestRun is one test over the run's GPUs and its summary: the worst status, and with a Fail or Warn every
// GPU's warnings.
type dcgmTestRun struct {
	name            string
	results         []dcgmResult
	status          string
	summaryWarnings []dcgmWarning
}

// dcgmCategoryRun is the tests of one category, in the order they ran.
type dcgmCategoryRun struct {
	name  string
	tests []dcgmTestRun
}

var statusRank = map[string]int{"Skip": 0, "Pass": 1, "Warn": 2, "Fail": 3}

func failedIf(warnings []dcgmWarning) string {
	if len(warnings) > 0 {
		return "Fail"
	}
	return "Pass"
}

func softwareTest(v *machine.View) dcgmResult {
	index := v.GPU.Index
	var warnings []dcgmWarning
	if !v.Persistence {
		warnings = append(warnings, dcgmWarning{errPersistence, fmt.Sprintf("Persistence Mode: Persistence mode "+
			"for GPU %d is disabled. Enable persistence mode by running \"nvidia-smi -i <gpuId> -pm 1 \" as root.",
			index)})
	}
	if v.RemapPending {
		warnings = append(warnings, dcgmWarning{errRowRemap, fmt.Sprintf("Page Retirement/Row Remap: GPU %d had "+
			"memory errors and row remappings are pending %s", index, systemTriage)})
	}
	return dcgmResult{gpu: v.GPU, status: failedIf(warnings), warnings: warnings}
}

func memoryTest(v *machine.View) dcgmResult {
	if v.Effects.DCGMMemoryFails {
		text := fmt.Sprintf("Found 1 faulty memory elements on GPU %d Run a field diagnostic on the GPU.", v.GPU.Index)
		return dcgmResult{gpu: v.GPU, status: "Fail", warnings: []dcgmWarning{{errFaultyMemory, text}}}
	}
	free := int64(v.GPU.MemoryMiB-v.GPU.ReservedMiB) * 1024 * 1024
	return dcgmResult{gpu: v.GPU, status: "Pass", info: []string{
		fmt.Sprintf("Allocated %d bytes (87.5%%)", int64(float64(free)*0.875)),
	}}
}

func pcieTest(v *machine.View) dcgmResult {
	rate := machine.LinkGBps(v.PCIeGen, v.PCIeWidth) * v.BandwidthFactor
	d2h, h2d, bidir := rate*healthyD2H, rate*healthyH2D, rate*healthyBidir
	minimum := machine.LinkGBps(v.GPU.MaxPCIeGen, v.GPU.MaxPCIeWidth) * minBandwidthFraction
	var warnings []dcgmWarning
	for _, d := range []struct {
		direction string
		value     float64
	}{{"d2h", d2h}, {"h2d", h2d}} {
		if d.value < minimum {
			warnings = append(warnings, dcgmWarning{errLowBandwidth, fmt.Sprintf("Bandwidth of GPU %d in direction "+
				"%s of %.2f did not exceed minimum required bandwidth of %.2f. Verify that your minimum bandwidth "+
				"setting is appropriate for the topology of each GPU. If so, and errors are consistent, please run a "+
				"field diagnostic.", v.GPU.Index, d.direction, d.value, minimum)})
		}
	}
	return dcgmResult{gpu: v.GPU, status: failedIf(warnings), warnings: warnings, info: []string{
		fmt.Sprintf("GPU to Host bandwidth:\t\t%.2f GB/s", d2h),
		fmt.Sprintf("Host to GPU bandwidth:\t\t%.2f GB/s", h2d),
		fmt.Sprintf("bidirectional bandwidth:\t%.2f GB/s", bidir),
		"GPU to Host latency:\t\t1.563 us",
		"Host to GPU latency:\t\t1.740 us",
		"bidirectional latency:\t\t3.078 us",
	}}
}

func diagnosticTest(v *machine.View) dcgmResult {
	flops := cmp.Or(v.GPU.SMCount, 100) * 390 // a rough FP64-ish figure; only its presence matters
	return dcgmResult{gpu: v.GPU, status: "Pass", info: []string{
		fmt.Sprintf("GPU %d calculated at approximately %.2f gigaflops during this test", v.GPU.Index, float64(flops)),
	}}
}

func passTest(v *machine.View) dcgmResult { return dcgmResult{gpu: v.GPU, status: "Pass"} }

// runDiag runs the named tests on the GPUs, grouped by category in DCGM's category order.
func runDiag(m *machine.Machine, gpus []*machine.GPU, names []string) []dcgmCategoryRun {
	byCategory := map[string][]dcgmTestRun{}
	for _, name := range names {
		test := dcgmTests[name]
		run := dcgmTestRun{name: name, status: "Skip"}
		for _, g := range gpus {
			r := test.run(m.View(g.Index))
			run.results = append(run.results, r)
			if statusRank[r.status] > statusRank[run.status] {
				run.status = r.status
			}
		}
		if run.status == "Fail" || run.status == "Warn" {
			run.summaryWarnings = []dcgmWarning{}
			for _, r := range run.results {
				run.summaryWarnings = append(run.summaryWarnings, r.warnings...)
			}
		}
		byCategory[test.category] = append(byCategory[test.category], run)
	}
	var out []dcgmCategoryRun
	for _, c := range dcgmCategoryOrder {
		if tests, ok := byCategory[c]; ok {
			out = append(out, dcgmCategoryRun{c, tests})
		}
	}
	return out
}

// errDcgmUsage is a command line dcgmi refuses: "Error: <message>" on stderr, exit 255.
type errDcgmUsage string

func (e errDcgmUsage) Error() string { return string(e) }

func dcgmi(args []string) int {
	rc, err := dcgmiCommand(args)
	var usage errDcgmUsage
	if errors.As(err, &usage) {
		fmt.Fprintf(os.Stderr, "Error: %s\n", usage)
		return dcgmExitBadParam
	}
	return rc
}

func dcgmiCommand(args []string) (int, error) {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-v") {
		fmt.Printf("\ndcgmi  version: %s\n\n", dcgmVersion)
		return 0, nil
	}
	if len(args) > 0 && args[0] == "diag" {
		return diag(args[1:])
	}
	return 0, errDcgmUsage("this emulated dcgmi supports 'dcgmi diag -r <level> [-j] [-i <gpus>]' and " +
		"'dcgmi --version'")
}

// diagOptions is a `dcgmi diag` command line.
type diagOptions struct {
	run     *string
	ids     []string // -i's entities, nil without -i
	json    bool
	verbose bool
}

func parseDiag(args []string) (diagOptions, error) {
	var o diagOptions
	for i := 0; i < len(args); i++ {
		arg := args[i]
		value := func() (string, error) {
			if i+1 >= len(args) {
				return "", errDcgmUsage("Missing a value for argument: " + arg)
			}
			i++
			return args[i], nil
		}
		switch arg {
		case "-r", "--run":
			run, err := value()
			if err != nil {
				return o, err
			}
			o.run = &run
		case "-i", "--entity-id", "--gpuList":
			list, err := value()
			if err != nil {
				return o, err
			}
			if o.ids, err = entityIDs(list); err != nil {
				return o, err
			}
		case "-j", "--json":
			o.json = true
		case "-v", "--verbose":
			o.verbose = true
		case "-p", "--parameters", "-c", "--configfile", "--host", "--iterations", "--timeout":
			if _, err := value(); err != nil { // accepted; the emulated tests take no parameters
				return o, err
			}
		default:
			return o, errDcgmUsage("Couldn't find match for argument: " + arg)
		}
	}
	if o.run == nil {
		return o, errDcgmUsage("Required argument missing: run")
	}
	return o, nil
}

// entityIDs are the GPUs of a DCGM entity list ("0,1", "gpu:0,gpu:1").
func entityIDs(list string) ([]string, error) {
	var ids []string
	for _, token := range strings.Split(list, ",") {
		token = strings.TrimSpace(token)
		if len(token) >= 4 && strings.EqualFold(token[:4], "gpu:") {
			token = token[4:]
		}
		if token != "" {
			ids = append(ids, strings.TrimSpace(token))
		}
	}
	if len(ids) == 0 {
		return nil, errDcgmUsage(fmt.Sprintf("Invalid entity list '%s'", list))
	}
	return ids, nil
}

// testsFor is the tests -r names: a level, its alias, or test names (the software test only as part of a level).
func testsFor(run string) ([]string, error) {
	run = strings.ToLower(strings.TrimSpace(run))
	if run != "" && strings.Trim(run, "0123456789") == "" {
		level, err := strconv.Atoi(run)
		tests, ok := dcgmLevels[level]
		if err != nil || !ok {
			return nil, errDcgmUsage(fmt.Sprintf("Invalid run level %s: this emulator runs levels 1-3", run))
		}
		return tests, nil
	}
	if level, ok := dcgmLevelAliases[run]; ok {
		return dcgmLevels[level], nil
	}
	var names, unknown []string
	for _, name := range strings.Split(run, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		name = strings.ReplaceAll(name, " ", "_")
		names = append(names, name)
		if _, ok := dcgmTests[name]; !ok || name == "software" {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 || len(names) == 0 {
		return nil, errDcgmUsage("Requested test(s) not found: " + cmp.Or(strings.Join(unknown, ", "), run))
	}
	return names, nil
}

func diag(args []string) (int, error) {
	o, err := parseDiag(args)
	if err != nil {
		return 0, err
	}
	names, err := testsFor(*o.run)
	if err != nil {
		return 0, err
	}
	// nv-hostengine runs only where NVML initialises: without it dcgmi cannot connect.
	m, err := openDriver()
	if err != nil || !machine.HostEngineRunning() {
		fmt.Print(dcgmConnectError)
		return dcgmExitConnection, nil
	}
	chosen := make([]*machine.GPU, 0, len(m.Hardware.GPUs))
	if o.ids == nil {
		for i := range m.Hardware.GPUs {
			chosen = append(chosen, &m.Hardware.GPUs[i])
		}
	}
	for _, id := range o.ids {
		g := findGPU(m, id)
		if g == nil {
			fmt.Printf("Error: Invalid entity id '%s'. Use 'dcgmi discovery -l' to list GPUs.\n", id)
			return dcgmExitBadParam, nil
		}
		chosen = append(chosen, g)
	}
	gpus := slices.DeleteFunc(slices.Clone(chosen), func(g *machine.GPU) bool { return m.OffBus(g.Index) })
	if len(gpus) == 0 {
		entities := make([]string, len(chosen))
		for i, g := range chosen {
			entities[i] = strconv.Itoa(g.Index)
		}
		fmt.Printf("Error: Unable to complete diagnostic for entities %s. Return: (-18) : GPU is lost\n",
			strings.Join(entities, ","))
		return dcgmExitGPULost, nil
	}
	categories := runDiag(m, gpus, names)
	if o.json {
		fmt.Print(diagJSON(m, gpus, categories))
	} else {
		fmt.Print(diagTable(m, gpus, categories, o.verbose))
	}
	for _, c := range categories {
		for _, t := range c.tests {
			if t.status == "Fail" {
				return dcgmExitNVVSError, nil
			}
		}
	}
	return 0, nil
}
