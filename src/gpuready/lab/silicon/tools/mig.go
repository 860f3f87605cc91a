package main

// nvidia-smi mig: list and change MIG GPU and compute instances, in the real tool's tables and messages (checked
// byte for byte against real A100 captures by tests/unit/test_emulator.py). The placement rules, instance
// numbering and state are package machine's, which the mock NVML's nvmlDeviceCreateGpuInstance and friends use
// too: one implementation, whichever way a lab host or NVIDIA's tools change MIG.

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"gpuready.lab/silicon/machine"
)

const (
	migHelp = "Invalid combination of input arguments. Please run 'nvidia-smi mig -h' for help."
	lgipSep = "+-----------------------------------------------------------------------------+"
	lgiSep  = "+-------------------------------------------------------+"
	lciSep  = "+--------------------------------------------------------------------+"
	lcipSep = "+--------------------------------------------------------------------------------------+"
)

const lgipHead = lgipSep + `
| GPU instance profiles:                                                      |
| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                              Free/Total   GiB              CE    JPEG  OFA  |
|=============================================================================|
`

const lgiHead = lgiSep + `
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
`

const lciHead = lciSep + `
| Compute instances:                                                 |
| GPU     GPU       Name             Profile   Instance   Placement  |
|       Instance                       ID        ID       Start:Size |
|         ID                                                         |
|====================================================================|
`

const lcipHead = lcipSep + `
| Compute instance profiles:                                                           |
| GPU     GPU       Name             Profile  Instances   Exclusive       Shared       |
|       Instance                       ID     Free/Total     SM       DEC   ENC   OFA  |
|         ID                                                          CE    JPEG       |
|======================================================================================|
`

// migFlags: the listing and destroying flags, long and short, by action.
var migFlags = map[string]string{
	"-lgip": "lgip", "--list-gpu-instance-profiles": "lgip",
	"-lgipp": "lgipp", "--list-gpu-instance-possible-placements": "lgipp",
	"-lgi": "lgi", "--list-gpu-instances": "lgi",
	"-lci": "lci", "--list-compute-instances": "lci",
	"-lcip": "lcip", "--list-compute-instance-profiles": "lcip",
	"-dgi": "dgi", "--destroy-gpu-instance": "dgi",
	"-dci": "dci", "--destroy-compute-instance": "dci",
}

// ciProfileBySlices is NVML_COMPUTE_INSTANCE_PROFILE_* by compute slices, the inverse of machine.CISlicesByProfile.
var ciProfileBySlices = func() map[int]int {
	out := map[int]int{}
	for id, slices := range machine.CISlicesByProfile {
		out[slices] = id
	}
	return out
}()

type migArgs struct {
	action, spec, ids string
	gis, cis          map[int]bool // -gi / -ci filters; nil: all
	withCI            bool
}

// failure is a message nvidia-smi mig prints and its exit code.
type failure struct {
	text string
	code int
}

func (f failure) Error() string { return f.text }

func notFound(what string) failure {
	return failure{fmt.Sprintf("No %s found: Not Found", what), exitNotFound}
}

func mig(args []string) int {
	a, err := parseMig(args)
	if err == nil {
		err = runMig(a)
	}
	var f failure
	if errors.As(err, &f) {
		fmt.Println(f.text)
		return f.code
	}
	if err != nil {
		return driverFailure(err, "Unable to change MIG instances: Insufficient Permissions")
	}
	return 0
}

func parseMig(args []string) (migArgs, error) {
	var a migArgs
	var gis, cis string
	for i := 0; i < len(args); i++ {
		arg, next := args[i], ""
		if i+1 < len(args) {
			next = args[i+1]
		}
		switch {
		case migFlags[arg] != "":
			a.action = migFlags[arg]
		case arg == "-cgi" || arg == "--create-gpu-instance":
			if i+1 >= len(args) {
				return a, failure{fmt.Sprintf("Option \"%s\" requires a value.", arg), exitUsage}
			}
			a.action, a.spec, i = "cgi", next, i+1
		case arg == "-cci" || arg == "--create-compute-instance":
			a.action = "cci"
			if next != "" && !strings.HasPrefix(next, "-") {
				a.spec, i = next, i+1
			}
		case arg == "-C" || arg == "--default-compute-instance":
			a.withCI = true
		case arg == "-i" || arg == "--id":
			a.ids, i = next, i+1
		case arg == "-gi" || arg == "--gpu-instance-id":
			gis, i = next, i+1
		case arg == "-ci" || arg == "--compute-instance-id":
			cis, i = next, i+1
		default:
			return a, failure{migHelp, exitUsage}
		}
	}
	if a.action == "" {
		return a, failure{migHelp, exitUsage}
	}
	var err error
	if a.gis, err = idFilter(gis); err == nil {
		a.cis, err = idFilter(cis)
	}
	return a, err
}

// idFilter is a -gi/-ci value: comma-separated ids, nil when the option is absent.
func idFilter(value string) (map[int]bool, error) {
	if value == "" {
		return nil, nil
	}
	out := map[int]bool{}
	for _, tok := range strings.Split(value, ",") {
		if tok = strings.TrimSpace(tok); tok == "" {
			continue
		}
		n, err := strconv.Atoi(tok)
		if err != nil {
			return nil, failure{migHelp, exitUsage}
		}
		out[n] = true
	}
	return out, nil
}

func runMig(a migArgs) error {
	m, err := machine.Load()
	if err == nil {
		err = m.CheckLoaded()
	}
	if err != nil {
		return err
	}
	if strings.HasPrefix(a.action, "l") {
		gpus, err := migGPUs(m, a.ids)
		if err != nil {
			return err
		}
		return listMig(m, gpus, a)
	}
	if !m.MigConfigAllowed() {
		return machine.ErrNoPermission // a container without the MIG configuration capability
	}
	var result error
	err = machine.Update(func(m *machine.Machine) error {
		gpus, err := migGPUs(m, a.ids)
		if err == nil {
			err = changeMig(m, gpus, a)
		}
		result = err
		return nil // what was done before a failure stays done
	})
	if err != nil {
		return err
	}
	return result
}

// migGPUs are the GPUs -i names that are in MIG mode now and on the bus.
func migGPUs(m *machine.Machine, ids string) ([]*machine.GPU, error) {
	none := failure{"No MIG-enabled devices found.", exitNotFound}
	chosen, err := selectGPUs(m, ids)
	if err != nil {
		return nil, none
	}
	var out []*machine.GPU
	for _, g := range chosen {
		if v := m.View(g.Index); !v.OffBus && v.MigCurrent {
			out = append(out, g)
		}
	}
	if len(out) == 0 {
		return nil, none
	}
	return out, nil
}

// instances are the GPU's instances by id (descending: destroying goes from the last), within the -gi filter.
func instances(m *machine.Machine, g *machine.GPU, filter map[int]bool, descending bool) []machine.GPUInstance {
	var out []machine.GPUInstance
	for _, gi := range m.State.GPUs[g.UUID].GIs {
		if filter == nil || filter[gi.ID] {
			out = append(out, gi)
		}
	}
	sort.Slice(out, func(i, j int) bool { return (out[i].ID < out[j].ID) != descending })
	return out
}

func listMig(m *machine.Machine, gpus []*machine.GPU, a migArgs) error {
	var b strings.Builder
	row := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	for _, g := range gpus {
		switch a.action {
		case "lgip":
			gis := m.State.GPUs[g.UUID].GIs
			for i := range g.MIGProfiles { // the catalogue keeps the driver's -lgip order
				p := &g.MIGProfiles[i]
				free := fmt.Sprintf("%d/%d", machine.FreeCount(g, gis, p), p.MaxInstances)
				row("|%4d  MIG %-13s%3d     %-11s%-11.2f%-7s%-7d%-6d%-4d|", g.Index, p.Name, p.ProfileID, free,
					p.MemoryGiB, "No", p.SMCount, p.Decoders, p.Encoders)
				row("|%60s%2d%5s%-6d%-4d|", "", p.CopyEngines, "", p.JPEG, p.OFA)
				row(lgipSep)
			}
		case "lgipp":
			for _, p := range g.MIGProfiles {
				starts := make([]string, len(p.Placements))
				for i, s := range p.Placements {
					starts[i] = strconv.Itoa(s)
				}
				word := "Placement :"
				if len(p.Placements) > 1 {
					word = "Placements:"
				}
				row("GPU %2d Profile ID %2d %s {%s}:%d", g.Index, p.ProfileID, word, strings.Join(starts, ","),
					p.PlacementSize)
			}
		case "lgi":
			for _, gi := range instances(m, g, a.gis, false) {
				p := g.Profile(gi.ProfileID)
				row("|%4d  MIG %-15s%3d%9d%10s%-8s|", g.Index, p.Name, p.ProfileID, gi.ID, "",
					fmt.Sprintf("%d:%d", gi.Start, gi.Size))
				row(lgiSep)
			}
		case "lci":
			for _, gi := range instances(m, g, a.gis, false) {
				p := g.Profile(gi.ProfileID)
				cis := append([]machine.ComputeInstance(nil), gi.CIs...)
				sort.Slice(cis, func(i, j int) bool { return cis[i].ID < cis[j].ID })
				for _, ci := range cis {
					row("|%4d%7d       MIG %-15s%3d%10d%10s%-8s|", g.Index, gi.ID, machine.CIName(p, ci.Size),
						ci.ProfileID, ci.ID, "", fmt.Sprintf("%d:%d", ci.Start, ci.Size))
					row(lciSep)
				}
			}
		case "lcip":
			for _, gi := range instances(m, g, a.gis, false) {
				p := g.Profile(gi.ProfileID)
				for _, slices := range []int{1, 2, 3, 4, 6, 7, 8} { // -lcip's order
					if _, ok := machine.CISlices(p, ciProfileBySlices[slices]); !ok {
						continue
					}
					id := strconv.Itoa(ciProfileBySlices[slices])
					if slices == p.ComputeSlices {
						id += "*"
					}
					free := fmt.Sprintf("%d/%d", len(machine.FreeCIStarts(p, gi, slices)),
						len(machine.CIStarts(p, slices)))
					row("|%4d%7d       MIG %-17s%-7s%-9s%7d%9d%6d%6d   |", g.Index, gi.ID, machine.CIName(p, slices), id,
						free, p.SMCount*slices/p.ComputeSlices, p.Decoders, p.Encoders, p.OFA)
					row("|%62s%9d%6d%9s|", "", p.CopyEngines, p.JPEG, "")
					row(lcipSep)
				}
			}
		}
	}
	heads := map[string]string{"lgip": lgipHead, "lgi": lgiHead, "lci": lciHead, "lcip": lcipHead}
	switch {
	case b.Len() > 0 || a.action == "lgip" || a.action == "lgipp":
	case a.action == "lci":
		return notFound("compute instances")
	default:
		return notFound("GPU instances")
	}
	fmt.Print(heads[a.action] + b.String())
	return nil
}

// findProfile is a -cgi token: a profile id, or a name with or without "MIG ".
func findProfile(g *machine.GPU, token string) *machine.MigProfile {
	token = strings.TrimSpace(token)
	name := token
	if strings.HasPrefix(strings.ToUpper(token), "MIG ") {
		name = token[4:]
	}
	for i := range g.MIGProfiles {
		p := &g.MIGProfiles[i]
		if id, err := strconv.Atoi(token); (err == nil && id == p.ProfileID) || name == p.Name {
			return p
		}
	}
	return nil
}

// reason is the NVML error text nvidia-smi mig prints for a failed change.
func reason(err error) string {
	switch {
	case errors.Is(err, machine.ErrInsufficientResources):
		return "Insufficient Resources"
	case errors.Is(err, machine.ErrInUse):
		return "In use by another client"
	}
	return "Not Found"
}

func code(err error) int {
	if reason(err) == "Not Found" {
		return exitNotFound
	}
	return exitOther
}

func changeMig(m *machine.Machine, gpus []*machine.GPU, a migArgs) error {
	switch a.action {
	case "cgi":
		return createGIs(m, gpus, a)
	case "cci":
		return createCIs(m, gpus, a)
	case "dci":
		return destroyCIs(m, gpus, a)
	}
	return destroyGIs(m, gpus, a)
}

func createGIs(m *machine.Machine, gpus []*machine.GPU, a migArgs) error {
	for _, g := range gpus {
		for _, token := range strings.Split(a.spec, ",") {
			if strings.TrimSpace(token) == "" {
				continue
			}
			p := findProfile(g, token)
			var gi machine.GPUInstance
			err := machine.ErrNotFound
			if p != nil {
				token = strconv.Itoa(p.ProfileID)
				gi, err = m.CreateGPUInstance(g.Index, p.ProfileID, -1)
			}
			if err != nil {
				return failure{fmt.Sprintf("Unable to create a GPU instance on GPU %2d using profile %s: %s\n"+
					"Failed to create GPU instances: %s", g.Index, token, reason(err), reason(err)), code(err)}
			}
			fmt.Printf("Successfully created GPU instance ID %2d on GPU %2d using profile MIG %s (ID %2d)\n",
				gi.ID, g.Index, p.Name, p.ProfileID)
			if a.withCI {
				if err := createCI(m, g, gi, ciProfileBySlices[p.ComputeSlices]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// createCI creates a compute instance of NVML compute instance profile id in GPU instance gi and says so.
func createCI(m *machine.Machine, g *machine.GPU, gi machine.GPUInstance, id int) error {
	ci, err := m.CreateComputeInstance(g.Index, gi.ID, id, -1)
	if err != nil {
		return failure{fmt.Sprintf("Unable to create a compute instance on GPU %2d GPU instance ID %2d using profile "+
			"%d: %s\nFailed to create compute instances: %s", g.Index, gi.ID, id, reason(err), reason(err)), code(err)}
	}
	fmt.Printf("Successfully created compute instance ID %2d on GPU %2d GPU instance ID %2d using profile MIG %s "+
		"(ID %2d)\n", ci.ID, g.Index, gi.ID, machine.CIName(g.Profile(gi.ProfileID), ci.Size), ci.ProfileID)
	return nil
}

func createCIs(m *machine.Machine, gpus []*machine.GPU, a migArgs) error {
	done := false
	for _, g := range gpus {
		for _, gi := range instances(m, g, a.gis, false) {
			ids := []int{ciProfileBySlices[g.Profile(gi.ProfileID).ComputeSlices]} // the full GPU instance by default
			if a.spec != "" {
				ids = nil
				for _, tok := range strings.Split(a.spec, ",") {
					if tok = strings.TrimSpace(tok); tok == "" {
						continue
					}
					id, err := strconv.Atoi(tok)
					if err != nil {
						return failure{migHelp, exitUsage}
					}
					ids = append(ids, id)
				}
			}
			for _, id := range ids {
				if err := createCI(m, g, gi, id); err != nil {
					return err
				}
				done = true
			}
		}
	}
	if !done {
		return notFound("GPU instances")
	}
	return nil
}

func destroyCIs(m *machine.Machine, gpus []*machine.GPU, a migArgs) error {
	done := false
	for _, g := range gpus {
		for _, gi := range instances(m, g, a.gis, false) {
			cis := append([]machine.ComputeInstance(nil), gi.CIs...)
			sort.Slice(cis, func(i, j int) bool { return cis[i].ID > cis[j].ID })
			for _, ci := range cis {
				if a.cis != nil && !a.cis[ci.ID] {
					continue
				}
				if err := m.DestroyComputeInstance(g.Index, gi.ID, ci.ID); err != nil {
					return err
				}
				done = true
				fmt.Printf("Successfully destroyed compute instance ID %2d from GPU %2d GPU instance ID %2d\n",
					ci.ID, g.Index, gi.ID)
			}
		}
	}
	if !done {
		return notFound("compute instances")
	}
	return nil
}

func destroyGIs(m *machine.Machine, gpus []*machine.GPU, a migArgs) error {
	done := false
	for _, g := range gpus {
		for _, gi := range instances(m, g, a.gis, true) {
			if err := m.DestroyGPUInstance(g.Index, gi.ID); err != nil {
				return failure{fmt.Sprintf("Unable to destroy GPU instance ID %2d from GPU %2d: %s\n"+
					"Failed to destroy GPU instances: %s", gi.ID, g.Index, reason(err), reason(err)), code(err)}
			}
			done = true
			fmt.Printf("Successfully destroyed GPU instance ID %2d from GPU %2d\n", gi.ID, g.Index)
		}
	}
	if !done {
		return notFound("GPU instances")
	}
	return nil
}
