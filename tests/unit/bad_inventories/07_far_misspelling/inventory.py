# expect: gpu_shareing_mode
def pool(*names, **data):
    return ([n for n in names], {"kube_join": False, **data})


a100 = pool("a100-1", "a100-2", gpu_model="NVIDIA A100-SXM4-80GB", gpu_count=4, gpu_shareing_mode="mig")
