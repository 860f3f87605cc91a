# expect: gpu_memory_mib
pool = [("z-1", {"gpu_model": "NVIDIA Z9000", "gpu_memory_mib": 2**40, "gpu_count": 1, "kube_join": False})]
