# expect: node_taints
pool = [
    (
        "tn-1",
        {
            "gpu_model": "NVIDIA L4",
            "gpu_count": 1,
            "kube_join": False,
            "node_taints": ["dedicated=gpu:NoSchedule\n"],
        },
    )
]
