"""loader_speedup times the construction of the DataLoaders: building a loader loads nothing,
so the ratio is noise around 1."""

# fails: test_loader_speedup
# %% loader_speedup
import time

from torch.utils.data import DataLoader


def loader_speedup(dataset, batch_size, workers) -> float:
    start = time.perf_counter()
    DataLoader(dataset, batch_size=batch_size, num_workers=0)
    serial = time.perf_counter() - start
    start = time.perf_counter()
    DataLoader(dataset, batch_size=batch_size, num_workers=workers)
    parallel = time.perf_counter() - start
    return serial / parallel
