"""to_device moves tensors by assigning into the input's lists and dicts (mutates its input)."""

# fails: test_to_device
# %% to_device
import torch


def to_device(obj, device, non_blocking=False):
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=non_blocking)
    if isinstance(obj, dict):
        for k in obj:
            obj[k] = to_device(obj[k], device, non_blocking)
        return obj
    if isinstance(obj, list):
        for i, v in enumerate(obj):
            obj[i] = to_device(v, device, non_blocking)
        return obj
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(to_device(v, device, non_blocking) for v in obj))
    if isinstance(obj, tuple):
        return tuple(to_device(v, device, non_blocking) for v in obj)
    return obj
