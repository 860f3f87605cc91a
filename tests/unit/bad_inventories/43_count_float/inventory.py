# expect: gpu_count
pool = [("f-1", {"gpu_model": "NVIDIA L4", "gpu_count": 8e0, "kube_join": False})]
