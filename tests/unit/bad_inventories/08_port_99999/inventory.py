# expect: kube_api_endpoint
JOIN = dict(
    kube_api_endpoint="k8s.corp.example:99999",
    kube_ca_cert_hash="sha256:" + "0f" * 32,
    kube_join_token_env="JOIN_TOKEN",
)
fleet = ([("n1.corp.example", {"gpu_model": "NVIDIA L4", "gpu_count": 1})], JOIN)
