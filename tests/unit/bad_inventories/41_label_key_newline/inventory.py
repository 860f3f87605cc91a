# expect: node_labels
labels = {}
labels["pool\n"] = "a"
pool = [("lk-1", {"gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": False, "node_labels": labels})]
