# expect: gpu_count
import json

pool = [
    (h["name"], h["data"])
    for h in json.loads(
        '[{"name": "s-1", "data": {"gpu_model": "NVIDIA L4", "gpu_count": "8", "kube_join": false}}]'
    )
]
