"""loader_speedup times only the first batch: with workers that is mostly their start-up, so the
gain of a whole epoch is missed."""

# fails: test_loader_speedup
# %% loader_speedup
import time

from torch.utils.data import DataLoader


def loader_speedup(dataset, batch_size, workers) -> float:
    def first_batch_seconds(num_workers):
        start = time.perf_counter()
        next(iter(DataLoader(dataset, batch_size=batch_size, num_workers=num_workers)))
        return time.perf_counter() - start

    return first_batch_seconds(0) / first_batch_seconds(workers)
