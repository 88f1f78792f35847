"""to_device rebuilds every tuple with tuple(...), so a namedtuple becomes a plain tuple."""

# fails: test_to_device, test_to_device_cuda
# %% to_device
import torch


def to_device(obj, device, non_blocking=False):
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=non_blocking)
    if isinstance(obj, dict):
        return {k: to_device(v, device, non_blocking) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_device(v, device, non_blocking) for v in obj]
    if isinstance(obj, tuple):
        return tuple(to_device(v, device, non_blocking) for v in obj)
    return obj
