"""to_device calls .to() on every leaf, so a str or int leaf crashes."""


# fails: test_to_device, test_to_device_cuda
# %% to_device
def to_device(obj, device, non_blocking=False):
    if isinstance(obj, dict):
        return type(obj)((k, to_device(v, device, non_blocking)) for k, v in obj.items())
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(to_device(v, device, non_blocking) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device, non_blocking) for v in obj)
    return obj.to(device, non_blocking=non_blocking)
