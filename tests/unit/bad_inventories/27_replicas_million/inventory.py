# expect: sharing_replicas
ts = (
    [
        (
            "ts-1",
            {
                "gpu_model": "NVIDIA L4",
                "gpu_count": 1,
                "kube_join": False,
                "gpu_sharing": "time-slicing",
                "sharing_replicas": 1_000_000,
            },
        )
    ],
    {},
)
