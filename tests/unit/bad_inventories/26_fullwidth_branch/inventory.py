# expect: nvidia_driver_branch
branch = "".join(chr(0xFF10 + int(c)) for c in "580")  # pasted from a wide-character document
pool = (
    [("br-1", {"gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": False})],
    {"nvidia_driver_branch": branch},
)
