# expect: ssh_prot
SSH = {"ssh_user": "ops", "ssh_prot": 2222}
pool = ([("p1", {**SSH, "gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": False})], {})
