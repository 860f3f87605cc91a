# expect: extra_data_keys, rack
pool = (
    [("x-1", {"rack": "B12"})],
    {"gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": False, "extra_data_keys": "rack"},
)
