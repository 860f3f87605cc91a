package main

// The CUDA driver API entry points the product calls (gpuready.conformance.cuda), with cuda.h's
// prototypes: CUdevice is an int, CUdeviceptr 64 bits (the _v2 entry points), every other handle a
// pointer. Each returns a CUresult.

/*
#include <stddef.h>
typedef int CUresult;
typedef int CUdevice;
typedef int CUdevice_attribute;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef void *CUevent;
*/
import "C"

import (
	"strconv"
	"strings"
	"time"
	"unsafe"

	"gpuready.lab/silicon/cudadev"
	"gpuready.lab/silicon/machine"
)

func main() {}

func h(p unsafe.Pointer) uintptr { return uintptr(p) }

func result(code int) C.CUresult { return C.CUresult(code) }

// call runs an entry point's body under the driver lock once cuInit has succeeded (else
// CUDA_ERROR_NOT_INITIALIZED, as every driver API call but cuInit and cuDriverGetVersion answers);
// body returns the CUDA error code.
func call(body func() int) C.CUresult {
	drv.mu.Lock()
	defer drv.mu.Unlock()
	if r := drv.ready(); r != cudadev.Success {
		return result(r)
	}
	return result(body())
}

// callOn is call for an entry point on one driver object: handle p must name a T (else
// CUDA_ERROR_INVALID_HANDLE), which body gets.
func callOn[T any](p unsafe.Pointer, body func(T) int) C.CUresult {
	return call(func() int {
		obj, ok := drv.handles[h(p)].(T)
		if !ok {
			return cudadev.ErrorInvalidHandle
		}
		return body(obj)
	})
}

//export cuInit
func cuInit(flags C.uint) C.CUresult {
	if flags != 0 {
		return result(cudadev.ErrorInvalidValue)
	}
	drv.mu.Lock()
	defer drv.mu.Unlock()
	return result(drv.init())
}

//export cuDriverGetVersion
func cuDriverGetVersion(version *C.int) C.CUresult {
	if version == nil {
		return result(cudadev.ErrorInvalidValue)
	}
	major, minor, _ := strings.Cut(machine.CUDAVersion(machine.LibraryVersion()), ".")
	a, _ := strconv.Atoi(major)
	b, _ := strconv.Atoi(minor)
	*version = C.int(a*1000 + b*10)
	return result(cudadev.Success)
}

//export cuDeviceGetCount
func cuDeviceGetCount(count *C.int) C.CUresult {
	return call(func() int {
		if count == nil {
			return cudadev.ErrorInvalidValue
		}
		*count = C.int(len(drv.devices))
		return cudadev.Success
	})
}

//export cuDeviceGet
func cuDeviceGet(dev *C.CUdevice, ordinal C.int) C.CUresult {
	return call(func() int {
		if dev == nil {
			return cudadev.ErrorInvalidValue
		}
		if drv.device(int(ordinal)) == nil {
			return cudadev.ErrorInvalidDevice
		}
		*dev = C.CUdevice(ordinal)
		return cudadev.Success
	})
}

//export cuDeviceGetName
func cuDeviceGetName(name *C.char, length C.int, dev C.CUdevice) C.CUresult {
	return call(func() int {
		d := drv.device(int(dev))
		if d == nil {
			return cudadev.ErrorInvalidDevice
		}
		if name == nil || length <= 0 {
			return cudadev.ErrorInvalidValue
		}
		out := unsafe.Slice((*byte)(unsafe.Pointer(name)), int(length))
		n := copy(out[:len(out)-1], d.name)
		out[n] = 0
		return cudadev.Success
	})
}

// Attribute numbers of cuda.h's CUdevice_attribute that have an answer here.
const (
	attrMaxThreadsPerBlock = 1
	attrMaxBlockDimX       = 2
	attrMaxBlockDimY       = 3
	attrMaxBlockDimZ       = 4
	attrMaxGridDimX        = 5
	attrMaxGridDimY        = 6
	attrMaxGridDimZ        = 7
	attrSharedPerBlock     = 8
	attrWarpSize           = 10
	attrClockRate          = 13
	attrMultiprocessors    = 16
	attrIntegrated         = 18
	attrCanMapHostMemory   = 19
	attrECCEnabled         = 32
	attrPCIBusID           = 33
	attrPCIDeviceID        = 34
	attrMemoryClockRate    = 36
	attrUnifiedAddressing  = 41
	attrPCIDomainID        = 50
	attrCCMajor            = 75
	attrCCMinor            = 76
)

// pciParts splits "00000000:18:00.0" into domain, bus, device.
func pciParts(busID string) (int, int, int) {
	parts := strings.Split(busID, ":")
	if len(parts) != 3 {
		return 0, 0, 0
	}
	domain, _ := strconv.ParseInt(parts[0], 16, 64)
	bus, _ := strconv.ParseInt(parts[1], 16, 64)
	devPart, _, _ := strings.Cut(parts[2], ".")
	device, _ := strconv.ParseInt(devPart, 16, 64)
	return int(domain), int(bus), int(device)
}

func attribute(g *machine.GPU, attr int) (int, bool) {
	domain, bus, device := pciParts(g.PCIBusID)
	major, minor := g.CUDAComputeCapability()
	values := map[int]int{
		attrMaxThreadsPerBlock: 1024, attrMaxBlockDimX: 1024, attrMaxBlockDimY: 1024, attrMaxBlockDimZ: 64,
		attrMaxGridDimX: 2147483647, attrMaxGridDimY: 65535, attrMaxGridDimZ: 65535,
		attrSharedPerBlock: 49152, attrWarpSize: 32, attrClockRate: g.Clocks.MaxGraphics * 1000,
		attrMultiprocessors: g.SMCount, attrIntegrated: 0, attrCanMapHostMemory: 1,
		attrECCEnabled: boolInt(g.ECCSupported), attrPCIBusID: bus, attrPCIDeviceID: device,
		attrMemoryClockRate: g.Clocks.Memory * 1000, attrUnifiedAddressing: 1, attrPCIDomainID: domain,
		attrCCMajor: major, attrCCMinor: minor,
	}
	v, ok := values[attr]
	return v, ok
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

//export cuDeviceGetAttribute
func cuDeviceGetAttribute(pi *C.int, attrib C.CUdevice_attribute, dev C.CUdevice) C.CUresult {
	return call(func() int {
		d := drv.device(int(dev))
		if d == nil {
			return cudadev.ErrorInvalidDevice
		}
		v, ok := attribute(d.gpu, int(attrib))
		if pi == nil || !ok {
			return cudadev.ErrorInvalidValue
		}
		*pi = C.int(v)
		return cudadev.Success
	})
}

//export cuDeviceCanAccessPeer
func cuDeviceCanAccessPeer(can *C.int, dev, peer C.CUdevice) C.CUresult {
	return call(func() int {
		a, b := drv.device(int(dev)), drv.device(int(peer))
		if a == nil || b == nil {
			return cudadev.ErrorInvalidDevice
		}
		if can == nil {
			return cudadev.ErrorInvalidValue
		}
		*can = 0
		if a != b {
			if _, ok := drv.machine.PeerGBps(a.gpu.Index, b.gpu.Index); ok {
				*can = 1
			}
		}
		return cudadev.Success
	})
}

//export cuDevicePrimaryCtxRetain
func cuDevicePrimaryCtxRetain(pctx *C.CUcontext, dev C.CUdevice) C.CUresult {
	return call(func() int {
		d := drv.device(int(dev))
		if d == nil {
			return cudadev.ErrorInvalidDevice
		}
		if pctx == nil {
			return cudadev.ErrorInvalidValue
		}
		d.primary.retained++
		putHandle(unsafe.Pointer(pctx), d.primary.handle)
		return cudadev.Success
	})
}

//export cuDevicePrimaryCtxRelease_v2
func cuDevicePrimaryCtxRelease_v2(dev C.CUdevice) C.CUresult {
	return call(func() int {
		d := drv.device(int(dev))
		if d == nil {
			return cudadev.ErrorInvalidDevice
		}
		if d.primary.retained == 0 {
			return cudadev.ErrorInvalidContext
		}
		d.primary.retained--
		if d.primary.retained == 0 {
			// The last release destroys the primary context: its memory and peer mappings go with it.
			drv.flushAll()
			for base, a := range drv.allocs {
				if a.dev == d {
					release(a.data)
					d.used -= a.size
					delete(drv.allocs, base)
				}
			}
			for _, other := range drv.devices {
				delete(other.primary.peers, d.primary)
			}
			d.primary.peers = map[*context]bool{}
			d.primary.sticky = cudadev.Success
		}
		return cudadev.Success
	})
}

//export cuCtxSetCurrent
func cuCtxSetCurrent(ctx C.CUcontext) C.CUresult {
	return call(func() int {
		tid := currentThread()
		if ctx == nil {
			delete(drv.current, tid)
			return cudadev.Success
		}
		c := drv.context(h(unsafe.Pointer(ctx)))
		if c == nil {
			return cudadev.ErrorInvalidContext
		}
		drv.current[tid] = c
		return cudadev.Success
	})
}

//export cuCtxSynchronize
func cuCtxSynchronize() C.CUresult {
	drv.mu.Lock()
	if r := drv.ready(); r != cudadev.Success {
		drv.mu.Unlock()
		return result(r)
	}
	ctx := drv.currentContext()
	if ctx == nil {
		drv.mu.Unlock()
		return result(cudadev.ErrorInvalidContext)
	}
	var due time.Time
	for _, s := range drv.streams() {
		if s.ctx == ctx {
			if t := drv.syncStream(s); t.After(due) {
				due = t
			}
		}
	}
	sticky := ctx.sticky
	drv.mu.Unlock()
	sleepUntil(due)
	return result(sticky)
}

//export cuCtxEnablePeerAccess
func cuCtxEnablePeerAccess(peer C.CUcontext, flags C.uint) C.CUresult {
	return call(func() int {
		if flags != 0 {
			return cudadev.ErrorInvalidValue
		}
		ctx := drv.currentContext()
		other := drv.context(h(unsafe.Pointer(peer)))
		if ctx == nil || other == nil {
			return cudadev.ErrorInvalidContext
		}
		if ctx == other {
			return cudadev.ErrorInvalidDevice
		}
		if _, ok := drv.machine.PeerGBps(ctx.dev.gpu.Index, other.dev.gpu.Index); !ok {
			return cudadev.ErrorPeerAccessUnsupported
		}
		if ctx.peers[other] {
			return cudadev.ErrorPeerAccessAlreadyEnabled
		}
		ctx.peers[other] = true
		return cudadev.Success
	})
}

//export cuModuleLoadData
func cuModuleLoadData(mod *C.CUmodule, image unsafe.Pointer) C.CUresult {
	return call(func() int {
		ctx := drv.currentContext()
		if ctx == nil {
			return cudadev.ErrorInvalidContext
		}
		if mod == nil || image == nil {
			return cudadev.ErrorInvalidValue
		}
		kernels, ok := parsePTX(C.GoString((*C.char)(image)))
		if !ok {
			return cudadev.ErrorInvalidImage
		}
		m := &module{ctx: ctx, kernels: kernels}
		m.handle = drv.give(m, unsafe.Pointer(mod))
		return cudadev.Success
	})
}

//export cuModuleGetFunction
func cuModuleGetFunction(fn *C.CUfunction, mod C.CUmodule, name *C.char) C.CUresult {
	return callOn(unsafe.Pointer(mod), func(m *module) int {
		if fn == nil || name == nil {
			return cudadev.ErrorInvalidValue
		}
		entry := C.GoString(name)
		if !m.kernels[entry] {
			return cudadev.ErrorNotFound
		}
		f := &function{module: m, name: entry}
		f.handle = drv.give(f, unsafe.Pointer(fn))
		return cudadev.Success
	})
}

//export cuModuleUnload
func cuModuleUnload(mod C.CUmodule) C.CUresult {
	return callOn(unsafe.Pointer(mod), func(m *module) int {
		for handle, obj := range drv.handles {
			if f, ok := obj.(*function); ok && f.module == m {
				delete(drv.handles, handle)
			}
		}
		delete(drv.handles, m.handle)
		return cudadev.Success
	})
}

//export cuLaunchKernel
func cuLaunchKernel(fn C.CUfunction, gridX, gridY, gridZ, blockX, blockY, blockZ, sharedBytes C.uint,
	hStream C.CUstream, params *unsafe.Pointer, extra *unsafe.Pointer) C.CUresult {
	return callOn(unsafe.Pointer(fn), func(f *function) int {
		s, r := drv.stream(h(unsafe.Pointer(hStream)))
		if r != cudadev.Success {
			return r
		}
		if ctx := drv.currentContext(); ctx == nil || ctx != f.module.ctx || s.ctx != ctx {
			return cudadev.ErrorInvalidContext
		}
		threads := uint64(blockX) * uint64(blockY) * uint64(blockZ)
		if gridX == 0 || gridY == 0 || gridZ == 0 || threads == 0 || threads > 1024 || params == nil {
			return cudadev.ErrorInvalidValue
		}
		drv.flushAll() // the kernel sees every copy queued before it
		args := unsafe.Slice(params, len(known[f.name]))
		if f.name == "vectorAdd" {
			if code := drv.vectorAdd(args, uint64(gridX)*uint64(blockX)); code != cudadev.Success {
				s.ctx.sticky = code // reported by the next synchronization, as a GPU fault is
			}
		}
		drv.enqueue(s, nil, kernelTime)
		return cudadev.Success
	})
}

//export cuMemAlloc_v2
func cuMemAlloc_v2(dptr *C.CUdeviceptr, size C.size_t) C.CUresult {
	return call(func() int {
		ctx := drv.currentContext()
		if ctx == nil {
			return cudadev.ErrorInvalidContext
		}
		if dptr == nil {
			return cudadev.ErrorInvalidValue
		}
		base, r := drv.alloc(ctx.dev, uint64(size))
		if r == cudadev.Success {
			putU64(unsafe.Pointer(dptr), base)
		}
		return r
	})
}

//export cuMemFree_v2
func cuMemFree_v2(dptr C.CUdeviceptr) C.CUresult {
	return call(func() int {
		return drv.free(uint64(dptr))
	})
}

//export cuMemHostAlloc
func cuMemHostAlloc(pp *unsafe.Pointer, size C.size_t, flags C.uint) C.CUresult {
	return call(func() int {
		if drv.currentContext() == nil {
			return cudadev.ErrorInvalidContext
		}
		if pp == nil || size == 0 || flags&^0x7 != 0 { // PORTABLE | DEVICEMAP | WRITECOMBINED
			return cudadev.ErrorInvalidValue
		}
		p := cAlloc(uint64(size))
		if p == nil {
			return cudadev.ErrorOutOfMemory
		}
		drv.host[uintptr(p)] = uint64(size)
		putHandle(unsafe.Pointer(pp), uintptr(p))
		return cudadev.Success
	})
}

//export cuMemFreeHost
func cuMemFreeHost(p unsafe.Pointer) C.CUresult {
	return call(func() int {
		size, ok := drv.host[uintptr(p)]
		if !ok {
			return cudadev.ErrorInvalidValue
		}
		drv.flushAll()
		delete(drv.host, uintptr(p))
		cFree(p, size)
		return cudadev.Success
	})
}

// copyRate is the modelled GB/s of op (machine/bandwidth.go); the copy was checked, so its allocations exist.
func (d *driver) copyRate(op copyOp) float64 {
	switch op.kind {
	case hostToDevice:
		a, _ := d.lookup(op.dst, op.n)
		return d.machine.HostGBps(a.dev.gpu.Index, "h2d")
	case deviceToHost:
		a, _ := d.lookup(op.src, op.n)
		return d.machine.HostGBps(a.dev.gpu.Index, "d2h")
	}
	dst, _ := d.lookup(op.dst, op.n)
	src, _ := d.lookup(op.src, op.n)
	if dst.dev == src.dev {
		return localCopyGBps
	}
	if rate, ok := d.machine.PeerGBps(dst.dev.gpu.Index, src.dev.gpu.Index); ok {
		return rate
	}
	// No peer path: the driver stages the copy through host memory, one PCIe hop after the other.
	up, down := d.machine.HostGBps(src.dev.gpu.Index, "d2h"), d.machine.HostGBps(dst.dev.gpu.Index, "h2d")
	return 1 / (1/up + 1/down)
}

// check validates a copy's addresses (CUDA_ERROR_INVALID_VALUE where a device range is not allocated).
func (d *driver) check(op copyOp) int {
	if op.n == 0 {
		return cudadev.Success
	}
	if op.kind != deviceToHost {
		if a, _ := d.lookup(op.dst, op.n); a == nil {
			return cudadev.ErrorInvalidValue
		}
	}
	if op.kind != hostToDevice {
		if a, _ := d.lookup(op.src, op.n); a == nil {
			return cudadev.ErrorInvalidValue
		}
	}
	if op.kind != deviceToDevice && op.host == nil {
		return cudadev.ErrorInvalidValue
	}
	return cudadev.Success
}

// copyAsync queues op on hStream.
func copyAsync(op copyOp, hStream C.CUstream) C.CUresult {
	return call(func() int {
		s, r := drv.stream(h(unsafe.Pointer(hStream)))
		if r != cudadev.Success {
			return r
		}
		if r := drv.check(op); r != cudadev.Success || op.n == 0 {
			return r
		}
		drv.enqueue(s, &op, modelled(op.n, drv.copyRate(op)))
		return cudadev.Success
	})
}

// copySync is a cuMemcpy without a stream: on the current context's default stream, returning when done.
func copySync(op copyOp) C.CUresult {
	drv.mu.Lock()
	if r := drv.ready(); r != cudadev.Success {
		drv.mu.Unlock()
		return result(r)
	}
	ctx := drv.currentContext()
	if ctx == nil {
		drv.mu.Unlock()
		return result(cudadev.ErrorInvalidContext)
	}
	if r := drv.check(op); r != cudadev.Success || op.n == 0 {
		drv.mu.Unlock()
		return result(r)
	}
	drv.flushAll()
	drv.enqueue(ctx.null, &op, modelled(op.n, drv.copyRate(op)))
	due := drv.syncStream(ctx.null)
	sticky := ctx.sticky
	drv.mu.Unlock()
	sleepUntil(due)
	return result(sticky)
}

//export cuMemcpyHtoD_v2
func cuMemcpyHtoD_v2(dst C.CUdeviceptr, src unsafe.Pointer, n C.size_t) C.CUresult {
	return copySync(copyOp{kind: hostToDevice, dst: uint64(dst), host: src, n: uint64(n)})
}

//export cuMemcpyDtoH_v2
func cuMemcpyDtoH_v2(dst unsafe.Pointer, src C.CUdeviceptr, n C.size_t) C.CUresult {
	return copySync(copyOp{kind: deviceToHost, host: dst, src: uint64(src), n: uint64(n)})
}

//export cuMemcpyHtoDAsync_v2
func cuMemcpyHtoDAsync_v2(dst C.CUdeviceptr, src unsafe.Pointer, n C.size_t, hStream C.CUstream) C.CUresult {
	return copyAsync(copyOp{kind: hostToDevice, dst: uint64(dst), host: src, n: uint64(n)}, hStream)
}

//export cuMemcpyDtoHAsync_v2
func cuMemcpyDtoHAsync_v2(dst unsafe.Pointer, src C.CUdeviceptr, n C.size_t, hStream C.CUstream) C.CUresult {
	return copyAsync(copyOp{kind: deviceToHost, host: dst, src: uint64(src), n: uint64(n)}, hStream)
}

//export cuMemcpyPeerAsync
func cuMemcpyPeerAsync(dst C.CUdeviceptr, dstCtx C.CUcontext, src C.CUdeviceptr, srcCtx C.CUcontext,
	n C.size_t, hStream C.CUstream) C.CUresult {
	drv.mu.Lock()
	dc, sc := drv.context(h(unsafe.Pointer(dstCtx))), drv.context(h(unsafe.Pointer(srcCtx)))
	op := copyOp{kind: deviceToDevice, dst: uint64(dst), src: uint64(src), n: uint64(n)}
	bad := drv.ready() == cudadev.Success && (dc == nil || sc == nil)
	if !bad && dc != nil && sc != nil && n > 0 {
		a, _ := drv.lookup(op.dst, op.n)
		b, _ := drv.lookup(op.src, op.n)
		bad = a == nil || b == nil || a.dev != dc.dev || b.dev != sc.dev
		if bad {
			drv.mu.Unlock()
			return result(cudadev.ErrorInvalidValue)
		}
	}
	drv.mu.Unlock()
	if bad {
		return result(cudadev.ErrorInvalidContext)
	}
	return copyAsync(op, hStream)
}

//export cuStreamCreate
func cuStreamCreate(ph *C.CUstream, flags C.uint) C.CUresult {
	return call(func() int {
		ctx := drv.currentContext()
		if ctx == nil {
			return cudadev.ErrorInvalidContext
		}
		if ph == nil || flags&^1 != 0 { // CU_STREAM_NON_BLOCKING
			return cudadev.ErrorInvalidValue
		}
		s := &stream{ctx: ctx, idle: true}
		s.handle = drv.give(s, unsafe.Pointer(ph))
		return cudadev.Success
	})
}

//export cuStreamDestroy_v2
func cuStreamDestroy_v2(hStream C.CUstream) C.CUresult {
	return callOn(unsafe.Pointer(hStream), func(s *stream) int {
		drv.flush(s) // queued work still completes, as on a GPU
		delete(drv.handles, s.handle)
		return cudadev.Success
	})
}

//export cuStreamSynchronize
func cuStreamSynchronize(hStream C.CUstream) C.CUresult {
	drv.mu.Lock()
	if r := drv.ready(); r != cudadev.Success {
		drv.mu.Unlock()
		return result(r)
	}
	s, r := drv.stream(h(unsafe.Pointer(hStream)))
	if r != cudadev.Success {
		drv.mu.Unlock()
		return result(r)
	}
	due := drv.syncStream(s)
	sticky := s.ctx.sticky
	drv.mu.Unlock()
	sleepUntil(due)
	return result(sticky)
}

//export cuEventCreate
func cuEventCreate(ph *C.CUevent, flags C.uint) C.CUresult {
	return call(func() int {
		ctx := drv.currentContext()
		if ctx == nil {
			return cudadev.ErrorInvalidContext
		}
		if ph == nil || flags&^0xF != 0 { // BLOCKING_SYNC | DISABLE_TIMING | INTERPROCESS
			return cudadev.ErrorInvalidValue
		}
		e := &event{ctx: ctx}
		e.handle = drv.give(e, unsafe.Pointer(ph))
		return cudadev.Success
	})
}

//export cuEventRecord
func cuEventRecord(hEvent C.CUevent, hStream C.CUstream) C.CUresult {
	return callOn(unsafe.Pointer(hEvent), func(e *event) int {
		s, r := drv.stream(h(unsafe.Pointer(hStream)))
		if r != cudadev.Success {
			return r
		}
		if s.ctx != e.ctx {
			return cudadev.ErrorInvalidHandle
		}
		drv.record(e, s)
		return cudadev.Success
	})
}

//export cuEventSynchronize
func cuEventSynchronize(hEvent C.CUevent) C.CUresult {
	drv.mu.Lock()
	if r := drv.ready(); r != cudadev.Success {
		drv.mu.Unlock()
		return result(r)
	}
	e, ok := drv.handles[h(unsafe.Pointer(hEvent))].(*event)
	if !ok {
		drv.mu.Unlock()
		return result(cudadev.ErrorInvalidHandle)
	}
	var due time.Time
	sticky := cudadev.Success
	if e.recorded {
		drv.flush(e.stream)
		if e.at == e.stream.clock {
			e.stream.idle = true
		}
		due, sticky = e.due, e.ctx.sticky
	}
	drv.mu.Unlock()
	sleepUntil(due)
	return result(sticky)
}

//export cuEventElapsedTime
func cuEventElapsedTime(ms *C.float, hStart, hEnd C.CUevent) C.CUresult {
	return call(func() int {
		start, ok1 := drv.handles[h(unsafe.Pointer(hStart))].(*event)
		end, ok2 := drv.handles[h(unsafe.Pointer(hEnd))].(*event)
		if !ok1 || !ok2 || !start.recorded || !end.recorded {
			return cudadev.ErrorInvalidHandle
		}
		if ms == nil {
			return cudadev.ErrorInvalidValue
		}
		if now := time.Now(); now.Before(start.due) || now.Before(end.due) {
			return cudadev.ErrorNotReady
		}
		*ms = C.float(float64(end.at-start.at) / 1e6)
		return cudadev.Success
	})
}

//export cuEventElapsedTime_v2
func cuEventElapsedTime_v2(ms *C.float, hStart, hEnd C.CUevent) C.CUresult {
	return cuEventElapsedTime(ms, hStart, hEnd)
}

//export cuEventDestroy_v2
func cuEventDestroy_v2(hEvent C.CUevent) C.CUresult {
	return callOn(unsafe.Pointer(hEvent), func(e *event) int {
		delete(drv.handles, e.handle)
		return cudadev.Success
	})
}

var cStrings = map[string]*C.char{}

// cString is a C copy of s that lives as long as the process (cuGetError* hand out static strings).
func cString(s string) *C.char {
	drv.mu.Lock()
	defer drv.mu.Unlock()
	if p, ok := cStrings[s]; ok {
		return p
	}
	p := C.CString(s)
	cStrings[s] = p
	return p
}

//export cuGetErrorName
func cuGetErrorName(code C.CUresult, out **C.char) C.CUresult {
	return errorText(cudadev.Names, code, out)
}

//export cuGetErrorString
func cuGetErrorString(code C.CUresult, out **C.char) C.CUresult {
	return errorText(cudadev.Texts, code, out)
}

func errorText(table map[int]string, code C.CUresult, out **C.char) C.CUresult {
	if out == nil {
		return result(cudadev.ErrorInvalidValue)
	}
	text, ok := table[int(code)]
	if !ok {
		*out = nil
		return result(cudadev.ErrorInvalidValue)
	}
	*out = cString(text)
	return result(cudadev.Success)
}
