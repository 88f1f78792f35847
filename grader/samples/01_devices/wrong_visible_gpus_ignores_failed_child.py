"""visible_gpus runs the child without check=True and reads whatever it printed: when the child
fails (its torch does not import), it answers [] as if the process saw no GPU, instead of raising
subprocess.CalledProcessError as the docstring says."""

# fails: test_visible_gpus
# %% visible_gpus
import json
import os
import subprocess
import sys


def visible_gpus(cuda_visible_devices: str, device_order: str = "PCI_BUS_ID") -> list[str]:
    env = dict(
        os.environ, CUDA_VISIBLE_DEVICES=cuda_visible_devices, CUDA_DEVICE_ORDER=device_order
    )
    code = (
        "import json, torch; print(json.dumps([str(torch.cuda.get_device_properties(i).uuid) "
        "for i in range(torch.cuda.device_count())]))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    lines = out.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else []
