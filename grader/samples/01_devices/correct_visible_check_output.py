"""A correct visible_gpu_count written differently: subprocess.check_output and a JSON answer."""

# %% visible_gpu_count
import json
import os
import subprocess
import sys


def visible_gpu_count(cuda_visible_devices: str) -> int:
    child_env = os.environ.copy()
    child_env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    code = "import json, torch; print(json.dumps({'n': torch.cuda.device_count()}))"
    text = subprocess.check_output([sys.executable, "-c", code], env=child_env, text=True)
    return json.loads(text.strip().splitlines()[-1])["n"]
