"""vectorAdd on every CUDA device of this machine through the CUDA driver API: no container, no compiler.

Why the driver API and hand-written PTX: a GPU runner may have only the driver installed. ``libcuda.so.1`` ships
with the driver and JIT-compiles PTX for whatever GPU it finds, so a 30-line PTX kernel loaded with
``cuModuleLoadData`` proves the whole path (driver, JIT, memory copies, kernel launch) on each GPU.

Run as ``python -m gpuready.conformance.cuda.vector_add``: it prints one line per device and exits 0 when every device
passed, 1 when one failed, and ``NO_LIBCUDA`` (3) when this machine has no CUDA driver library. A separate
process, so a driver crash cannot take the test session with it.
"""

from __future__ import annotations

import ctypes
import sys
from array import array
from collections.abc import Sequence

from gpuready.conformance.cuda.driver import NO_LIBCUDA, CudaDriver, CudaError, load_libcuda
from gpuready.nvidia.cuda import VECTOR_ADD_PASSED as PASSED

ELEMENTS = 50_000
BLOCK = 256

# vectorAdd: c[i] = a[i] + b[i] for i < n. PTX ISA 6.0 / sm_50: every driver since CUDA 9 JIT-compiles it for
# any later GPU (Maxwell to Blackwell).
PTX = r"""
.version 6.0
.target sm_50
.address_size 64

.visible .entry vectorAdd(
    .param .u64 param_a,
    .param .u64 param_b,
    .param .u64 param_c,
    .param .u32 param_n
)
{
    .reg .pred  %p<2>;
    .reg .b32   %r<6>;
    .reg .f32   %f<4>;
    .reg .b64   %rd<11>;

    ld.param.u64    %rd1, [param_a];
    ld.param.u64    %rd2, [param_b];
    ld.param.u64    %rd3, [param_c];
    ld.param.u32    %r2, [param_n];
    mov.u32         %r3, %ctaid.x;
    mov.u32         %r4, %ntid.x;
    mov.u32         %r5, %tid.x;
    mad.lo.s32      %r1, %r3, %r4, %r5;
    setp.ge.s32     %p1, %r1, %r2;
    @%p1 bra        DONE;
    cvta.to.global.u64  %rd4, %rd1;
    cvta.to.global.u64  %rd5, %rd2;
    cvta.to.global.u64  %rd6, %rd3;
    mul.wide.s32    %rd7, %r1, 4;
    add.s64         %rd8, %rd4, %rd7;
    add.s64         %rd9, %rd5, %rd7;
    add.s64         %rd10, %rd6, %rd7;
    ld.global.f32   %f1, [%rd8];
    ld.global.f32   %f2, [%rd9];
    add.f32         %f3, %f1, %f2;
    st.global.f32   [%rd10], %f3;
DONE:
    ret;
}
"""
KERNEL = b"vectorAdd"


def grid_for(elements: int, block: int = BLOCK) -> int:
    """Blocks needed so that ``grid * block >= elements`` (the kernel masks the excess threads)."""
    if elements <= 0 or block <= 0:
        raise ValueError("elements and block must be positive")
    return (elements + block - 1) // block


def kernel_params(
    device_pointers: Sequence[int], elements: int
) -> tuple[ctypes.Array[ctypes.c_void_p], list[ctypes._SimpleCData]]:
    """``cuLaunchKernel``'s ``kernelParams``: an array of pointers, one per kernel parameter, each pointing at
    that parameter's value (three u64 device pointers and a u32 count, in the PTX's order). The values list must
    be kept alive until the launch returns."""
    values: list[ctypes._SimpleCData] = [ctypes.c_uint64(p) for p in device_pointers]
    values.append(ctypes.c_uint32(elements))
    params = (ctypes.c_void_p * len(values))(*(ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values))
    return params, values


def inputs(elements: int) -> tuple[array, array, array]:
    """Deterministic inputs whose sums are exact in float32, and the expected result."""
    a = array("f", (float(i % 1000) for i in range(elements)))
    b = array("f", (float((i * 7) % 1000) / 4 for i in range(elements)))
    expected = array("f", (x + y for x, y in zip(a, b, strict=True)))
    return a, b, expected


def run_on_device(cuda: CudaDriver, ordinal: int, elements: int = ELEMENTS) -> str:
    """vectorAdd on one device; the device's name and the verdict line."""
    device = ctypes.c_int()
    cuda("cuDeviceGet", ctypes.byref(device), ordinal)
    name = ctypes.create_string_buffer(256)
    cuda("cuDeviceGetName", name, 256, device)
    # The primary context (what the runtime API uses): its entry points are the same from CUDA 7 to 13.
    context = ctypes.c_void_p()
    cuda("cuDevicePrimaryCtxRetain", ctypes.byref(context), device)
    try:
        cuda("cuCtxSetCurrent", context)
        module = ctypes.c_void_p()
        cuda("cuModuleLoadData", ctypes.byref(module), ctypes.c_char_p(PTX.encode()))
        function = ctypes.c_void_p()
        cuda("cuModuleGetFunction", ctypes.byref(function), module, KERNEL)
        a, b, expected = inputs(elements)
        size = elements * 4
        pointers = []
        for _ in range(3):
            allocated = ctypes.c_uint64()
            cuda("cuMemAlloc_v2", ctypes.byref(allocated), ctypes.c_size_t(size))
            pointers.append(allocated.value)
        try:
            for pointer, host in zip(pointers, (a, b), strict=False):
                cuda(
                    "cuMemcpyHtoD_v2",
                    ctypes.c_uint64(pointer),
                    ctypes.c_void_p(host.buffer_info()[0]),
                    ctypes.c_size_t(size),
                )
            params, _keep = kernel_params(pointers, elements)
            grid = grid_for(elements)
            cuda("cuLaunchKernel", function, grid, 1, 1, BLOCK, 1, 1, 0, None, params, None)
            cuda("cuCtxSynchronize")
            result = array("f", bytes(size))
            cuda(
                "cuMemcpyDtoH_v2",
                ctypes.c_void_p(result.buffer_info()[0]),
                ctypes.c_uint64(pointers[2]),
                ctypes.c_size_t(size),
            )
        finally:
            for pointer in pointers:
                cuda("cuMemFree_v2", ctypes.c_uint64(pointer))
        cuda("cuModuleUnload", module)
    finally:
        cuda("cuDevicePrimaryCtxRelease_v2", device)
    wrong = next((i for i in range(elements) if result[i] != expected[i]), None)
    label = f"CUDA device {ordinal} ({name.value.decode()})"
    if wrong is not None:
        return f"{label}: vectorAdd of {elements} elements: Test FAILED at element {wrong}: {result[wrong]} != {expected[wrong]}"
    return f"{label}: vectorAdd of {elements} elements: {PASSED}"


def main() -> int:
    lib = load_libcuda()
    if lib is None:
        print("no libcuda.so.1 on this machine (no NVIDIA driver): vectorAdd cannot run", file=sys.stderr)
        return NO_LIBCUDA
    cuda = CudaDriver(lib)
    try:
        cuda("cuInit", 0)
        count = ctypes.c_int()
        cuda("cuDeviceGetCount", ctypes.byref(count))
    except CudaError as exc:
        print(f"CUDA does not start: {exc}", file=sys.stderr)
        return 1
    ok = True
    for ordinal in range(count.value):
        try:
            line = run_on_device(cuda, ordinal)
        except CudaError as exc:
            line = f"CUDA device {ordinal}: vectorAdd: Test FAILED: {exc}"
        ok = ok and line.endswith(PASSED)
        print(line, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
