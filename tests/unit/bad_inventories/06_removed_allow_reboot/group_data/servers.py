gpu_model = "NVIDIA A100-SXM4-80GB"
gpu_count = 4
kube_join = False
allow_reboot = True
