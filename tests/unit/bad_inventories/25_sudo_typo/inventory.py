# expect: _sudo_usr
pool = (
    [("p2", {"_sudo": True, "_sudo_usr": "root"})],
    {"gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": False},
)
