# expect: ssh_hostname
pool = (
    [("sh-1", {"ssh_hostname": "gpu box 1!", "gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": False})],
    {},
)
