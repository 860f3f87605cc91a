# expect: pools
train = (["shared-7"], {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "kube_join": False})
infer = (["shared-7"], {"gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": False})
