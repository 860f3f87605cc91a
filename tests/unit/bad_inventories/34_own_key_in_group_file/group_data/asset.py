gpu_model = "NVIDIA L4"
gpu_count = 1
kube_join = False
asset_tag = "ZX-0042"
