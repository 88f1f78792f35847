"""pick_device compares the index with `<=` device_count(): "cuda:1" on a 1-GPU machine is accepted
(the last index is count - 1)."""

# fails: test_pick_device, test_pick_device_cuda
# %% pick_device
import torch


def pick_device(preferred=None):
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if preferred is None:
        return torch.device("cuda:0") if count else torch.device("cpu")
    device = torch.device(preferred)
    if device.type == "cuda":
        index = 0 if device.index is None else device.index
        if count == 0 or index > count:
            names = [f"cuda:{i}" for i in range(count)] + ["cpu"]
            raise ValueError(f"{preferred} is not available; available devices: {', '.join(names)}")
        return torch.device("cuda", index)
    return device
