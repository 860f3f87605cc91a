gpu_model = "NVIDIA L4"
gpu_count = 1
kube_join = False
diag_dcgm_level = 4 / 2  # "level two", computed
