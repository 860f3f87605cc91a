package main

import (
	"strings"
	"testing"
)

const vectorAddPTX = `
.version 6.0
.target sm_50
.address_size 64
.visible .entry vectorAdd(
    .param .u64 param_a,
    .param .u64 param_b,
    .param .u64 param_c,
    .param .u32 param_n
)
{ ret; }
`

// The kernels a module offers are those this library can run, recognised by name and parameters: a
// changed signature must not be run as if it were the known kernel.
func TestParsePTX(t *testing.T) {
	kernels, ok := parsePTX(vectorAddPTX)
	if !ok || !kernels["vectorAdd"] || len(kernels) != 1 {
		t.Fatalf("vectorAdd PTX: ok=%v kernels=%v", ok, kernels)
	}
	kernels, ok = parsePTX(strings.Replace(vectorAddPTX, ".u32 param_n", ".u64 param_n", 1))
	if !ok || kernels["vectorAdd"] {
		t.Fatalf("vectorAdd with another signature must not be found: ok=%v kernels=%v", ok, kernels)
	}
	kernels, ok = parsePTX(strings.Replace(vectorAddPTX, "vectorAdd", "saxpy", 1))
	if !ok || len(kernels) != 0 {
		t.Fatalf("an unknown entry must not be found: ok=%v kernels=%v", ok, kernels)
	}
	if _, ok := parsePTX("\x7fELF"); ok {
		t.Fatal("a non-PTX image must be refused")
	}
}
