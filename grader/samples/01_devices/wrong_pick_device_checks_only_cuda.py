"""pick_device validates CUDA indices only: any other preferred device is returned unchecked, so
"mps" is accepted on a machine without an Apple GPU."""

# fails: test_pick_device
# %% pick_device
import torch


def pick_device(preferred=None):
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    names = [f"cuda:{i}" for i in range(count)] + ["cpu"]
    if preferred is None:
        return torch.device(names[0])
    device = torch.device(preferred)
    if device.type == "cuda":
        device = torch.device("cuda", 0 if device.index is None else device.index)
        if str(device) not in names:
            raise ValueError(f"{preferred} is not available; available devices: {', '.join(names)}")
    return device
