"""visible_gpus sets CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER in os.environ of this process and asks
torch here: CUDA read both variables when it initialised, so it still lists every GPU it found then."""

# fails: test_visible_gpus, test_visible_gpus_cuda
# %% visible_gpus
import os

import torch


def visible_gpus(cuda_visible_devices, device_order="PCI_BUS_ID"):
    os.environ["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    os.environ["CUDA_DEVICE_ORDER"] = device_order
    return [str(torch.cuda.get_device_properties(i).uuid) for i in range(torch.cuda.device_count())]
