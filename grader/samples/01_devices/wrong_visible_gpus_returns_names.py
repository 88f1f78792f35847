"""visible_gpus asks a fresh process with both variables but returns each device's name: names are
not unique (a box often has several GPUs of one model), so they do not say which GPU is which."""

# fails: test_visible_gpus, test_visible_gpus_cuda
# %% visible_gpus
import json
import os
import subprocess
import sys


def visible_gpus(cuda_visible_devices, device_order="PCI_BUS_ID"):
    env = dict(
        os.environ, CUDA_VISIBLE_DEVICES=cuda_visible_devices, CUDA_DEVICE_ORDER=device_order
    )
    code = (
        "import json, torch; print(json.dumps([torch.cuda.get_device_name(i) "
        "for i in range(torch.cuda.device_count())]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])
