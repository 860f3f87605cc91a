"""The lab's emulated silicon as NVIDIA's user-space libraries: a Go module (``machine``, ``nvml``, ``cuda``)
built by :mod:`gpuready.lab.silicon.build`."""
