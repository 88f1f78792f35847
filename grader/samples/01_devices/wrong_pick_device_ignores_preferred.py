"""pick_device ignores `preferred` and always returns the best available device."""

# fails: test_pick_device, test_pick_device_cuda
# %% pick_device
import torch


def pick_device(preferred=None):
    if torch.cuda.is_available():
        return torch.device("cuda:0")
    return torch.device("cpu")
