# expect: kube_ca_cert_hash
with open(__file__) as f:  # an inventory may read files; here the hash just has a newline at its end
    pass
HASH = "sha256:" + "ab" * 32 + "\n"
pool = (
    [("ca-1", {"gpu_model": "NVIDIA L4", "gpu_count": 1})],
    {"kube_api_endpoint": "10.1.2.3:6443", "kube_ca_cert_hash": HASH, "kube_join_token_file": "/tmp/t"},
)
