package main

// nvbandwidth (NVIDIA/nvbandwidth v0.8), the copy-engine testcases the diag layer runs: it prints what the
// real tool prints, with -j (jsoncpp 1.9.5's toStyledString: tab indents, keys sorted, every non-empty array
// one element per line, doubles with 17 significant digits) or as plain text; matrix cells are C++
// operator<< doubles (6 significant digits) in JSON and %.2f in text.
//
// The devices are those cuInit finds (package cudadev: GPUs off the bus missing, later ordinals moving up; the
// device nodes this process has) and the figures are the copy rates the mock libcuda.so.1 times copies by
// (machine/bandwidth.go), so a CUDA program measuring its own copies on the same machine reads the same
// numbers. Where cuInit fails (driver mismatch, no device, an NVSwitch fabric not up) it prints
// nvbandwidth's CU_ASSERT message and exits 1.
//
// Not emulated (a message on stderr and exit 2, so nobody mistakes it for a measurement): running every
// testcase (no -t), -l, -p and testcases other than the four copy-engine ones in nvbwDescriptions.

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"gpuready.lab/silicon/cudadev"
	"gpuready.lab/silicon/machine"
)

const (
	nvbwVersion       = "v0.8"
	nvbwGitVersion    = "v0.8"                             // `git describe --always --tags` of a release checkout
	nvbwSourceFile    = "/opt/nvbandwidth/nvbandwidth.cpp" // __FILE__ as the emulated build saw it
	nvbwCuInitLine    = 270                                // line of CU_ASSERT(cuInit(0)) in v0.8's nvbandwidth.cpp
	nvbwDefaultBuffer = 512                                // MiB
	nvbwNotEmulated   = 2
)

// nvbwTestcases are v0.8's testcases in createTestcases() order: -t takes a name or this index.
var nvbwTestcases = []string{
	"host_to_device_memcpy_ce", "device_to_host_memcpy_ce",
	"host_to_device_bidirectional_memcpy_ce", "device_to_host_bidirectional_memcpy_ce",
	"device_to_device_memcpy_read_ce", "device_to_device_memcpy_write_ce",
	"device_to_device_bidirectional_memcpy_read_ce", "device_to_device_bidirectional_memcpy_write_ce",
	"all_to_host_memcpy_ce", "all_to_host_bidirectional_memcpy_ce",
	"host_to_all_memcpy_ce", "host_to_all_bidirectional_memcpy_ce",
	"all_to_one_write_ce", "all_to_one_read_ce", "one_to_all_write_ce", "one_to_all_read_ce",
	"host_to_device_memcpy_sm", "device_to_host_memcpy_sm",
	"host_to_device_bidirectional_memcpy_sm", "device_to_host_bidirectional_memcpy_sm",
	"device_to_device_memcpy_read_sm", "device_to_device_memcpy_write_sm",
	"device_to_device_bidirectional_memcpy_read_sm", "device_to_device_bidirectional_memcpy_write_sm",
	"all_to_host_memcpy_sm", "all_to_host_bidirectional_memcpy_sm",
	"host_to_all_memcpy_sm", "host_to_all_bidirectional_memcpy_sm",
	"all_to_one_write_sm", "all_to_one_read_sm", "one_to_all_write_sm", "one_to_all_read_sm",
	"host_device_latency_sm", "device_to_device_latency_sm", "device_local_copy",
}

// nvbwDescriptions: the emulated testcases and the line nvbandwidth prints above each matrix (testcases_ce.cpp).
var nvbwDescriptions = map[string]string{
	"host_to_device_memcpy_ce":         "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
	"device_to_host_memcpy_ce":         "memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)",
	"device_to_device_memcpy_read_ce":  "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
	"device_to_device_memcpy_write_ce": "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)",
}

const nvbwUsage = `nvbandwidth CLI:
  -h [ --help ]                  Produce help message
  -b [ --bufferSize ] arg (=512) Memcpy buffer size in MiB
  -l [ --list ]                  List available testcases
  -t [ --testcase ] arg          Testcase(s) to run (by name or index)
  -p [ --testcasePrefixes ] arg  Testcase(s) to run (by prefix))
  -v [ --verbose ]               Verbose output
  -s [ --skipVerification ]      Skips data verification after copy
  -d [ --disableAffinity ]       Disable automatic CPU affinity control
  -i [ --testSamples ] arg (=3)  Iterations of the benchmark
  -m [ --useMean ]               Use mean instead of median for results
  -j [ --json ]                  Print output in json format instead of plain
                                 text.
`

const nvbwSmallBuffer = "NOTE: You have chosen a buffer size that is smaller than the default buffer size. It is " +
	"suggested to use the default buffer size (64MB) to achieve maximal peak bandwidth."

// ---- command line (boost::program_options rules) -------------------------------------------------

var nvbwLong = map[string]string{
	"--help": "h", "--bufferSize": "b", "--list": "l", "--testcase": "t", "--testcasePrefixes": "p",
	"--verbose": "v", "--skipVerification": "s", "--disableAffinity": "d", "--testSamples": "i",
	"--useMean": "m", "--json": "j", "--loopCount": "loopCount", "--perfFormatter": "perfFormatter",
}

var nvbwFlags = map[string]bool{"h": true, "l": true, "v": true, "s": true, "d": true, "m": true, "j": true,
	"perfFormatter": true}

type nvbwOptions struct {
	flags   map[string]bool
	numbers map[string]int
	lists   map[string][]string
}

func (o nvbwOptions) has(key string) bool {
	_, number := o.numbers[key]
	_, list := o.lists[key]
	return o.flags[key] || number || list
}

// parseNvbwArgs reads the options as nvbandwidth's parser does; ok is false where boost would throw.
func parseNvbwArgs(argv []string) (nvbwOptions, bool) {
	o := nvbwOptions{flags: map[string]bool{}, numbers: map[string]int{}, lists: map[string][]string{}}
	for i := 0; i < len(argv); i++ {
		arg := argv[i]
		var key, value string
		hasValue := false
		switch {
		case strings.HasPrefix(arg, "--"):
			name, v, found := strings.Cut(arg, "=")
			k, known := nvbwLong[name]
			if !known {
				return o, false
			}
			key, value, hasValue = k, v, found && v != ""
		case len(arg) >= 2 && arg[0] == '-' && strings.ContainsRune("hbltpvsdimj", rune(arg[1])):
			key, value, hasValue = arg[1:2], arg[2:], len(arg) > 2
		default:
			return o, false // boost: a positional argument nobody declared
		}
		if o.has(key) {
			return o, false
		}
		switch {
		case nvbwFlags[key]:
			if hasValue {
				// -jv: boost's unix style lets short flags stick together
				if strings.HasPrefix(arg, "--") || strings.Trim(value, "hlvsdmj") != "" {
					return o, false
				}
				for _, c := range value {
					if o.flags[string(c)] {
						return o, false
					}
					o.flags[string(c)] = true
				}
			}
			o.flags[key] = true
		case key == "t" || key == "p": // multitoken: everything up to the next option
			var values []string
			if hasValue {
				values = append(values, value)
			}
			for i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "-") {
				values = append(values, argv[i+1])
				i++
			}
			if len(values) == 0 {
				return o, false
			}
			o.lists[key] = values
		default:
			if !hasValue {
				if i+1 >= len(argv) {
					return o, false
				}
				value = argv[i+1]
				i++
			}
			n, err := strconv.Atoi(value)
			if err != nil || strings.ContainsAny(value, "+-") {
				return o, false
			}
			o.numbers[key] = n
		}
	}
	return o, true
}

// ---- the figures -----------------------------------------------------------------------------------

type nvbwRun struct {
	m       *machine.Machine
	devices []cudadev.Device
}

// matrix is the testcase's rows of GB/s (NaN: N/A), or nil where nvbandwidth waives it.
func (r nvbwRun) matrix(testcase string) [][]float64 {
	switch testcase {
	case "host_to_device_memcpy_ce", "device_to_host_memcpy_ce":
		direction := "d2h"
		if testcase == "host_to_device_memcpy_ce" {
			direction = "h2d"
		}
		row := make([]float64, len(r.devices))
		for i, d := range r.devices {
			row[i] = r.m.HostGBps(d.GPU.Index, direction)
		}
		return [][]float64{row}
	}
	// device_to_device_memcpy_read_ce: the row reads from the column; _write_ce: the row writes to the column
	read := strings.HasSuffix(testcase, "_read_ce")
	rows, reachable := make([][]float64, len(r.devices)), false
	for a, da := range r.devices {
		rows[a] = make([]float64, len(r.devices))
		for b, db := range r.devices {
			rows[a][b] = math.NaN()
			if a == b {
				continue
			}
			dst, src := da.GPU.Index, db.GPU.Index
			if !read {
				dst, src = src, dst
			}
			if rate, ok := r.m.PeerGBps(dst, src); ok {
				rows[a][b], reachable = rate, true
			}
		}
	}
	if !reachable {
		return nil // filterHasAccessiblePeerPairs: no pair at all
	}
	return rows
}

// deviceInfo is getDeviceDisplayInfo() per ordinal: name and PCI domain:bus:device in lower-case hex.
func (r nvbwRun) deviceInfo() []string {
	out := make([]string, len(r.devices))
	for i, d := range r.devices {
		parts := strings.SplitN(d.GPU.PCIBusID, ":", 3)
		domain, _ := strconv.ParseUint(parts[0], 16, 64)
		bus, _ := strconv.ParseUint(parts[1], 16, 64)
		dev, _ := strconv.ParseUint(strings.SplitN(parts[2], ".", 2)[0], 16, 64)
		out[i] = fmt.Sprintf("%s (%08x:%02x:%02x)", d.Name, domain, bus, dev)
	}
	return out
}

// summary is sum, min, max and average exactly as nvbandwidth folds N/A cells in (as 0.0).
func summary(matrix [][]float64) (total, low, high, average float64) {
	low, high = math.MaxFloat64, 2.2250738585072014e-308 // DBL_MAX, DBL_MIN
	count := 0
	for _, row := range matrix {
		for _, v := range row {
			if math.IsNaN(v) {
				v = 0
			}
			total += v
			low, high = min(low, v), max(high, v)
			if v > 0 {
				count++
			}
		}
	}
	if count == 0 {
		return total, low, high, math.NaN()
	}
	return total, low, high, total / float64(count)
}

type nvbwCase struct {
	given, name string // name "" where nvbandwidth finds no testcase for the token
}

// resolveTestcases maps -t tokens to testcases (by index when a number); err names one that is not emulated.
func resolveTestcases(tokens []string) ([]nvbwCase, error) {
	var out []nvbwCase
	for _, token := range tokens {
		c := nvbwCase{given: token}
		if index, err := strconv.Atoi(token); err == nil {
			if index >= 0 && index < len(nvbwTestcases) {
				c.name = nvbwTestcases[index]
			}
		} else {
			for _, name := range nvbwTestcases {
				if name == token {
					c.name = name
				}
			}
		}
		out = append(out, c)
	}
	emulated := make([]string, 0, len(nvbwDescriptions))
	for _, name := range nvbwTestcases {
		if _, ok := nvbwDescriptions[name]; ok {
			emulated = append(emulated, name)
		}
	}
	for _, c := range out {
		if _, ok := nvbwDescriptions[c.name]; c.name != "" && !ok {
			return nil, fmt.Errorf("testcase %s is not emulated (emulated: %s)", c.name, strings.Join(emulated, ", "))
		}
	}
	return out, nil
}

func hostname() string {
	name, _ := os.Hostname()
	return name
}

func (r nvbwRun) json(cases []nvbwCase, o nvbwOptions) map[string]any {
	var devices []any
	for n, info := range r.deviceInfo() {
		devices = append(devices, fmt.Sprintf("%d: %s: (%s)", n, info, hostname()))
	}
	body := map[string]any{
		"version":              nvbwVersion,
		"git_version":          nvbwGitVersion,
		"CUDA Runtime Version": r.m.CUDADriverVersion(),
		"Driver Version":       r.m.DriverVersion(),
		"GPU Device list":      devices,
	}
	if b, ok := o.numbers["b"]; ok && b < nvbwDefaultBuffer {
		body["warning"] = nvbwSmallBuffer
	}
	testcases := []any{}
	for _, c := range cases {
		if c.name == "" {
			testcases = append(testcases, map[string]any{"name": c.given, "status": "ERROR"})
			continue
		}
		matrix := r.matrix(c.name)
		if matrix == nil {
			testcases = append(testcases, map[string]any{"name": c.name, "status": "Waived"})
			continue
		}
		var rows []any
		for _, row := range matrix {
			var cells []any
			for _, v := range row {
				if math.IsNaN(v) {
					cells = append(cells, "N/A")
				} else {
					cells = append(cells, strconv.FormatFloat(v, 'g', 6, 64))
				}
			}
			rows = append(rows, cells)
		}
		total, low, high, average := summary(matrix)
		entry := map[string]any{
			"name":                  c.name,
			"status":                "Passed",
			"bandwidth_description": nvbwDescriptions[c.name],
			"bandwidth_matrix":      rows,
			"sum":                   total,
		}
		if o.flags["v"] {
			entry["min"], entry["max"], entry["average"] = low, high, average
		}
		testcases = append(testcases, entry)
	}
	body["testcases"] = testcases
	return map[string]any{"nvbandwidth": body}
}

func (r nvbwRun) text(cases []nvbwCase, o nvbwOptions) string {
	cuda := r.m.CUDADriverVersion()
	lines := []string{"nvbandwidth Version: " + nvbwVersion, "Built from Git version: " + nvbwGitVersion, ""}
	if b, ok := o.numbers["b"]; ok && b < nvbwDefaultBuffer {
		lines = append(lines, nvbwSmallBuffer)
	}
	lines = append(lines, fmt.Sprintf("CUDA Runtime Version: %d", cuda), fmt.Sprintf("CUDA Driver Version: %d", cuda),
		"Driver Version: "+r.m.DriverVersion(), "", hostname())
	for n, info := range r.deviceInfo() {
		lines = append(lines, fmt.Sprintf("Device %d: %s", n, info))
	}
	lines = append(lines, "")
	for _, c := range cases {
		if c.name == "" {
			if _, err := strconv.Atoi(c.given); err == nil {
				lines = append(lines, "ERROR: Testcase index "+c.given+" out of bound!")
			} else {
				lines = append(lines, "ERROR: Testcase "+c.given+" not found!")
			}
			continue
		}
		matrix := r.matrix(c.name)
		if matrix == nil {
			lines = append(lines, "Waived: ")
			continue
		}
		lines = append(lines, "Running "+c.name+".", nvbwDescriptions[c.name])
		var head strings.Builder
		head.WriteString("  ")
		for col := range matrix[0] {
			fmt.Fprintf(&head, "%10d", col)
		}
		lines = append(lines, head.String())
		for n, row := range matrix {
			var line strings.Builder
			fmt.Fprintf(&line, "%2d", n)
			for _, v := range row {
				if math.IsNaN(v) {
					fmt.Fprintf(&line, "%10s", "N/A")
				} else {
					fmt.Fprintf(&line, "%10.2f", v)
				}
			}
			lines = append(lines, line.String())
		}
		total, low, high, average := summary(matrix)
		lines = append(lines, "", fmt.Sprintf("SUM %s %.2f", c.name, total))
		if o.flags["v"] {
			lines = append(lines, fmt.Sprintf("MIN %s %.2f", c.name, low), fmt.Sprintf("MAX %s %.2f", c.name, high),
				fmt.Sprintf("AVG %s %.2f", c.name, average))
		}
		lines = append(lines, "")
	}
	lines = append(lines, "NOTE: The reported results may not reflect the full capabilities of the platform.",
		"Performance can vary with software drivers, hardware clocks, and system topology.", "")
	return strings.Join(lines, "\n") + "\n"
}

func nvbandwidth(argv []string) int {
	banner := "nvbandwidth Version: " + nvbwVersion + "\nBuilt from Git version: " + nvbwGitVersion + "\n\n"
	o, ok := parseNvbwArgs(argv)
	if !ok {
		// before -j takes effect: plain text on stdout, whatever the flags
		var given strings.Builder
		for _, a := range append([]string{"nvbandwidth"}, argv...) {
			given.WriteString(a + " ")
		}
		fmt.Printf("%sERROR: Invalid Arguments \n%s:\n\n%s\n", banner, given.String(), nvbwUsage)
		return 1
	}
	asJSON := o.flags["j"]
	if o.flags["h"] {
		if !asJSON { // the help goes through OUTPUT, which -j silences
			fmt.Printf("%s%s\n", banner, nvbwUsage)
		}
		return 0
	}
	var cases []nvbwCase
	var err error
	switch {
	case o.flags["l"] || o.has("p"):
		err = fmt.Errorf("-l and -p are not emulated; name testcases with -t")
	case !o.has("t"):
		err = fmt.Errorf("running every testcase is not emulated; name testcases with -t")
	default:
		cases, err = resolveTestcases(o.lists["t"])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "nvbandwidth (gpuready lab emulator): %v\n", err)
		return nvbwNotEmulated
	}
	m, devices, result := cudadev.Enumerate()
	if result != cudadev.Success {
		message := fmt.Sprintf("[%s] %s in expression cuInit(0) in int main(int, char**)() : %s:%d\n",
			cudadev.Names[result], cudadev.Texts[result], nvbwSourceFile, nvbwCuInitLine)
		if asJSON {
			doc := map[string]any{"version": nvbwVersion, "git_version": nvbwGitVersion, "error": message}
			fmt.Print(styledJSON(map[string]any{"nvbandwidth": doc}) + "\n")
		} else {
			fmt.Print(banner)
			fmt.Fprint(os.Stderr, message+"\n")
		}
		return 1
	}
	run := nvbwRun{m: m, devices: devices}
	if asJSON {
		fmt.Print(styledJSON(run.json(cases, o)) + "\n")
	} else {
		fmt.Print(run.text(cases, o))
	}
	return 0
}
