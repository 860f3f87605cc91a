"""gpuready: the inventory says what a GPU node must be; the deploys make it so; the conformance suite proves it."""

__version__ = "0.1.0"
