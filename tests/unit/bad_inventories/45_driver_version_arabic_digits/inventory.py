# expect: nvidia_driver_version
v = "580.178.0" + "\u0664"  # ARABIC-INDIC DIGIT FOUR
pool = [("ar-1", {"gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": False, "nvidia_driver_version": v})]
