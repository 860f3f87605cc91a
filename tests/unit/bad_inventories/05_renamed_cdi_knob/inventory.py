# expect: containerd_enable_cdi, nvidia_cdi
# An inventory from before the rename, kept across a gpuready upgrade.
OLD = {"containerd_enable_cdi": True}
gpu = ([("old-1", {"gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": False, **OLD})], {})
