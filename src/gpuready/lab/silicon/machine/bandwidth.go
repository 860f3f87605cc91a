package machine

import (
	"crypto/sha256"
	"encoding/binary"
	"strings"
)

// The copy bandwidth model: what a copy between host memory and a GPU, or between two GPUs, moves per
// second on this machine. One model for every reader: the mock libcuda.so.1 times a CUDA program's copies
// by it (package cuda), and the emulated nvbandwidth prints it (package tools), so both read the same
// figures for the same machine.
//
// GB/s are 10^9 bytes per second.
var pcieLaneGBps = map[int]float64{
	1: 0.25,
	2: 0.5,
	3: 8 * 128.0 / 130 / 8,
	4: 16 * 128.0 / 130 / 8,
	5: 32 * 128.0 / 130 / 8,
	6: 64 * 236.0 / 256 / 8, // 236 TLP bytes per 256-byte flit (gpuready.nvidia.bandwidth's figure)
}

const (
	// hostCopyEfficiency: healthy pinned copies measure 0.82-0.88 of the link's theoretical rate (Gen4 x16:
	// ~26 GB/s of 31.5; Gen5 x16: ~55 of 63).
	hostCopyEfficiency = 0.85
	pciePeerEfficiency = 0.80
	// nvlinkEfficiency: H100 over NVSwitch, 18 x 26.562 x 0.8 = 382 GB/s; public 8x H100 nvbandwidth runs
	// read 370-374.
	nvlinkEfficiency  = 0.80
	defaultNVLinkGbps = 25.0
)

// Spread is a deterministic factor in [0.99, 1.01) from identifiers, so figures differ a little between GPUs
// as real ones do, the same on every run.
func Spread(parts ...string) float64 {
	sum := sha256.Sum256([]byte(strings.Join(parts, "/")))
	return 0.99 + 0.02*float64(binary.BigEndian.Uint32(sum[:4]))/4294967296.0
}

// LinkGBps is the theoretical unidirectional rate of a PCIe link of generation gen and width lanes (a generation
// outside the table counts as gen 1). Package machine's one PCIe rate table: the copy model here and dcgmi's pcie
// test (tools/dcgmi.go) read it.
func LinkGBps(gen, width int) float64 {
	lane, ok := pcieLaneGBps[gen]
	if !ok {
		lane = pcieLaneGBps[1]
	}
	return lane * float64(width)
}

// pcieGBps is the theoretical unidirectional rate of the GPU's current link (a fault's PCIe effects lower it).
func (m *Machine) pcieGBps(index int) float64 {
	v := m.View(index)
	return LinkGBps(v.PCIeGen, v.PCIeWidth)
}

// slow is the lowest bandwidth factor of the GPUs' faults (1 when none is slowed).
func (m *Machine) slow(indexes ...int) float64 {
	f := 1.0
	for _, i := range indexes {
		f = min(f, m.View(i).BandwidthFactor)
	}
	return f
}

// HostGBps is the GB/s of a pinned copy between host memory and GPU index; direction "h2d" or "d2h".
func (m *Machine) HostGBps(index int, direction string) float64 {
	return m.pcieGBps(index) * hostCopyEfficiency * m.slow(index) * Spread(m.GPU(index).UUID, direction)
}

// NVLinks is the NVLink count between two GPUs, as `nvidia-smi topo -m` prints it (0 when either's are down):
// every link through NVSwitch, links / (GPUs - 1) on a directly connected board (HGX A100 4-GPU: NV4).
func (m *Machine) NVLinks(a, b int) int {
	ga, gb := m.GPU(a), m.GPU(b)
	links := min(ga.NVLinkLinks, gb.NVLinkLinks)
	if links == 0 || !m.View(a).NVLinkActive || !m.View(b).NVLinkActive {
		return 0
	}
	if m.Hardware.System.NVSwitch {
		return links
	}
	return links / max(len(m.Hardware.GPUs)-1, 1)
}

// PeerGBps is the GB/s of a copy from GPU src into GPU dst; ok is false where peer access is impossible
// (PCIe peers across NUMA nodes), which is also what cuDeviceCanAccessPeer answers. Without NVLink (or with
// either GPU's down) peers copy at 80% of the slower PCIe link.
func (m *Machine) PeerGBps(dst, src int) (rate float64, ok bool) {
	gd, gs := m.GPU(dst), m.GPU(src)
	if links := m.NVLinks(dst, src); links > 0 {
		perLink := min(orDefault(gd.NVLinkGbps), orDefault(gs.NVLinkGbps))
		rate = float64(links) * perLink * nvlinkEfficiency
	} else if gd.NUMANode == gs.NUMANode {
		rate = min(m.pcieGBps(dst), m.pcieGBps(src)) * pciePeerEfficiency
	} else {
		return 0, false
	}
	return rate * m.slow(dst, src) * Spread(gd.UUID, gs.UUID), true
}

func orDefault(gbps float64) float64 {
	if gbps == 0 {
		return defaultNVLinkGbps
	}
	return gbps
}
