"""A correct visible_gpus written differently: the child reads its script from stdin, the answer
comes back as a Python literal, and the environment is built with a dict merge."""

# %% visible_gpus
import ast
import os
import subprocess
import sys

SCRIPT = """
import torch
seen = []
for index in range(torch.cuda.device_count()):
    seen.append(str(torch.cuda.get_device_properties(torch.device("cuda", index)).uuid))
print(repr(seen))
"""


def visible_gpus(cuda_visible_devices, device_order="PCI_BUS_ID"):
    env = {
        **os.environ,
        "CUDA_DEVICE_ORDER": device_order,
        "CUDA_VISIBLE_DEVICES": cuda_visible_devices,
    }
    done = subprocess.run(
        [sys.executable, "-"], input=SCRIPT, env=env, capture_output=True, text=True, check=True
    )
    return ast.literal_eval(done.stdout.strip().splitlines()[-1])
