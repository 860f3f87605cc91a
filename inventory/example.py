"""A production-shaped fleet: three GPU pools joined to one cluster.

Copy it to ``inventory/<env>.py`` and change hosts and pools; defaults and the meaning of every knob are in
``group_data/all.py``. Check what it resolves to with ``gpuready plan inventory/example.py`` before any deploy.
"""

_CLUSTER = {
    "kube_api_endpoint": "k8s-api.prod.example.com:6443",
    "kube_ca_cert_hash": "sha256:8f2b0b7f6f7a3c2f5d5e1a9c4b3e2d1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d",
    "kube_join_token_file": "~/.config/gpuready/prod-join-token",
    "ssh_user": "ubuntu",
    "_sudo": True,
}

# 8x H100 SXM with NVSwitch for training: whole GPUs, no sharing.
h100_training = (
    [f"gpu-train-{i:02d}.prod.example.com" for i in range(1, 5)],
    {
        **_CLUSTER,
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "gpu_count": 8,
        "nvswitch": True,
        "node_labels": {"pool": "training"},
    },
)

# A100 80GB for inference, split with MIG: every GPU as 3g.40gb + 2g.20gb + 2x 1g.10gb.
a100_inference = (
    ["gpu-infer-a100-01.prod.example.com", "gpu-infer-a100-02.prod.example.com"],
    {
        **_CLUSTER,
        "gpu_model": "NVIDIA A100-SXM4-80GB",
        "gpu_count": 4,
        "gpu_sharing": "mig",
        "mig_strategy": "mixed",
        "mig_layout": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
        "node_labels": {"pool": "inference-mig"},
    },
)

# L4 for light inference: one GPU shared by four pods with time-slicing.
l4_inference = (
    ["gpu-infer-l4-01.prod.example.com", "gpu-infer-l4-02.prod.example.com"],
    {
        **_CLUSTER,
        "gpu_model": "NVIDIA L4",
        "gpu_count": 1,
        "gpu_sharing": "time-slicing",
        "sharing_replicas": 4,
        "node_labels": {"pool": "inference-shared"},
    },
)
