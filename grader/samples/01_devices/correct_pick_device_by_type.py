"""A correct pick_device written differently: decides per device type instead of listing names."""

# %% pick_device
import torch


def pick_device(preferred: str | None = None) -> torch.device:
    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    mps = torch.backends.mps.is_available()
    if preferred is None:
        if cuda_count:
            return torch.device("cuda", 0)
        return torch.device("mps") if mps else torch.device("cpu")
    dev = torch.device(preferred)
    if dev.type == "cuda" and dev.index is None and cuda_count:
        dev = torch.device("cuda", torch.cuda.current_device())  # "cuda" is the current GPU
    index = 0 if dev.index is None else dev.index
    exists = (
        dev.type == "cpu"
        or (dev.type == "cuda" and index < cuda_count)
        or (dev.type == "mps" and mps)
    )
    if not exists:
        names = [f"cuda:{i}" for i in range(cuda_count)] + (["mps"] if mps else []) + ["cpu"]
        raise ValueError(f"no device {preferred!r} here; try one of: {', '.join(names)}")
    return dev
