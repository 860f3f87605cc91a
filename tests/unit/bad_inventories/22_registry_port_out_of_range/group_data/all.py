gpu_model = "NVIDIA L4"
gpu_count = 1
kube_join = False
device_plugin_image = "mirror.internal:70000/nvidia/k8s-device-plugin:v0.20.0"
