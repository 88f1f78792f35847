"""visible_gpu_count only sets CUDA_VISIBLE_DEVICES when the value is truthy: "" (no GPU) leaves
the variable unset, so every GPU is counted."""

# fails: test_visible_gpu_count, test_visible_gpu_count_cuda
# %% visible_gpu_count
import os
import subprocess
import sys


def visible_gpu_count(cuda_visible_devices):
    env = dict(os.environ)
    if cuda_visible_devices:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    else:
        env.pop("CUDA_VISIBLE_DEVICES", None)
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip().splitlines()[-1])
