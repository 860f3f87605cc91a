# expect: mig_layout
mig = (
    [("mig-a", {})],
    {
        "gpu_model": "NVIDIA A100-SXM4-80GB",
        "gpu_count": 4,
        "gpu_sharing": "mig",
        "kube_join": False,
        "mig_layout": {0: 7, 1: ["7g.80gb"]},
    },
)
