package main

import (
	"crypto/sha256"
	"encoding/binary"
	"strings"

	"gpuready.lab/silicon/machine"
)

// The copy bandwidth model, the one src/gpuready/lab/emulator/nvbandwidth.py prints (Machine.host,
// Machine.nvlinks, Machine.peer): the same constants and the same hardware-file fields, so the
// emulated nvbandwidth and a CUDA program timing its own copies through this library read the
// same figures for the same machine (tests/unit/test_mock_cuda.py compares them). Change both or
// neither.
//
// GB/s are 10^9 bytes per second.
var pcieLaneGBps = map[int]float64{
	1: 0.25,
	2: 0.5,
	3: 8 * 128.0 / 130 / 8,
	4: 16 * 128.0 / 130 / 8,
	5: 32 * 128.0 / 130 / 8,
	6: 64 * 236.0 / 256 / 8,
}

const (
	hostCopyEfficiency = 0.85
	pciePeerEfficiency = 0.80
	nvlinkEfficiency   = 0.80
	defaultNVLinkGbps  = 25.0
)

// spread is nvbandwidth.py's _spread: a deterministic factor in [0.99, 1.01) from identifiers, so
// figures differ a little between GPUs as real ones do, the same on every run.
func spread(parts ...string) float64 {
	sum := sha256.Sum256([]byte(strings.Join(parts, "/")))
	return 0.99 + 0.02*float64(binary.BigEndian.Uint32(sum[:4]))/4294967296.0
}

// linkModel answers bandwidth questions about one reading of the machine.
type linkModel struct {
	m *machine.Machine
}

// pcieGBps is the theoretical unidirectional rate of the GPU's current link (a fault's PCIe effects lower it).
func (l linkModel) pcieGBps(index int) float64 {
	v := l.m.View(index)
	lane, ok := pcieLaneGBps[v.PCIeGen]
	if !ok {
		lane = pcieLaneGBps[1]
	}
	return lane * float64(v.PCIeWidth)
}

// slow is the lowest bandwidth factor of the GPUs' faults (1 when none is slowed).
func (l linkModel) slow(indexes ...int) float64 {
	f := 1.0
	for _, i := range indexes {
		f = min(f, l.m.View(i).BandwidthFactor)
	}
	return f
}

// host is the GB/s of a pinned copy between host memory and GPU index; direction "h2d" or "d2h".
func (l linkModel) host(index int, direction string) float64 {
	g := l.m.GPU(index)
	return l.pcieGBps(index) * hostCopyEfficiency * l.slow(index) * spread(g.UUID, direction)
}

// nvlinks is the NVLink count between two GPUs, as `nvidia-smi topo -m` prints it (0 when either's are down).
func (l linkModel) nvlinks(a, b int) int {
	ga, gb := l.m.GPU(a), l.m.GPU(b)
	links := min(ga.NVLinkLinks, gb.NVLinkLinks)
	if links == 0 || !l.m.View(a).NVLinkActive || !l.m.View(b).NVLinkActive {
		return 0
	}
	if l.m.Hardware.System.NVSwitch {
		return links
	}
	return links / max(len(l.m.Hardware.GPUs)-1, 1)
}

// peer is the GB/s of a copy from GPU src into GPU dst; ok is false where peer access is impossible
// (PCIe peers across NUMA nodes), which is also what cuDeviceCanAccessPeer answers.
func (l linkModel) peer(dst, src int) (rate float64, ok bool) {
	gd, gs := l.m.GPU(dst), l.m.GPU(src)
	if links := l.nvlinks(dst, src); links > 0 {
		perLink := min(orDefault(gd.NVLinkGbps), orDefault(gs.NVLinkGbps))
		rate = float64(links) * perLink * nvlinkEfficiency
	} else if gd.NUMANode == gs.NUMANode {
		rate = min(l.pcieGBps(dst), l.pcieGBps(src)) * pciePeerEfficiency
	} else {
		return 0, false
	}
	return rate * l.slow(dst, src) * spread(gd.UUID, gs.UUID), true
}

func orDefault(gbps float64) float64 {
	if gbps == 0 {
		return defaultNVLinkGbps
	}
	return gbps
}
