# expect: mig_layout
layout = {i: [["3g.40gb", "4g.40gb"]] for i in range(2)}
mig_nested = [
    (
        "mig-b",
        {
            "gpu_model": "NVIDIA A100-SXM4-80GB",
            "gpu_count": 2,
            "gpu_sharing": "mig",
            "kube_join": False,
            "mig_layout": layout,
        },
    )
]
