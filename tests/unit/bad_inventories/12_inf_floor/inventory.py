# expect: diag_bandwidth_floors
peers = [
    (
        "peer-0",
        {
            "gpu_model": "h100-sxm",
            "gpu_count": 8,
            "nvswitch": True,
            "kube_join": False,
            "diag_bandwidth_floors": {"peer_gbps": float("inf"), "d2h_gbps": 20},
        },
    )
]
