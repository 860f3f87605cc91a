# expect: node_labels
pool = (
    [
        (
            "lbl-1",
            {
                "gpu_model": "NVIDIA L4",
                "gpu_count": 1,
                "kube_join": False,
                "node_labels": {"team": "vision\n"},
            },
        )
    ],
    {},
)
