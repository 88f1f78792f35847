"""loader_speedup builds its loaders without batch_size=: both passes load one item per batch
(the DataLoader's default), not the batch size asked for; the ratio measured is another
loader's."""

# fails: test_loader_speedup
# %% loader_speedup
import time

from torch.utils.data import DataLoader


def loader_speedup(dataset, batch_size, workers) -> float:
    def seconds(num_workers):
        start = time.perf_counter()
        for _ in DataLoader(dataset, num_workers=num_workers):
            pass
        return time.perf_counter() - start

    return seconds(0) / seconds(workers)
