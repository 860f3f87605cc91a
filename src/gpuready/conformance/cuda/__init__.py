"""CUDA through the driver API (ctypes, no toolkit): vectorAdd and copy bandwidth for local GPU runs."""
