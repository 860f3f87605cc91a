import os
import sys

if "GPUREADY_NO_SUCH_VARIABLE" not in os.environ:
    sys.exit(3)
gpu_model = "NVIDIA L4"
