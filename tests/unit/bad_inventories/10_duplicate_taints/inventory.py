# expect: node_taints
t = "nvidia.com/gpu=present:NoSchedule"
l4 = (
    [
        (
            "l4-x",
            {
                "gpu_model": "NVIDIA L4",
                "gpu_count": 1,
                "kube_join": False,
                "node_taints": [t, t.replace("present", "yes")],
            },
        )
    ],
    {},
)
