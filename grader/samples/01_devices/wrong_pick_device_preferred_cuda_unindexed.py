"""pick_device checks types and indices, but returns torch.device("cuda") unchanged when asked for
"cuda": the statement asks for the current GPU with its index (cuda:0 here)."""

# fails: test_pick_device
# %% pick_device
import torch


def pick_device(preferred=None):
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if preferred is None:
        return torch.device("cuda", 0) if count else torch.device("cpu")
    dev = torch.device(preferred)
    ok = dev.type == "cpu" or (dev.type == "cuda" and (dev.index or 0) < count)
    if not ok:
        names = [f"cuda:{i}" for i in range(count)] + ["cpu"]
        raise ValueError(f"{preferred} is not available; available devices: {', '.join(names)}")
    return dev
