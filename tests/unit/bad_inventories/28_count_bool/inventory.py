# expect: gpu_count
pool = [("b-1", {"gpu_model": "NVIDIA L4", "gpu_count": True, "kube_join": False})]
