package main

import (
	"os"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"gpuready.lab/silicon/cudadev"
	"gpuready.lab/silicon/machine"
)

// The emulated driver's objects. One lock guards them all: the product's tools are single-threaded
// and a lock per call costs nothing next to a copy.

const (
	handleBase = 0x10000 // opaque handles are small numbers, far below any Go or C heap address
	vaBase     = 0x7f0000000000
	vaAlign    = 2 << 20
	// defaultTimeScale: the real time a stream spends per modelled second (see timing in doc.go).
	defaultTimeScale = 0.25
	// localCopyGBps: a copy within one GPU's memory; the product does not time it.
	localCopyGBps = 1000.0
	// kernelTime: what a launch adds to its stream's clock (vectorAdd on 50 000 floats is microseconds).
	kernelTime = 10 * time.Microsecond
)

type device struct {
	ordinal int
	gpu     *machine.GPU
	name    string // cuDeviceGetName: the GPU's, or "<GPU> MIG <profile>" for a MIG device
	total   uint64 // bytes cuMemAlloc may hand out
	used    uint64
	primary *context
}

type context struct {
	handle   uintptr
	dev      *device
	retained int
	peers    map[*context]bool
	null     *stream // the legacy default stream (CUstream 0)
	sticky   int     // an error a kernel raised, returned by every later synchronisation
}

type copyKind int

const (
	hostToDevice copyKind = iota
	deviceToHost
	deviceToDevice
)

type copyOp struct {
	kind     copyKind
	dst, src uint64         // device addresses (the one of a host copy; 0 for the other side)
	host     unsafe.Pointer // the host side of a host copy: the caller's memory
	n        uint64
}

type stream struct {
	handle  uintptr
	ctx     *context
	clock   int64 // modelled nanoseconds (see doc.go: events read this clock)
	idle    bool  // synchronized since its last operation: the next one starts at wall-clock now
	due     time.Time
	pending *copyOp // the last enqueued copy, not yet done (identical repeats are done once)
}

type event struct {
	handle   uintptr
	ctx      *context
	recorded bool
	stream   *stream
	at       int64
	due      time.Time
}

type module struct {
	handle  uintptr
	ctx     *context
	kernels map[string]bool // entries this library can run
}

type function struct {
	handle uintptr
	module *module
	name   string
}

type backing struct {
	ptr  unsafe.Pointer
	size uint64
	refs int
}

type allocation struct {
	base, size uint64
	dev        *device
	data       *backing
}

type driver struct {
	mu          sync.Mutex
	initResult  int
	initialized bool
	machine     *machine.Machine
	devices     []*device
	handles     map[uintptr]any
	nextHandle  uintptr
	allocs      map[uint64]*allocation
	nextVA      uint64
	host        map[uintptr]uint64
	current     map[int]*context // per OS thread, as cuCtxSetCurrent is
	scale       float64
	start       time.Time
}

var drv = &driver{
	handles:    map[uintptr]any{},
	nextHandle: handleBase,
	allocs:     map[uint64]*allocation{},
	nextVA:     vaBase,
	host:       map[uintptr]uint64{},
	current:    map[int]*context{},
	scale:      timeScale(),
	start:      time.Now(),
}

func timeScale() float64 {
	if v, err := strconv.ParseFloat(os.Getenv("GPUREADY_LAB_CUDA_TIME_SCALE"), 64); err == nil && v >= 0 {
		return v
	}
	return defaultTimeScale
}

func (d *driver) now() int64 { return int64(time.Since(d.start)) }

func (d *driver) newHandle(obj any) uintptr {
	d.nextHandle += 16
	d.handles[d.nextHandle] = obj
	return d.nextHandle
}

// give registers obj under a new handle and writes that handle to the caller's *out; returns it.
func (d *driver) give(obj any, out unsafe.Pointer) uintptr {
	handle := d.newHandle(obj)
	putHandle(out, handle)
	return handle
}

// cuInit's answer, from the machine as it is at the first call (the driver enumerates once).
func (d *driver) init() int {
	if d.initialized {
		return d.initResult
	}
	d.initialized = true
	d.initResult = d.enumerate()
	return d.initResult
}

func (d *driver) enumerate() int {
	m, found, result := cudadev.Enumerate()
	if result != cudadev.Success {
		return result
	}
	devices := make([]*device, len(found))
	for i, f := range found {
		devices[i] = &device{ordinal: i, gpu: f.GPU, name: f.Name, total: f.Total}
	}
	d.machine, d.devices = m, devices
	for _, dev := range devices {
		ctx := &context{dev: dev, peers: map[*context]bool{}}
		ctx.handle = d.newHandle(ctx)
		ctx.null = &stream{ctx: ctx, idle: true}
		dev.primary = ctx
	}
	return cudadev.Success
}

func (d *driver) ready() int {
	if !d.initialized || d.initResult != cudadev.Success {
		return cudadev.ErrorNotInitialized
	}
	return cudadev.Success
}

func (d *driver) device(ordinal int) *device {
	if ordinal < 0 || ordinal >= len(d.devices) {
		return nil
	}
	return d.devices[ordinal]
}

func (d *driver) currentContext() *context {
	return d.current[currentThread()]
}

func (d *driver) context(h uintptr) *context {
	ctx, _ := d.handles[h].(*context)
	return ctx
}

// stream resolves a CUstream argument: 0 is the current context's default stream.
func (d *driver) stream(h uintptr) (*stream, int) {
	if h == 0 {
		ctx := d.currentContext()
		if ctx == nil {
			return nil, cudadev.ErrorInvalidContext
		}
		return ctx.null, cudadev.Success
	}
	s, ok := d.handles[h].(*stream)
	if !ok {
		return nil, cudadev.ErrorInvalidHandle
	}
	return s, cudadev.Success
}

func (d *driver) streams() []*stream {
	var out []*stream
	for _, dev := range d.devices {
		out = append(out, dev.primary.null)
	}
	for _, obj := range d.handles {
		if s, ok := obj.(*stream); ok {
			out = append(out, s)
		}
	}
	return out
}

// flushAll does every deferred copy: before memory is freed, read or written outside a stream.
func (d *driver) flushAll() {
	for _, s := range d.streams() {
		d.flush(s)
	}
}

// --- memory ---------------------------------------------------------------------------------

// lookup is the allocation holding [addr, addr+n), and the offset of addr in it.
func (d *driver) lookup(addr, n uint64) (*allocation, uint64) {
	for _, a := range d.allocs {
		if addr >= a.base && addr < a.base+a.size {
			if n > a.size-(addr-a.base) {
				return nil, 0
			}
			return a, addr - a.base
		}
	}
	return nil, 0
}

func (d *driver) alloc(dev *device, size uint64) (uint64, int) {
	if size == 0 {
		return 0, cudadev.ErrorInvalidValue
	}
	if dev.used+size > dev.total {
		return 0, cudadev.ErrorOutOfMemory
	}
	p := cAlloc(size)
	if p == nil {
		return 0, cudadev.ErrorOutOfMemory
	}
	base := d.nextVA
	d.nextVA += (size+vaAlign-1)/vaAlign*vaAlign + vaAlign // a gap, so an overrun is an illegal address
	d.allocs[base] = &allocation{base: base, size: size, dev: dev, data: &backing{ptr: p, size: size, refs: 1}}
	dev.used += size
	return base, cudadev.Success
}

func release(b *backing) {
	b.refs--
	if b.refs == 0 {
		cFree(b.ptr, b.size)
	}
}

func (d *driver) free(base uint64) int {
	a, ok := d.allocs[base]
	if !ok {
		return cudadev.ErrorInvalidValue
	}
	d.flushAll()
	release(a.data)
	a.dev.used -= a.size
	delete(d.allocs, base)
	return cudadev.Success
}

// writable gives the allocation memory of its own before a write (device-to-device copies of whole
// buffers share memory until one side is written: the product's peer test copies 256 MiB buffers
// 25 times per GPU pair, which would otherwise cost seconds of memcpy). whole: the write covers
// the entire allocation, so the shared contents need not be copied.
func writable(a *allocation, whole bool) {
	if a.data.refs == 1 {
		return
	}
	p := cAlloc(a.size)
	if !whole {
		cCopy(p, a.data.ptr, a.size)
	}
	release(a.data)
	a.data = &backing{ptr: p, size: a.size, refs: 1}
}

func (a *allocation) at(offset uint64) unsafe.Pointer {
	return unsafe.Add(a.data.ptr, offset)
}

// do performs one copy now. Addresses were checked when it was enqueued and frees flush first.
func (d *driver) do(op copyOp) {
	switch op.kind {
	case hostToDevice:
		a, off := d.lookup(op.dst, op.n)
		writable(a, off == 0 && op.n == a.size)
		cCopy(a.at(off), op.host, op.n)
	case deviceToHost:
		a, off := d.lookup(op.src, op.n)
		cCopy(op.host, a.at(off), op.n)
	case deviceToDevice:
		dst, doff := d.lookup(op.dst, op.n)
		src, soff := d.lookup(op.src, op.n)
		if dst.data == src.data && doff == soff {
			return
		}
		if doff == 0 && soff == 0 && op.n == dst.size && op.n == src.size {
			release(dst.data)
			dst.data = src.data
			src.data.refs++
			return
		}
		writable(dst, doff == 0 && op.n == dst.size)
		cCopy(dst.at(doff), src.at(soff), op.n)
	}
}

// --- streams, timing ------------------------------------------------------------------------

// modelled is how long n bytes take at gbps (10^9 bytes/s).
func modelled(n uint64, gbps float64) time.Duration {
	return time.Duration(float64(n) / gbps) // bytes / (GB/s) = ns
}

// enqueue puts work of modelled duration dur on s. A copy is deferred and an identical copy enqueued
// right after it is done once: nothing can observe the difference before the stream synchronizes
// (a host buffer changed while a copy from it is queued is a race in CUDA too), and the product
// times 8 identical 256 MiB copies per sample.
func (d *driver) enqueue(s *stream, op *copyOp, dur time.Duration) {
	if s.idle {
		s.clock = max(s.clock, d.now())
		s.idle = false
	}
	s.clock += int64(dur)
	now := time.Now()
	if s.due.Before(now) {
		s.due = now
	}
	s.due = s.due.Add(time.Duration(float64(dur) * d.scale))
	if op == nil {
		return
	}
	if s.pending != nil && *s.pending == *op {
		return
	}
	d.flush(s)
	s.pending = op
}

func (d *driver) flush(s *stream) {
	if s.pending != nil {
		op := *s.pending
		s.pending = nil
		d.do(op)
	}
}

// syncStream does s's deferred work and returns when its modelled work is over (scaled); the
// caller must not hold the lock while it sleeps, so the wait is returned.
func (d *driver) syncStream(s *stream) time.Time {
	d.flush(s)
	s.idle = true
	return s.due
}

func sleepUntil(t time.Time) {
	if wait := time.Until(t); wait > 0 {
		time.Sleep(wait)
	}
}

func (d *driver) record(e *event, s *stream) {
	if s.idle {
		s.clock = max(s.clock, d.now())
		s.idle = false
	}
	e.recorded, e.stream, e.at = true, s, s.clock
	e.due = s.due
}
