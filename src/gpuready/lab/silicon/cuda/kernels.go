package main

import (
	"gpuready.lab/silicon/cudadev"

	"regexp"
	"strings"
	"unsafe"
)

// Kernels: this library runs no PTX. It knows kernels by their entry name and parameter list and
// runs a Go implementation of each; any other entry is "not found" (cuModuleGetFunction returns
// CUDA_ERROR_NOT_FOUND), so a product change to its kernel shows up in the lab instead of passing
// unnoticed.

// known maps an entry name to its parameter types, in order, as PTX declares them.
var known = map[string][]string{
	// gpuready.conformance.cuda.vector_add: c[i] = a[i] + b[i] for i < n (float32).
	"vectorAdd": {".u64", ".u64", ".u64", ".u32"},
}

var (
	entryRE = regexp.MustCompile(`\.entry\s+([A-Za-z_$%][\w$]*)\s*\(([^)]*)\)`)
	paramRE = regexp.MustCompile(`\.param\s+(\.\w+)`)
)

// parsePTX is the kernels of a PTX module this library can run; ok is false when the image is not PTX
// (no .version/.target: a cubin or fatbin, which the emulator cannot load).
func parsePTX(text string) (map[string]bool, bool) {
	if !strings.Contains(text, ".version") || !strings.Contains(text, ".target") {
		return nil, false
	}
	kernels := map[string]bool{}
	for _, m := range entryRE.FindAllStringSubmatch(text, -1) {
		want, ok := known[m[1]]
		if !ok {
			continue
		}
		var got []string
		for _, p := range paramRE.FindAllStringSubmatch(m[2], -1) {
			got = append(got, p[1])
		}
		if strings.Join(got, ",") == strings.Join(want, ",") {
			kernels[m[1]] = true
		}
	}
	return kernels, true
}

// vectorAdd runs the kernel over threads (grid x block, x only: the kernel indexes by x) and returns
// a CUresult: an operand outside its allocation is an illegal address, as on a GPU.
func (d *driver) vectorAdd(params []unsafe.Pointer, threads uint64) int {
	pa := *(*uint64)(params[0])
	pb := *(*uint64)(params[1])
	pc := *(*uint64)(params[2])
	signed := *(*int32)(params[3])
	if signed <= 0 {
		return cudadev.Success // every thread fails `setp.ge.s32 i, n` and returns
	}
	n := uint64(signed)
	count := min(n, threads)
	bytes := count * 4
	a, aoff := d.lookup(pa, bytes)
	b, boff := d.lookup(pb, bytes)
	c, coff := d.lookup(pc, bytes)
	if a == nil || b == nil || c == nil {
		return cudadev.ErrorIllegalAddress
	}
	writable(c, coff == 0 && bytes == c.size)
	x := unsafe.Slice((*float32)(a.at(aoff)), count)
	y := unsafe.Slice((*float32)(b.at(boff)), count)
	z := unsafe.Slice((*float32)(c.at(coff)), count)
	for i := range z {
		z[i] = x[i] + y[i]
	}
	return cudadev.Success
}
