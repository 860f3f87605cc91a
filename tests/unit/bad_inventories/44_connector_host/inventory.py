# expect: host name
# @local joins: its node name would be "@local", no DNS name (a node that joins nothing may be @local)
pool = [("@local", {"gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": True})]
