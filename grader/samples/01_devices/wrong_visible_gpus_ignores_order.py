"""visible_gpus starts a fresh process with CUDA_VISIBLE_DEVICES but not CUDA_DEVICE_ORDER: the child
numbers the GPUs fastest first, so on a box with two kinds of GPU the indices name other cards (on a
machine with one GPU, or identical ones, the orders agree and it passes)."""

# fails-on-cpu: test_visible_gpus
# %% visible_gpus
import json
import os
import subprocess
import sys


def visible_gpus(cuda_visible_devices, device_order="PCI_BUS_ID"):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=cuda_visible_devices)
    code = (
        "import json, torch; print(json.dumps([str(torch.cuda.get_device_properties(i).uuid) "
        "for i in range(torch.cuda.device_count())]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])
