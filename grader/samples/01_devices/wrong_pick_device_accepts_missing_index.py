"""pick_device checks that CUDA exists but not that the requested index does ("cuda:3" on a 1-GPU machine)."""

# fails: test_pick_device, test_pick_device_cuda
# %% pick_device
import torch


def pick_device(preferred=None):
    if preferred is None:
        return torch.device("cuda:0") if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(preferred)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{preferred} is not available; available devices: cpu")
    return device
