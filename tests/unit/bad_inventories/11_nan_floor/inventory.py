# expect: diag_bandwidth_floors
import math

pool = (
    [("bw-1", {"gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": False})],
    {"diag_bandwidth_floors": {"h2d_gbps": math.nan}},
)
