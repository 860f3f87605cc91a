# expect: kubernetes_version
pool = [
    (
        "edge-1",
        dict(gpu_model="Tesla T4", gpu_count=1, kube_join=False, kubernetes_version="1.\uff13\uff16.3"),
    )
]
