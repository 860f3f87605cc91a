# expect: mig_layout
mig_many = [
    (
        "mig-c",
        {
            "gpu_model": "NVIDIA A100-SXM4-80GB",
            "gpu_count": 1,
            "gpu_sharing": "mig",
            "kube_join": False,
            "mig_layout": ["1g.10gb"] * 100_000,
        },
    )
]
