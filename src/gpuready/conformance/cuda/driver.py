"""The CUDA driver API through ctypes, for the local GPU tools (vectorAdd, copy bandwidth): no toolkit needed.

``libcuda.so.1`` ships with the driver, so a GPU runner with only the driver installed can run both. Each tool runs
as its own process (a driver crash cannot take the test session with it) and exits ``NO_LIBCUDA`` where the
machine has no CUDA driver library.
"""

from __future__ import annotations

import ctypes

from gpuready.nvidia.cuda import NO_LIBCUDA  # noqa: F401  (the tools exit with it)


class CudaError(RuntimeError):
    """A CUDA driver call returned an error; the message names the call and the CUresult."""


def load_libcuda() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


class CudaDriver:
    """Calls into libcuda; a non-zero CUresult raises CudaError naming the call and the result's name."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib

    def describe(self, status: int) -> str:
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        self.lib.cuGetErrorName(status, ctypes.byref(name))
        self.lib.cuGetErrorString(status, ctypes.byref(text))
        return f"{(name.value or b'CUDA_ERROR_' + str(status).encode()).decode()} ({(text.value or b'?').decode()})"

    def __call__(self, name: str, *args: object, allow: tuple[int, ...] = ()) -> int:
        status = getattr(self.lib, name)(*args)
        if status != 0 and status not in allow:
            raise CudaError(f"{name} failed: {self.describe(status)}")
        return status
