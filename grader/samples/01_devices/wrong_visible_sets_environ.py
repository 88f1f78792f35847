"""visible_gpu_count sets os.environ in this process and calls torch.cuda.device_count()."""

# fails: test_visible_gpu_count, test_visible_gpu_count_cuda
# %% visible_gpu_count
import os

import torch


def visible_gpu_count(cuda_visible_devices):
    os.environ["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    return torch.cuda.device_count()
