# expect: host name
GPU_Nodes = [("GPU_Node_1", {"gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": False})]
