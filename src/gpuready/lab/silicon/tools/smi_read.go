package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"gpuready.lab/silicon/machine"
)

// exitGPULost is nvidia-smi's exit code when a GPU it was asked about fell off the bus.
const exitGPULost = 15

// settingFlags are the options that change the driver state (settings, smi.go); a command line with any of them
// is a settings command, whatever else it has.
var settingFlags = []string{"-c", "--compute-mode", "-mig", "--multi-instance-gpu", "-pm", "--persistence-mode",
	"-r", "--gpu-reset"}

// usageError is a bad command line: nvidia-smi prints the message and the hint and exits 2.
type usageError string

func (e usageError) Error() string { return string(e) }

func usage(err error) int {
	fmt.Printf("%s\n\n%s\n", err, usageHint)
	return exitUsage
}

// smi is nvidia-smi, on the host and in containers alike: the listing (-L), the table, the report (-q, -x, -d;
// smi_report.go), --query-gpu, topo -m, nvlink -s and --version, which read the machine; the settings (smi.go)
// and "mig" (mig.go), which change it. Output, messages and exit codes follow real captures (drivers 570-590):
// gpuready's parsers and checks must not be able to tell it from NVIDIA's.
func smi(args []string) int {
	switch {
	case len(args) > 0 && args[0] == "mig":
		return mig(args[1:])
	case len(args) > 0 && args[0] == "compute-policy":
		return computePolicy(args[1:])
	case slices.ContainsFunc(args, func(a string) bool { return slices.Contains(settingFlags, a) }):
		return settings(args)
	case len(args) > 0 && args[0] == "nvlink":
		return nvlink(args[1:])
	case len(args) > 0 && args[0] == "topo":
		if len(args) < 2 || (args[1] != "-m" && args[1] != "--matrix") {
			return usage(usageError("Invalid combination of input arguments."))
		}
		m, rc := loadDriver()
		if m == nil {
			return rc
		}
		return topo(m)
	}
	var q query
	if err := q.parse(args); err != nil {
		return usage(err)
	}
	m, rc := loadDriver()
	if m == nil {
		return rc
	}
	if q.action == "version" {
		v := m.DriverVersion()
		major, rest, _ := strings.Cut(v, ".")
		minor, _, _ := strings.Cut(rest, ".")
		fmt.Printf("NVIDIA-SMI version  : %s\nNVML version        : %s.%s\nDRIVER version      : %s\n"+
			"CUDA Version        : %s\n", v, major, minor, v, machine.CUDAVersion(v))
		return 0
	}
	gpus, ok := readSelect(m, q.ids)
	if !ok {
		return noDevices()
	}
	switch q.action {
	case "list":
		return list(m, gpus)
	case "query":
		live, lost := splitLost(m, gpus)
		if len(live) == 0 {
			return noDevices()
		}
		for _, g := range lost {
			fmt.Fprint(os.Stderr, lostMessage(g))
		}
		fmt.Print(report(m, views(m, live), q.xml, q.groups))
		return lostCode(lost)
	case "query-gpu":
		if q.format == nil {
			return usage(usageError(`"--format" must be specified with "--query-gpu".`))
		}
		return queryGPU(m, gpus, q.fields, *q.format)
	}
	return table(m, gpus)
}

// query is a command line of the read side but nvlink and topo.
type query struct {
	action string // "table", "list", "query", "query-gpu", "version"
	ids    *string
	xml    bool
	groups []string
	fields string
	format *string
}

func (q *query) parse(args []string) error {
	q.action = "table"
	for i := 0; i < len(args); i++ {
		arg := args[i]
		value := func() (string, error) {
			if i+1 >= len(args) {
				return "", usageError(fmt.Sprintf("Option \"%s\" requires a value.", arg))
			}
			i++
			return args[i], nil
		}
		switch {
		case arg == "-i" || arg == "--id":
			v, err := value()
			if err != nil {
				return err
			}
			q.ids = &v
		case strings.HasPrefix(arg, "--id="):
			v := strings.TrimPrefix(arg, "--id=")
			q.ids = &v
		case arg == "-L" || arg == "--list-gpus":
			q.action = "list"
		case arg == "-q" || arg == "--query":
			q.action = "query"
		case arg == "-x" || arg == "--xml-format":
			q.xml = true
		case arg == "-d" || arg == "--display":
			v, err := value()
			if err != nil {
				return err
			}
			q.groups = nil
			for _, g := range strings.Split(v, ",") {
				g = strings.ToUpper(strings.TrimSpace(g))
				if _, ok := displayGroups[g]; !ok {
					return usageError(fmt.Sprintf("\"%s\" is not a valid display type.", g))
				}
				q.groups = append(q.groups, g)
			}
		case strings.HasPrefix(arg, "--query-gpu="):
			q.action, q.fields = "query-gpu", strings.TrimPrefix(arg, "--query-gpu=")
		case strings.HasPrefix(arg, "--format="):
			v := strings.TrimPrefix(arg, "--format=")
			q.format = &v
		case arg == "--version" || arg == "-v":
			q.action = "version"
		default:
			return usageError(fmt.Sprintf("Invalid combination of input arguments. %s\n%s", usageHint, arg))
		}
	}
	return nil
}

// loadDriver is the machine as NVML init finds it (initDriver), or nil and the exit code after nvidia-smi's
// message.
func loadDriver() (*machine.Machine, int) {
	m, err := initDriver()
	if err != nil {
		return nil, driverFailure(err, "")
	}
	return m, 0
}

// readSelect is -i for the read side: nil is every GPU; an empty -i names none. False when a name matches no GPU,
// or when every GPU is off the bus (nvidia-smi then finds no device at all).
func readSelect(m *machine.Machine, ids *string) ([]*machine.GPU, bool) {
	var gpus []*machine.GPU
	var err error
	switch {
	case ids == nil:
		gpus, err = selectGPUs(m, "")
	case *ids == "":
		err = machine.ErrNotFound
	default:
		gpus, err = selectGPUs(m, *ids)
	}
	if err != nil {
		return nil, false
	}
	all := make([]*machine.GPU, len(m.Hardware.GPUs))
	for i := range m.Hardware.GPUs {
		all[i] = &m.Hardware.GPUs[i]
	}
	if live, _ := splitLost(m, all); len(live) == 0 {
		return nil, false
	}
	return gpus, true
}

func noDevices() int {
	fmt.Println("No devices were found")
	return exitNotFound
}

func splitLost(m *machine.Machine, gpus []*machine.GPU) (live, lost []*machine.GPU) {
	for _, g := range gpus {
		if m.OffBus(g.Index) {
			lost = append(lost, g)
		} else {
			live = append(live, g)
		}
	}
	return live, lost
}

func lostCode(lost []*machine.GPU) int {
	if len(lost) > 0 {
		return exitGPULost
	}
	return 0
}

// lostMessage is what nvidia-smi says of a GPU that fell off the bus.
func lostMessage(g *machine.GPU) string {
	return fmt.Sprintf("Unable to determine the device handle for GPU%s: Unknown Error\n", g.PCIBusID[4:])
}

func views(m *machine.Machine, gpus []*machine.GPU) []*machine.View {
	out := make([]*machine.View, len(gpus))
	for i, g := range gpus {
		out[i] = m.View(g.Index)
	}
	return out
}

// migModes is a GPU's (current, pending) MIG mode as nvidia-smi words it; "N/A" on a GPU without MIG.
func migModes(v *machine.View) (string, string) {
	if !v.GPU.MIGCapable {
		return na, na
	}
	return en(v.MigCurrent), en(v.MigPending)
}

// eachGPU prints each GPU's line ("GPU 0: NAME (UUID: ...)") and then what more calls for, or the message of
// a GPU off the bus, as -L and nvlink -s do; exitGPULost when a GPU was off the bus.
func eachGPU(m *machine.Machine, gpus []*machine.GPU, more func(view *machine.View)) int {
	rc := 0
	for _, g := range gpus {
		if m.OffBus(g.Index) {
			fmt.Print(lostMessage(g))
			rc = exitGPULost
			continue
		}
		fmt.Printf("GPU %d: %s (UUID: %s)\n", g.Index, g.Name, g.UUID)
		more(m.View(g.Index))
	}
	return rc
}

// list is -L: each GPU and its MIG devices.
func list(m *machine.Machine, gpus []*machine.GPU) int {
	return eachGPU(m, gpus, func(view *machine.View) {
		for _, d := range view.MigDevices {
			fmt.Printf("  MIG %-11s Device %2d: (UUID: %s)\n", d.Name, d.Index, d.UUID)
		}
	})
}

// migBAR1 is a MIG device's share of the GPU's BAR1, by its memory slices.
func migBAR1(g *machine.GPU, p machine.MigProfile) int {
	return int(float64(g.BAR1MiB) * float64(p.MemorySlices) / float64(max(g.MIGMemorySlices, 1)))
}

const (
	tableSep  = "+-----------------------------------------+------------------------+----------------------+"
	tableWide = "+-----------------------------------------------------------------------------------------+"
	tableMIG  = "+------------------+----------------------------------+-----------+-----------------------+"
)

// table is nvidia-smi without options.
func table(m *machine.Machine, gpus []*machine.GPU) int {
	live, lost := splitLost(m, gpus)
	if len(live) == 0 {
		return noDevices()
	}
	v := m.DriverVersion()
	lines := []string{
		time.Now().Format(asctimeForm) + "       ",
		tableWide,
		fmt.Sprintf("| NVIDIA-SMI %-23sDriver Version: %-15sCUDA Version: %-9s|", v, v, machine.CUDAVersion(v)),
		tableSep,
		"| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
		"| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
		"|                                         |                        |               MIG M. |",
		"|=========================================+========================+======================|",
	}
	var migRows []string
	anyMIG := false
	for _, g := range live {
		view := m.View(g.Index)
		pm, name := pick(view.Persistence, "On", "Off"), g.Name
		if len(name) > 29 {
			name = name[:26] + "..."
		}
		ecc, util := fmt.Sprint(view.ECCUncorrected), "0%"
		switch {
		case !g.ECCSupported:
			ecc = "N/A"
		case view.MigCurrent:
			ecc = "On"
		}
		if view.MigCurrent {
			util = "N/A"
		}
		mode, _ := migModes(view)
		lines = append(lines,
			fmt.Sprintf("| %3d  %-29s%4s  | %18s Off | %20s |", g.Index, name, pm, g.PCIBusID, ecc),
			fmt.Sprintf("| N/A   %2dC    P0%15dW / %4dW |%8dMiB / %6dMiB | %7s      Default |", g.TemperatureC,
				int(g.PowerIdleW), int(g.PowerLimitW), view.MemoryUsedMiB, view.MemoryTotalMiB, util),
			fmt.Sprintf("|                                         |                        | %20s |", mode),
			tableSep)
		if !view.MigCurrent {
			continue
		}
		anyMIG = true
		for _, d := range view.MigDevices {
			p := d.Profile
			migRows = append(migRows,
				fmt.Sprintf("| %2d  %3d %3d %3d  |%16dMiB / %5dMiB    | %-3d%6d |%3d%4d%5d%5d%5d |", g.Index, d.GI,
					d.CI, d.Index, 12, p.MemoryMiB, d.SMCount, 0, p.CopyEngines, p.Encoders, p.Decoders, p.OFA,
					p.JPEG),
				fmt.Sprintf("|                  |%16dMiB / %5dMiB    |           |                       |", 0,
					migBAR1(g, p)),
				tableMIG)
		}
	}
	lines = append(lines, "")
	if anyMIG {
		lines = append(lines,
			tableWide,
			"| MIG devices:                                                                            |",
			tableMIG,
			"| GPU  GI  CI  MIG |              Shared Memory-Usage |        Vol|        Shared         |",
			"|      ID  ID  Dev |                Shared BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |",
			"|                  |                                  |        ECC|                       |",
			"|==================+==================================+===========+=======================|")
		if len(migRows) > 0 {
			lines = append(lines, migRows...)
		} else {
			lines = append(lines,
				"|  No MIG devices found                                                                   |",
				tableWide)
		}
		lines = append(lines, "")
	}
	lines = append(lines,
		tableWide,
		"| Processes:                                                                              |",
		"|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
		"|        ID   ID                                                               Usage      |",
		"|=========================================================================================|",
		"|  No running processes found                                                             |",
		tableWide)
	for _, g := range lost {
		fmt.Print(lostMessage(g))
	}
	fmt.Println(strings.Join(lines, "\n"))
	return lostCode(lost)
}

// nvlink is "nvlink -s [-i ID]": each GPU's links and their speed.
func nvlink(args []string) int {
	var ids *string
	status := false
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-s", "--status":
			status = true
		case "-i", "--id":
			if i+1 >= len(args) {
				return usage(usageError(fmt.Sprintf("Option \"%s\" requires a value.", args[i])))
			}
			i++
			ids = &args[i]
		default:
			return usage(usageError("Invalid combination of input arguments."))
		}
	}
	if !status {
		return usage(usageError("Invalid combination of input arguments."))
	}
	m, rc := loadDriver()
	if m == nil {
		return rc
	}
	gpus, ok := readSelect(m, ids)
	if !ok {
		return noDevices()
	}
	return eachGPU(m, gpus, func(view *machine.View) {
		g := view.GPU
		switch {
		case view.MigCurrent:
			fmt.Println("Nvlink queries are not supported for Devices in MIG mode")
		case g.NVLinkLinks == 0:
		case view.Effects.NVLinkDown:
			fmt.Println("NVML: Unable to retrieve NVLink information as all links are inActive")
		default:
			for link := range g.NVLinkLinks {
				fmt.Printf("\t Link %d: %g GB/s\n", link, g.NVLinkGbps)
			}
		}
	})
}

const topoLegend = `
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
`

// topo is "topo -m": how each pair of GPUs the driver sees connects, and each GPU's CPU and NUMA affinity.
func topo(m *machine.Machine) int {
	var gpus []*machine.GPU
	for i := range m.Hardware.GPUs {
		if g := &m.Hardware.GPUs[i]; !m.OffBus(g.Index) {
			gpus = append(gpus, g)
		}
	}
	if len(gpus) == 0 {
		return noDevices()
	}
	var head strings.Builder
	for _, g := range gpus {
		fmt.Fprintf(&head, "GPU%d\t", g.Index)
	}
	lines := []string{fmt.Sprintf("\t\x1b[4m%sCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m", head.String())}
	for _, a := range gpus {
		row := []string{fmt.Sprintf("GPU%d", a.Index)}
		for _, b := range gpus {
			links := a.NVLinkLinks
			up := links > 0 && !m.GPUEffects(a.Index).NVLinkDown && !m.GPUEffects(b.Index).NVLinkDown
			switch {
			case a == b:
				row = append(row, " X ")
			case up && m.Hardware.System.NVSwitch:
				row = append(row, fmt.Sprintf("NV%d", links))
			case up && len(gpus) > 1:
				row = append(row, fmt.Sprintf("NV%d", links/(len(m.Hardware.GPUs)-1)))
			case a.NUMANode == b.NUMANode:
				row = append(row, "NODE")
			default:
				row = append(row, "SYS")
			}
		}
		row = append(row, a.CPUAffinity, fmt.Sprint(a.NUMANode))
		lines = append(lines, strings.Join(row, "\t")+"\t\tN/A")
	}
	fmt.Print(strings.Join(lines, "\n") + "\n" + topoLegend)
	return 0
}
