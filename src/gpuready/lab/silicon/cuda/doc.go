// Command cuda is the lab's mock CUDA driver, libcuda.so.1 (go build -buildmode=c-shared): the CUDA
// driver API entry points gpuready's local GPU tools call through ctypes (gpuready.conformance.cuda:
// vectorAdd and copy bandwidth), answering from the lab's one emulated machine (package machine:
// hardware.json, driver state, the effects of faults), so those tools run in the lab unchanged and each fault shows
// up in them as on a real node.
//
// Why a library and not a Python stub: the product loads libcuda.so.1 by name and calls it with C
// types; only a real shared library at that interface tests the product's ctypes declarations,
// argument types and error handling (the DESIGN's "emulate only the silicon").
//
// Devices and cuInit (the machine is read once, at the first cuInit, as a driver enumerates once): the
// devices and the answer are package cudadev's (Enumerate: GPUs off the bus missing, the device nodes this
// process has, one MIG device per process, the driver mismatch and fabric errors), which the emulated
// nvbandwidth reads too. This library does not read CUDA_VISIBLE_DEVICES.
//   - before a successful cuInit every call but cuDriverGetVersion and cuGetError* returns
//     CUDA_ERROR_NOT_INITIALIZED.
//
// Memory: device allocations are host memory this library owns (outside Go's heap), addressed by
// opaque device pointers with a gap between allocations; copies really copy the bytes and a range
// outside an allocation is CUDA_ERROR_INVALID_VALUE. Each device's allocations are limited to its
// memory less the driver's reservation (CUDA_ERROR_OUT_OF_MEMORY beyond). Two shortcuts keep the
// product's 256 MiB bandwidth buffers cheap, neither visible to a correct program: an async copy
// identical to the one queued just before it on the same stream is done once (at the next
// synchronisation; a host buffer changed while a copy from it is queued is a race in CUDA too), and
// a device-to-device copy of a whole buffer into a whole buffer shares the memory until either is
// written (copy on write).
//
// Kernels (kernels.go): PTX is not compiled. cuModuleLoadData accepts PTX text (.version and .target;
// else CUDA_ERROR_INVALID_IMAGE) and cuModuleGetFunction finds the entries this library implements, by
// name and parameter list (vectorAdd(u64 a, u64 b, u64 c, u32 n): c[i] = a[i] + b[i], really computed
// over the launched grid); any other entry is CUDA_ERROR_NOT_FOUND. An operand outside its allocation
// is CUDA_ERROR_ILLEGAL_ADDRESS, returned by the next synchronisation as a GPU fault is.
//
// Timing (machine/bandwidth.go: the model the emulated nvbandwidth prints): host<->device copies move at 85% of the GPU's current PCIe link (a fault's PCIe effects lower it), peer
// copies at 80% of the NVLink rate (links x per-link rate) or, without NVLink (nvlink_down on either
// GPU), at 80% of the slower PCIe link on the same NUMA node; across NUMA nodes peer access is
// impossible (cuDeviceCanAccessPeer 0, cuCtxEnablePeerAccess CUDA_ERROR_PEER_ACCESS_UNSUPPORTED) and
// a peer copy is staged through host memory. A fault's bandwidth_factor scales every copy involving the GPU.
// Each stream has a modelled clock: an operation advances it by its modelled duration, starting at
// wall-clock now when the stream was idle (synchronised); CUDA events record that clock, so
// cuEventElapsedTime reports the modelled time exactly, whatever the load of the machine running the
// lab. The stream also really takes time: synchronising waits until GPUREADY_LAB_CUDA_TIME_SCALE
// (default 0.25) times the modelled duration has passed, so a program sees copies take time without
// the product's bandwidth run (~3 s modelled on 8 x H100) taking that long; cuEventElapsedTime of an
// event whose (scaled) time has not come is CUDA_ERROR_NOT_READY, as for an event still pending.
//
// Not modelled: ECC and DCGM memory faults (other tools report them), kernels other than vectorAdd,
// CUDA_VISIBLE_DEVICES, the runtime API, a GPU falling off the bus while a process runs.
package main
