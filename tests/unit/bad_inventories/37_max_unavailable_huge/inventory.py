# expect: upgrade_max_unavailable
class Pool:  # a user's helper class
    hosts = ["u-1", "u-2"]
    data = {"gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": False, "upgrade_max_unavailable": 10**9}


everything = (Pool.hosts, Pool.data)
