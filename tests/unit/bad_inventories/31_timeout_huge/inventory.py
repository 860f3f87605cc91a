# expect: pod_timeout
pool = ([("to-1", {})], {"gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": False, "pod_timeout": 10**12})
