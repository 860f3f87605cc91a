# expect: mig_sharing_replicas
pool = [
    (
        "ms-1",
        {
            "gpu_model": "NVIDIA A100-SXM4-80GB",
            "gpu_count": 1,
            "gpu_sharing": "mig",
            "kube_join": False,
            "mig_layout": ["7g.80gb"],
            "mig_sharing": "time-slicing",
            "mig_sharing_replicas": 10**5,
        },
    )
]
