"""loader_speedup returns the time with workers over the time without: the inverse of the
speed-up (below 1 when workers help)."""

# fails: test_loader_speedup
# %% loader_speedup
import time

from torch.utils.data import DataLoader


def loader_speedup(dataset, batch_size, workers) -> float:
    def seconds(num_workers):
        start = time.perf_counter()
        for _ in DataLoader(dataset, batch_size=batch_size, num_workers=num_workers):
            pass
        return time.perf_counter() - start

    return seconds(workers) / seconds(0)
