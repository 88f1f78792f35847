"""A correct visible_gpus written differently: subprocess.check_output with a copied environment,
one UUID per line, devices named "cuda:i", and UUIDs with nvidia-smi's GPU- prefix."""

# %% visible_gpus
import os
import subprocess
import sys


def visible_gpus(cuda_visible_devices: str, device_order: str = "PCI_BUS_ID") -> list[str]:
    child_env = os.environ.copy()
    child_env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    child_env["CUDA_DEVICE_ORDER"] = device_order
    code = (
        "import torch\n"
        "for i in range(torch.cuda.device_count()):\n"
        "    print('UUID', torch.cuda.get_device_properties(f'cuda:{i}').uuid)\n"
    )
    text = subprocess.check_output([sys.executable, "-c", code], env=child_env, text=True)
    return [f"GPU-{line.split()[1]}" for line in text.splitlines() if line.startswith("UUID ")]
