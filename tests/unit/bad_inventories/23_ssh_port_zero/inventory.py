# expect: ssh_port
pool = ([("p0", {"ssh_port": 0})], {"gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": False})
