"""pick_device returns a device string such as "cuda:0" instead of a torch.device."""

# fails: test_pick_device, test_pick_device_cuda
# %% pick_device
import torch


def pick_device(preferred=None):
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    available = [f"cuda:{i}" for i in range(count)] + ["cpu"]
    if preferred is None:
        return available[0]
    if preferred not in available:
        raise ValueError(f"{preferred} is not available; available devices: {', '.join(available)}")
    return preferred
