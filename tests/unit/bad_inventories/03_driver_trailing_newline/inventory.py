# expect: nvidia_driver_version
# the pin is read from a file written by `nvidia-smi --query-gpu=driver_version --format=csv,noheader > pin`
pin = "580.178.04\n"
nodes = (
    [("l4-a.lab.internal", {"gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": False})],
    {"nvidia_driver_version": pin},
)
