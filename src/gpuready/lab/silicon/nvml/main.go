// Command nvml is the lab's mock libnvidia-ml.so.1: NVML's C ABI answering from the emulated machine.
//
// Built by ../build.py; by hand, from the module root:
//
//	CGO_CFLAGS="-I$(go mod download -json github.com/NVIDIA/go-nvml@v0.13.4-1 | sed -n 's/.*"Dir": "\(.*\)",/\1/p')/pkg/nvml" \
//	  go build -buildmode=c-shared -ldflags=-extldflags=-Wl,-soname,libnvidia-ml.so.1 -o libnvidia-ml.so.1 ./nvml
//
// nvml.h is NVIDIA's (go-nvml's copy, not committed here). NVIDIA's own tools (device plugin, GFD, nvidia-ctk,
// the DRA driver, nvidia-ml-py) dlopen it where the driver would install it and run unchanged; every
// answer comes from package machine (the same files the emulated nvidia-smi reads), so a fault injected
// in the lab shows in both. Functions not exported here are missing from the library, which NVML
// callers already handle (NVML_ERROR_FUNCTION_NOT_FOUND); exported ones never crash on bad input.
package main

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"gpuready.lab/silicon/machine"
)

func main() {}

// devKey names one device: a full GPU (gi = -1) or a MIG device (gi, ci) on it.
type devKey struct{ gpu, gi, ci int }

var (
	mu        sync.Mutex
	initCount int
	handles   = map[devKey]C.nvmlDevice_t{}
	keys      = map[C.nvmlDevice_t]devKey{}
	errorText = map[C.nvmlReturn_t]*C.char{}
)

// handleFor is the stable handle of a device (allocated once, kept for the process's life).
func handleFor(k devKey) C.nvmlDevice_t {
	mu.Lock()
	defer mu.Unlock()
	return handleLocked(k)
}

// handleLocked is handleFor with mu held.
func handleLocked(k devKey) C.nvmlDevice_t {
	if h, ok := handles[k]; ok {
		return h
	}
	p := (*C.struct_nvmlDevice_st)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_nvmlDevice_st{}))))
	p.slot = C.int(len(handles))
	h := C.nvmlDevice_t{handle: p}
	handles[k] = h
	keys[h] = k
	return h
}

// device is what a call on a handle sees: the machine now, the GPU's view, the MIG device if any.
type device struct {
	m   *machine.Machine
	v   *machine.View
	g   *machine.GPU
	mig *machine.MigDevice
	key devKey
}

// currentLocked is the machine now, for callers holding mu (machine has its own lock).
func currentLocked() (*machine.Machine, error) { return machine.Current() }

func initialized() bool {
	mu.Lock()
	defer mu.Unlock()
	return initCount > 0
}

func current() (*machine.Machine, C.nvmlReturn_t) {
	if !initialized() {
		return nil, C.NVML_ERROR_UNINITIALIZED
	}
	m, err := machine.Current()
	if err != nil {
		return nil, C.NVML_ERROR_UNKNOWN
	}
	return m, C.NVML_SUCCESS
}

// get resolves a handle; a GPU off the bus answers NVML_ERROR_GPU_IS_LOST as the real driver does.
func get(h C.nvmlDevice_t) (*device, C.nvmlReturn_t) { return resolve(h, false) }

// opened resolves a handle for the identity NVML keeps with it (the UUID), which a handle opened before its GPU
// fell off the bus still answers: on a real node NVIDIA's device plugin reads the UUID of an XID 79 event's
// device and takes only that GPU out, the others staying allocatable (NVIDIA/k8s-device-plugin#2038 and #2039,
// from a cluster that hit it). New handles and every other query of a lost GPU answer GPU_IS_LOST.
func opened(h C.nvmlDevice_t) (*device, C.nvmlReturn_t) { return resolve(h, true) }

func resolve(h C.nvmlDevice_t, lostToo bool) (*device, C.nvmlReturn_t) {
	m, rc := current()
	if rc != C.NVML_SUCCESS {
		return nil, rc
	}
	mu.Lock()
	k, ok := keys[h]
	mu.Unlock()
	if !ok {
		return nil, C.NVML_ERROR_INVALID_ARGUMENT
	}
	v := m.View(k.gpu)
	if v == nil {
		return nil, C.NVML_ERROR_INVALID_ARGUMENT
	}
	if v.OffBus && !lostToo {
		return nil, C.NVML_ERROR_GPU_IS_LOST
	}
	d := &device{m: m, v: v, g: v.GPU, key: k}
	if k.gi >= 0 {
		for i := range v.MigDevices {
			if v.MigDevices[i].GI == k.gi && v.MigDevices[i].CI == k.ci {
				d.mig = &v.MigDevices[i]
			}
		}
		if d.mig == nil {
			return nil, C.NVML_ERROR_NOT_FOUND // the MIG device was destroyed
		}
	}
	return d, C.NVML_SUCCESS
}

// with is how most queries open: resolve handle h with lookup (get, full, parentGPU, fullGPU, getGI: a bad
// handle, a lost GPU or a gone instance answers its error), refuse a nil out (NVML checks the handle before
// its arguments), then answer with fill.
func with[H, V, T any](lookup func(H) (V, C.nvmlReturn_t), h H, out *T, fill func(V) C.nvmlReturn_t) C.nvmlReturn_t {
	v, rc := lookup(h)
	if rc != C.NVML_SUCCESS {
		return rc
	}
	if out == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	return fill(v)
}

// with2 is with for a query answering through two pointers, a and b: both must be given.
func with2[H, V, A, B any](lookup func(H) (V, C.nvmlReturn_t), h H, a *A, b *B, fill func(V) C.nvmlReturn_t) C.nvmlReturn_t {
	return with(lookup, h, a, func(v V) C.nvmlReturn_t {
		if b == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		return fill(v)
	})
}

// set answers a query whose answer is always there: with, storing what value gives.
func set[H, V, T any](lookup func(H) (V, C.nvmlReturn_t), h H, out *T, value func(V) T) C.nvmlReturn_t {
	return with(lookup, h, out, func(v V) C.nvmlReturn_t {
		*out = value(v)
		return C.NVML_SUCCESS
	})
}

// putString copies s into a caller's buffer of length bytes, NUL-terminated.
func putString(dst *C.char, length C.uint, s string) C.nvmlReturn_t {
	if dst == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	if uint64(len(s))+1 > uint64(length) {
		return C.NVML_ERROR_INSUFFICIENT_SIZE
	}
	buf := unsafe.Slice((*byte)(unsafe.Pointer(dst)), int(length))
	copy(buf, s)
	buf[len(s)] = 0
	return C.NVML_SUCCESS
}

// putFixed copies s into a fixed-size char array of a struct (truncating as the driver would never need).
func putFixed(buf []C.char, s string) {
	n := min(len(s), len(buf)-1)
	for i := 0; i < n; i++ {
		buf[i] = C.char(s[i])
	}
	buf[n] = 0
}

func initNVML() C.nvmlReturn_t {
	m, err := machine.Current()
	if err != nil {
		return C.NVML_ERROR_DRIVER_NOT_LOADED
	}
	if err := m.CheckLoaded(); err != nil {
		if errors.Is(err, machine.ErrMismatch) {
			return C.NVML_ERROR_LIB_RM_VERSION_MISMATCH
		}
		return C.NVML_ERROR_DRIVER_NOT_LOADED
	}
	mu.Lock()
	initCount++
	mu.Unlock()
	return C.NVML_SUCCESS
}

//export nvmlInit
func nvmlInit() C.nvmlReturn_t { return initNVML() }

//export nvmlInit_v2
func nvmlInit_v2() C.nvmlReturn_t { return initNVML() }

//export nvmlInitWithFlags
func nvmlInitWithFlags(flags C.uint) C.nvmlReturn_t { return initNVML() }

//export nvmlShutdown
func nvmlShutdown() C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	if initCount == 0 {
		return C.NVML_ERROR_UNINITIALIZED
	}
	initCount--
	return C.NVML_SUCCESS
}

// errorStrings are the real library's texts.
var errorStrings = map[C.nvmlReturn_t]string{
	C.NVML_SUCCESS:                         "Success",
	C.NVML_ERROR_UNINITIALIZED:             "Uninitialized",
	C.NVML_ERROR_INVALID_ARGUMENT:          "Invalid Argument",
	C.NVML_ERROR_NOT_SUPPORTED:             "Not Supported",
	C.NVML_ERROR_NO_PERMISSION:             "Insufficient Permissions",
	C.NVML_ERROR_ALREADY_INITIALIZED:       "Already Initialized",
	C.NVML_ERROR_NOT_FOUND:                 "Not Found",
	C.NVML_ERROR_INSUFFICIENT_SIZE:         "Insufficient Size",
	C.NVML_ERROR_INSUFFICIENT_POWER:        "Insufficient External Power",
	C.NVML_ERROR_DRIVER_NOT_LOADED:         "Driver Not Loaded",
	C.NVML_ERROR_TIMEOUT:                   "Timeout",
	C.NVML_ERROR_IRQ_ISSUE:                 "Interrupt request issue",
	C.NVML_ERROR_LIBRARY_NOT_FOUND:         "NVML Shared Library Not Found",
	C.NVML_ERROR_FUNCTION_NOT_FOUND:        "Function Not Found",
	C.NVML_ERROR_CORRUPTED_INFOROM:         "Corrupted infoROM",
	C.NVML_ERROR_GPU_IS_LOST:               "GPU is lost",
	C.NVML_ERROR_RESET_REQUIRED:            "GPU requires restart",
	C.NVML_ERROR_OPERATING_SYSTEM:          "The operating system has blocked the request.",
	C.NVML_ERROR_LIB_RM_VERSION_MISMATCH:   "RM has detected an NVML/RM version mismatch.",
	C.NVML_ERROR_IN_USE:                    "In use by another client",
	C.NVML_ERROR_MEMORY:                    "Insufficient Memory",
	C.NVML_ERROR_NO_DATA:                   "No data",
	C.NVML_ERROR_INSUFFICIENT_RESOURCES:    "Insufficient resources",
	C.NVML_ERROR_ARGUMENT_VERSION_MISMATCH: "Version mismatch",
	C.NVML_ERROR_UNKNOWN:                   "Unknown Error",
}

//export nvmlErrorString
func nvmlErrorString(result C.nvmlReturn_t) *C.char {
	mu.Lock()
	defer mu.Unlock()
	if s, ok := errorText[result]; ok {
		return s
	}
	text, ok := errorStrings[result]
	if !ok {
		text = "Unknown Error"
	}
	s := C.CString(text) // kept: callers hold the pointer
	errorText[result] = s
	return s
}

//export nvmlSystemGetDriverVersion
func nvmlSystemGetDriverVersion(version *C.char, length C.uint) C.nvmlReturn_t {
	m, rc := current()
	if rc != C.NVML_SUCCESS {
		return rc
	}
	return putString(version, length, m.DriverVersion())
}

//export nvmlSystemGetNVMLVersion
func nvmlSystemGetNVMLVersion(version *C.char, length C.uint) C.nvmlReturn_t {
	m, err := machine.Current() // works before nvmlInit, as the real one does
	if err != nil {
		return C.NVML_ERROR_UNKNOWN
	}
	major := m.CUDADriverVersion() / 1000
	return putString(version, length, strconv.Itoa(major)+"."+m.DriverVersion())
}

//export nvmlSystemGetCudaDriverVersion
func nvmlSystemGetCudaDriverVersion(v *C.int) C.nvmlReturn_t {
	if v == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	m, err := machine.Current()
	if err != nil {
		return C.NVML_ERROR_UNKNOWN
	}
	*v = C.int(m.CUDADriverVersion())
	return C.NVML_SUCCESS
}

//export nvmlSystemGetCudaDriverVersion_v2
func nvmlSystemGetCudaDriverVersion_v2(v *C.int) C.nvmlReturn_t {
	return nvmlSystemGetCudaDriverVersion(v)
}

// ---- enumeration ---------------------------------------------------------------------------

func deviceCount(count *C.uint) C.nvmlReturn_t {
	if count == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	m, rc := current()
	if rc != C.NVML_SUCCESS {
		return rc
	}
	*count = C.uint(len(m.GPUs()))
	return C.NVML_SUCCESS
}

//export nvmlDeviceGetCount
func nvmlDeviceGetCount(count *C.uint) C.nvmlReturn_t { return deviceCount(count) }

//export nvmlDeviceGetCount_v2
func nvmlDeviceGetCount_v2(count *C.uint) C.nvmlReturn_t { return deviceCount(count) }

// gpuHandle returns the handle of GPU index, GPU_IS_LOST when it fell off the bus.
func gpuHandle(m *machine.Machine, index int, out *C.nvmlDevice_t) C.nvmlReturn_t {
	if out == nil || m.GPU(index) == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	if m.OffBus(index) {
		return C.NVML_ERROR_GPU_IS_LOST
	}
	*out = handleFor(devKey{index, -1, -1})
	return C.NVML_SUCCESS
}

func handleByIndex(index C.uint, out *C.nvmlDevice_t) C.nvmlReturn_t {
	m, rc := current()
	if rc != C.NVML_SUCCESS {
		return rc
	}
	return gpuHandle(m, int(index), out)
}

//export nvmlDeviceGetHandleByIndex
func nvmlDeviceGetHandleByIndex(index C.uint, out *C.nvmlDevice_t) C.nvmlReturn_t {
	return handleByIndex(index, out)
}

//export nvmlDeviceGetHandleByIndex_v2
func nvmlDeviceGetHandleByIndex_v2(index C.uint, out *C.nvmlDevice_t) C.nvmlReturn_t {
	return handleByIndex(index, out)
}

//export nvmlDeviceGetHandleByUUID
func nvmlDeviceGetHandleByUUID(uuid *C.char, out *C.nvmlDevice_t) C.nvmlReturn_t {
	m, rc := current()
	if rc != C.NVML_SUCCESS {
		return rc
	}
	if uuid == nil || out == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	want := C.GoString(uuid)
	for _, g := range m.GPUs() {
		if g.UUID == want {
			return gpuHandle(m, g.Index, out)
		}
		if !strings.HasPrefix(want, "MIG-") || m.OffBus(g.Index) {
			continue
		}
		for _, d := range m.View(g.Index).MigDevices {
			if d.UUID == want {
				*out = handleFor(devKey{g.Index, d.GI, d.CI})
				return C.NVML_SUCCESS
			}
		}
	}
	return C.NVML_ERROR_NOT_FOUND
}

// normalBusID reduces the spellings NVML accepts ("00000000:18:00.0", "0000:18:00.0", "18:00.0") to one.
func normalBusID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	parts := strings.Split(s, ":")
	if len(parts) == 2 {
		parts = append([]string{"0"}, parts...)
	}
	if len(parts) != 3 {
		return s
	}
	dom, err := strconv.ParseUint(parts[0], 16, 32)
	if err != nil {
		return s
	}
	return strconv.FormatUint(dom, 16) + ":" + parts[1] + ":" + parts[2]
}

func handleByBusID(bus *C.char, out *C.nvmlDevice_t) C.nvmlReturn_t {
	m, rc := current()
	if rc != C.NVML_SUCCESS {
		return rc
	}
	if bus == nil || out == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	want := normalBusID(C.GoString(bus))
	for _, g := range m.GPUs() {
		if normalBusID(g.PCIBusID) == want {
			return gpuHandle(m, g.Index, out)
		}
	}
	return C.NVML_ERROR_NOT_FOUND
}

//export nvmlDeviceGetHandleByPciBusId
func nvmlDeviceGetHandleByPciBusId(bus *C.char, out *C.nvmlDevice_t) C.nvmlReturn_t {
	return handleByBusID(bus, out)
}

//export nvmlDeviceGetHandleByPciBusId_v2
func nvmlDeviceGetHandleByPciBusId_v2(bus *C.char, out *C.nvmlDevice_t) C.nvmlReturn_t {
	return handleByBusID(bus, out)
}

//export nvmlDeviceGetHandleBySerial
func nvmlDeviceGetHandleBySerial(serial *C.char, out *C.nvmlDevice_t) C.nvmlReturn_t {
	m, rc := current()
	if rc != C.NVML_SUCCESS {
		return rc
	}
	if serial == nil || out == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	want := C.GoString(serial)
	for _, g := range m.GPUs() {
		if g.Serial == want {
			return gpuHandle(m, g.Index, out)
		}
	}
	return C.NVML_ERROR_NOT_FOUND
}
