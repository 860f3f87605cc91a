package main

/*
#include "shim.h"
*/
import "C"

import (
	"slices"
	"time"
	"unsafe"
)

// An event set watches registered GPUs for XIDs: the machine's XIDs are its faults (machine.XIDs),
// so an XID fault injected after registration is delivered once, as the driver raises an XID once.
type eventSet struct {
	types map[int]C.ulonglong // GPU index -> registered event types
	seen  map[int][]int       // GPU index -> XIDs already raised (present at registration or delivered)
	queue []C.nvmlEventData_t
}

var (
	sets    = map[C.nvmlEventSet_t]*eventSet{}
	pollGap = 50 * time.Millisecond
)

// supportedEvents: what a real H200 answered (580.159.04): every event type but 0x20 and 0x40. A set may register
// any of them; only XID, single- and double-bit ECC events are ever raised here (the faults that have them).
const supportedEvents = 0xFF9F

//export nvmlEventSetCreate
func nvmlEventSetCreate(out *C.nvmlEventSet_t) C.nvmlReturn_t {
	if !initialized() {
		return C.NVML_ERROR_UNINITIALIZED
	}
	if out == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	p := (*C.struct_nvmlEventSet_st)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_nvmlEventSet_st{}))))
	set := C.nvmlEventSet_t{handle: p}
	mu.Lock()
	sets[set] = &eventSet{types: map[int]C.ulonglong{}, seen: map[int][]int{}}
	mu.Unlock()
	*out = set
	return C.NVML_SUCCESS
}

//export nvmlEventSetFree
func nvmlEventSetFree(set C.nvmlEventSet_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	if _, ok := sets[set]; !ok {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	delete(sets, set)
	C.free(unsafe.Pointer(set.handle))
	return C.NVML_SUCCESS
}

//export nvmlDeviceGetSupportedEventTypes
func nvmlDeviceGetSupportedEventTypes(h C.nvmlDevice_t, types *C.ulonglong) C.nvmlReturn_t {
	return set(get, h, types, func(*device) C.ulonglong { return supportedEvents })
}

//export nvmlDeviceRegisterEvents
func nvmlDeviceRegisterEvents(h C.nvmlDevice_t, types C.ulonglong, set C.nvmlEventSet_t) C.nvmlReturn_t {
	d, rc := get(h)
	if rc != C.NVML_SUCCESS {
		return rc
	}
	if types&^supportedEvents != 0 {
		return C.NVML_ERROR_NOT_SUPPORTED
	}
	mu.Lock()
	defer mu.Unlock()
	es, ok := sets[set]
	if !ok {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	idx := d.g.Index
	if _, known := es.types[idx]; !known {
		es.seen[idx] = d.m.XIDs(idx)
	}
	es.types[idx] |= types
	return C.NVML_SUCCESS
}

// poll queues the XIDs raised since the last look; called with mu held.
func (es *eventSet) poll() {
	m, err := currentLocked()
	if err != nil {
		return
	}
	for idx, types := range es.types {
		now := m.XIDs(idx)
		if types&C.nvmlEventTypeXidCriticalError != 0 {
			for _, x := range now {
				if slices.Contains(es.seen[idx], x) {
					continue
				}
				es.queue = append(es.queue, C.nvmlEventData_t{
					device:            handleLocked(devKey{idx, -1, -1}),
					eventType:         C.nvmlEventTypeXidCriticalError,
					eventData:         C.ulonglong(x),
					gpuInstanceId:     0xFFFFFFFF,
					computeInstanceId: 0xFFFFFFFF,
				})
			}
		}
		es.seen[idx] = now // a cleared fault can be raised again
	}
}

//export nvmlEventSetWait_v2
func nvmlEventSetWait_v2(set C.nvmlEventSet_t, data *C.nvmlEventData_t, timeoutMs C.uint) C.nvmlReturn_t {
	if !initialized() {
		return C.NVML_ERROR_UNINITIALIZED
	}
	if data == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	deadline := time.Now().Add(time.Duration(timeoutMs) * time.Millisecond)
	for {
		mu.Lock()
		es, ok := sets[set]
		if !ok {
			mu.Unlock()
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		es.poll()
		if len(es.queue) > 0 {
			*data = es.queue[0]
			es.queue = es.queue[1:]
			mu.Unlock()
			return C.NVML_SUCCESS
		}
		mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 {
			return C.NVML_ERROR_TIMEOUT
		}
		time.Sleep(min(left, pollGap))
	}
}

// nvmlEventSetWait is the legacy entry point, whose event data lacks the GPU/compute instance ids.
//
//export nvmlEventSetWait
func nvmlEventSetWait(set C.nvmlEventSet_t, data *C.gpureadyEventData_v1_t, timeoutMs C.uint) C.nvmlReturn_t {
	if data == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	var full C.nvmlEventData_t
	rc := nvmlEventSetWait_v2(set, &full, timeoutMs)
	if rc == C.NVML_SUCCESS {
		*data = C.gpureadyEventData_v1_t{device: full.device, eventType: full.eventType, eventData: full.eventData}
	}
	return rc
}
