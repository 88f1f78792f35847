"""visible_gpus asks a fresh process how many GPUs it sees, then returns the physical indices from
the value as ints ([2, 0]) instead of the UUIDs asked: an index means nothing once the numbering
changes."""

# fails: test_visible_gpus, test_visible_gpus_cuda
# %% visible_gpus
import os
import subprocess
import sys


def visible_gpus(cuda_visible_devices, device_order="PCI_BUS_ID"):
    env = dict(
        os.environ, CUDA_VISIBLE_DEVICES=cuda_visible_devices, CUDA_DEVICE_ORDER=device_order
    )
    code = "import torch; print(torch.cuda.device_count())"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    count = int(out.stdout.strip().splitlines()[-1])
    return [int(part) for part in cuda_visible_devices.split(",")[:count]]
