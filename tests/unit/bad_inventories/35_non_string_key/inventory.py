# expect: 1
pool = ([("ns-1", {"gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": False, 1: "one"})], {})
