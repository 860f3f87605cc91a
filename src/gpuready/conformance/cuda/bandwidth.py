"""Copy bandwidth of this machine's GPUs through the CUDA driver API, printed as ``nvbandwidth -j`` prints it.

The diag layer reads one document for every way it measures (:mod:`gpuready.nvidia.nvbandwidth`): NVIDIA's
``nvbandwidth`` on a node, the lab's emulated one, and this module where neither is installed but the driver is
(``--connection local`` on a GPU runner). Like :mod:`gpuready.conformance.cuda.vector_add` it needs only ``libcuda.so.1``,
which ships with the driver: no toolkit, no compiler, no kernel (every copy here is a copy-engine copy).

What it measures, with nvbandwidth's testcase names:

* ``host_to_device_memcpy_ce`` / ``device_to_host_memcpy_ce``: per device, a pinned, portable host buffer
  (``cuMemHostAlloc``) and a device buffer of ``BUFFER_MIB`` MiB; ``COPIES`` async copies on a stream between
  two events, ``SAMPLES`` times, after a warm-up copy; the median sample is reported, as nvbandwidth does.
* ``device_to_device_memcpy_read_ce``: for every ordered pair (row, column) that ``cuDeviceCanAccessPeer``
  allows, peer access is enabled and the row device copies the column device's buffer into its own
  (``cuMemcpyPeerAsync`` on the row's stream, the read direction); other pairs are ``N/A``, and the testcase
  is ``Waived`` when no pair can (one GPU), as in nvbandwidth.

GB/s are 10^9 bytes per second. Run as ``python -m gpuready.conformance.cuda.bandwidth``: prints the JSON document and
exits 0 when every testcase passed, 1 when a CUDA call failed (the document names the call and its CUresult,
under the testcase or, where nothing could start, at the top level), and ``NO_LIBCUDA`` (3) with a one-line
message on stderr where there is no ``libcuda.so.1``. A separate process, so a driver crash cannot take the
test session with it.
"""

from __future__ import annotations

import ctypes
import json
import socket
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuready.conformance.cuda.driver import NO_LIBCUDA, CudaDriver, CudaError, load_libcuda

BUFFER_MIB = 256
COPIES = 8  # copies per timed sample
SAMPLES = 3  # timed samples per figure; the median is reported
VERSION = "gpuready-cuda_bandwidth"

HOST_TO_DEVICE = "host_to_device_memcpy_ce"
DEVICE_TO_HOST = "device_to_host_memcpy_ce"
DEVICE_TO_DEVICE_READ = "device_to_device_memcpy_read_ce"
DESCRIPTIONS = {
    HOST_TO_DEVICE: "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
    DEVICE_TO_HOST: "memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)",
    DEVICE_TO_DEVICE_READ: "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
}

# cuda.h
CU_MEMHOSTALLOC_PORTABLE = 0x01
CU_STREAM_NON_BLOCKING = 0x1
CU_EVENT_DEFAULT = 0x0
CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33
CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34
CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50
CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704


# ---- pure: timings to GB/s, measurements to the document ------------------------------------------
def gbps(nbytes: int, copies: int, elapsed_ms: float) -> float:
    """GB/s of ``copies`` copies of ``nbytes`` bytes that took ``elapsed_ms`` milliseconds between events."""
    if nbytes <= 0 or copies <= 0 or not elapsed_ms > 0:
        raise ValueError(f"need positive bytes, copies and time, got {nbytes}, {copies}, {elapsed_ms} ms")
    return nbytes * copies / (elapsed_ms / 1000) / 1e9


def median_gbps(nbytes: int, copies: int, samples_ms: Sequence[float]) -> float:
    """The median of the samples' bandwidths (nvbandwidth's default; its ``--useMean`` is not offered)."""
    if not samples_ms:
        raise ValueError("no timed samples")
    return statistics.median(gbps(nbytes, copies, ms) for ms in samples_ms)


@dataclass
class Measurements:
    """What one run measured, keyed by CUDA ordinal; ``errors`` maps a testcase to why it stopped."""

    devices: list[str]  # getDeviceDisplayInfo-style "NAME (dddddddd:bb:dd)", one per ordinal
    host_to_device: dict[int, float] = field(default_factory=dict)
    device_to_host: dict[int, float] = field(default_factory=dict)
    peer: dict[tuple[int, int], float] = field(default_factory=dict)
    peer_pairs: set[tuple[int, int]] = field(default_factory=set)  # ordered pairs with peer access
    errors: dict[str, str] = field(default_factory=dict)


def _cell(value: float | None) -> str:
    return "N/A" if value is None else f"{value:g}"  # C++ ostream << double: 6 significant digits


def _testcase(name: str, rows: list[list[float | None]], error: str | None) -> dict:
    entry: dict = {"name": name, "status": "Error" if error else "Passed"}
    if error:
        entry["error"] = error
    entry["bandwidth_description"] = DESCRIPTIONS[name]
    entry["bandwidth_matrix"] = [[_cell(v) for v in row] for row in rows]
    entry["sum"] = sum(v for row in rows for v in row if v is not None)
    return entry


def build_document(
    m: Measurements,
    *,
    driver_version: str | None,
    cuda_version: int | None,
    hostname: str,
    error: str | None = None,
) -> dict:
    """The ``nvbandwidth -j`` document for ``m`` (``error``: the run could not start; no testcases then)."""
    body: dict = {"version": VERSION, "git_version": VERSION}
    if cuda_version is not None:
        body["CUDA Runtime Version"] = cuda_version
    if driver_version is not None:
        body["Driver Version"] = driver_version
    if error is not None:
        body["error"] = error
        return {"nvbandwidth": body}
    count = len(m.devices)
    body["GPU Device list"] = [f"{n}: {info}: ({hostname})" for n, info in enumerate(m.devices)]
    cases = [
        _testcase(
            HOST_TO_DEVICE, [[m.host_to_device.get(d) for d in range(count)]], m.errors.get(HOST_TO_DEVICE)
        ),
        _testcase(
            DEVICE_TO_HOST, [[m.device_to_host.get(d) for d in range(count)]], m.errors.get(DEVICE_TO_HOST)
        ),
    ]
    if m.peer_pairs or m.errors.get(DEVICE_TO_DEVICE_READ):
        rows = [[m.peer.get((r, c)) for c in range(count)] for r in range(count)]
        cases.append(_testcase(DEVICE_TO_DEVICE_READ, rows, m.errors.get(DEVICE_TO_DEVICE_READ)))
    else:
        cases.append({"name": DEVICE_TO_DEVICE_READ, "status": "Waived"})
    body["testcases"] = cases
    return {"nvbandwidth": body}


def render(document: Mapping) -> str:
    return json.dumps(document, indent="\t", sort_keys=True) + "\n"


def _driver_version() -> str | None:
    """The driver's version as NVML reports it (what nvbandwidth prints); None where NVML is not there."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    buffer = ctypes.create_string_buffer(80)
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        if nvml.nvmlSystemGetDriverVersion(buffer, 80) != 0:
            return None
        return buffer.value.decode()
    finally:
        nvml.nvmlShutdown()


@dataclass
class _Device:
    ordinal: int
    handle: ctypes.c_int
    context: ctypes.c_void_p
    stream: ctypes.c_void_p
    start: ctypes.c_void_p
    stop: ctypes.c_void_p
    device_buffer: ctypes.c_uint64
    host_buffer: ctypes.c_void_p


class _Bench:
    def __init__(self, cuda: CudaDriver, nbytes: int) -> None:
        self.cuda = cuda
        self.nbytes = nbytes
        self.devices: list[_Device] = []

    def display_info(self, handle: ctypes.c_int) -> str:
        name = ctypes.create_string_buffer(256)
        self.cuda("cuDeviceGetName", name, 256, handle)
        values = []
        for attribute in (
            CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID,
            CU_DEVICE_ATTRIBUTE_PCI_BUS_ID,
            CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID,
        ):
            value = ctypes.c_int()
            self.cuda("cuDeviceGetAttribute", ctypes.byref(value), attribute, handle)
            values.append(value.value)
        return f"{name.value.decode()} ({values[0]:08x}:{values[1]:02x}:{values[2]:02x})"

    def open(self, ordinal: int) -> _Device:
        cuda = self.cuda
        handle = ctypes.c_int()
        cuda("cuDeviceGet", ctypes.byref(handle), ordinal)
        context = ctypes.c_void_p()
        cuda("cuDevicePrimaryCtxRetain", ctypes.byref(context), handle)
        dev = _Device(
            ordinal,
            handle,
            context,
            ctypes.c_void_p(),
            ctypes.c_void_p(),
            ctypes.c_void_p(),
            ctypes.c_uint64(),
            ctypes.c_void_p(),
        )
        self.devices.append(dev)  # registered first, so close() releases whatever was made
        cuda("cuCtxSetCurrent", context)
        cuda("cuStreamCreate", ctypes.byref(dev.stream), CU_STREAM_NON_BLOCKING)
        cuda("cuEventCreate", ctypes.byref(dev.start), CU_EVENT_DEFAULT)
        cuda("cuEventCreate", ctypes.byref(dev.stop), CU_EVENT_DEFAULT)
        cuda("cuMemAlloc_v2", ctypes.byref(dev.device_buffer), ctypes.c_size_t(self.nbytes))
        cuda(
            "cuMemHostAlloc",
            ctypes.byref(dev.host_buffer),
            ctypes.c_size_t(self.nbytes),
            CU_MEMHOSTALLOC_PORTABLE,
        )
        ctypes.memset(dev.host_buffer, 0x5A, self.nbytes)  # touch every page before timing
        return dev

    def close(self) -> None:
        """Free what was allocated; errors here are reported only if nothing failed before."""
        cuda = self.cuda
        for dev in self.devices:
            cuda("cuCtxSetCurrent", dev.context)
            if dev.host_buffer.value:
                cuda("cuMemFreeHost", dev.host_buffer)
            if dev.device_buffer.value:
                cuda("cuMemFree_v2", dev.device_buffer)
            for event in (dev.start, dev.stop):
                if event.value:
                    cuda("cuEventDestroy_v2", event)
            if dev.stream.value:
                cuda("cuStreamDestroy_v2", dev.stream)
            cuda("cuDevicePrimaryCtxRelease_v2", dev.handle)
        self.devices = []

    def _timed(self, dev: _Device, copy: str, *args: object) -> float:
        """Median GB/s of ``copy(*args, stream)`` run COPIES times per sample on dev's stream."""
        cuda = self.cuda
        cuda("cuCtxSetCurrent", dev.context)
        cuda(copy, *args, dev.stream)  # warm-up: first-touch mappings, clocks up
        cuda("cuStreamSynchronize", dev.stream)
        samples = []
        for _ in range(SAMPLES):
            cuda("cuEventRecord", dev.start, dev.stream)
            for _ in range(COPIES):
                cuda(copy, *args, dev.stream)
            cuda("cuEventRecord", dev.stop, dev.stream)
            cuda("cuEventSynchronize", dev.stop)
            elapsed = ctypes.c_float()
            cuda("cuEventElapsedTime", ctypes.byref(elapsed), dev.start, dev.stop)
            samples.append(elapsed.value)
        return median_gbps(self.nbytes, COPIES, samples)

    def host_to_device(self, dev: _Device) -> float:
        size = ctypes.c_size_t(self.nbytes)
        return self._timed(dev, "cuMemcpyHtoDAsync_v2", dev.device_buffer, dev.host_buffer, size)

    def device_to_host(self, dev: _Device) -> float:
        size = ctypes.c_size_t(self.nbytes)
        return self._timed(dev, "cuMemcpyDtoHAsync_v2", dev.host_buffer, dev.device_buffer, size)

    def can_access(self, row: _Device, column: _Device) -> bool:
        flag = ctypes.c_int()
        self.cuda("cuDeviceCanAccessPeer", ctypes.byref(flag), row.handle, column.handle)
        return bool(flag.value)

    def peer_read(self, row: _Device, column: _Device) -> float:
        """Row's context copies column's buffer into row's (nvbandwidth's read direction)."""
        for here, there in ((row, column), (column, row)):
            self.cuda("cuCtxSetCurrent", here.context)
            self.cuda(
                "cuCtxEnablePeerAccess", there.context, 0, allow=(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,)
            )
        size = ctypes.c_size_t(self.nbytes)
        return self._timed(
            row,
            "cuMemcpyPeerAsync",
            row.device_buffer,
            row.context,
            column.device_buffer,
            column.context,
            size,
        )


def _set_argtypes(lib: ctypes.CDLL) -> None:
    """Pointer-sized arguments must be declared: ctypes would pass a Python int as a 32-bit C int."""
    u64, ptr, size = ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t
    lib.cuMemcpyHtoDAsync_v2.argtypes = [u64, ptr, size, ptr]
    lib.cuMemcpyDtoHAsync_v2.argtypes = [ptr, u64, size, ptr]
    lib.cuMemcpyPeerAsync.argtypes = [u64, ptr, u64, ptr, size, ptr]
    lib.cuEventRecord.argtypes = [ptr, ptr]
    lib.cuEventSynchronize.argtypes = [ptr]
    lib.cuStreamSynchronize.argtypes = [ptr]
    lib.cuEventElapsedTime.argtypes = [ctypes.POINTER(ctypes.c_float), ptr, ptr]
    lib.cuCtxSetCurrent.argtypes = [ptr]
    lib.cuCtxEnablePeerAccess.argtypes = [ptr, ctypes.c_uint]
    lib.cuMemHostAlloc.argtypes = [ctypes.POINTER(ptr), size, ctypes.c_uint]
    lib.cuMemFreeHost.argtypes = [ptr]
    lib.cuMemFree_v2.argtypes = [u64]
    lib.cuEventDestroy_v2.argtypes = [ptr]
    lib.cuStreamDestroy_v2.argtypes = [ptr]


def measure(cuda: CudaDriver, count: int, nbytes: int) -> Measurements:
    """Every figure this module reports, for ``count`` devices; CUDA errors end up in ``errors``."""
    bench = _Bench(cuda, nbytes)
    devices: list[_Device] = []
    m = Measurements(devices=[])
    try:
        for ordinal in range(count):
            handle = ctypes.c_int()
            cuda("cuDeviceGet", ctypes.byref(handle), ordinal)
            m.devices.append(bench.display_info(handle))
        for ordinal in range(count):
            devices.append(bench.open(ordinal))
        for name, figures, run in (
            (HOST_TO_DEVICE, m.host_to_device, bench.host_to_device),
            (DEVICE_TO_HOST, m.device_to_host, bench.device_to_host),
        ):
            try:
                for dev in devices:
                    figures[dev.ordinal] = run(dev)
            except CudaError as exc:
                m.errors[name] = str(exc)
        try:
            for row in devices:
                for column in devices:
                    if row is not column and bench.can_access(row, column):
                        m.peer_pairs.add((row.ordinal, column.ordinal))
                        m.peer[(row.ordinal, column.ordinal)] = bench.peer_read(row, column)
        except CudaError as exc:
            m.errors[DEVICE_TO_DEVICE_READ] = str(exc)
    except CudaError as exc:  # setting up a device failed: nothing after it can be measured
        for name in (HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE_READ):
            m.errors.setdefault(name, str(exc))
    finally:
        try:
            bench.close()
        except CudaError as exc:
            if not m.errors:
                m.errors[DEVICE_TO_DEVICE_READ if m.peer_pairs else DEVICE_TO_HOST] = f"cleanup: {exc}"
    return m


def main() -> int:
    lib = load_libcuda()
    if lib is None:
        print(
            "no libcuda.so.1 on this machine (no NVIDIA driver): copy bandwidth cannot be measured",
            file=sys.stderr,
        )
        return NO_LIBCUDA
    _set_argtypes(lib)
    cuda = CudaDriver(lib)
    hostname = socket.gethostname()
    driver = _driver_version()
    version = ctypes.c_int()
    try:
        cuda("cuInit", 0)
        cuda("cuDriverGetVersion", ctypes.byref(version))
        count = ctypes.c_int()
        cuda("cuDeviceGetCount", ctypes.byref(count))
        if count.value < 1:
            raise CudaError("cuDeviceGetCount found no CUDA device")
    except CudaError as exc:
        document = build_document(
            Measurements(devices=[]),
            driver_version=driver,
            cuda_version=version.value or None,
            hostname=hostname,
            error=str(exc),
        )
        sys.stdout.write(render(document))
        return 1
    m = measure(cuda, count.value, BUFFER_MIB * 1024 * 1024)
    sys.stdout.write(
        render(build_document(m, driver_version=driver, cuda_version=version.value, hostname=hostname))
    )
    return 1 if m.errors else 0


if __name__ == "__main__":
    sys.exit(main())
