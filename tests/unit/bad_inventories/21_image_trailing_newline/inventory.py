# expect: vectoradd_image
img = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04\n"
pool = [("img-1", {"gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": False, "vectoradd_image": img})]
