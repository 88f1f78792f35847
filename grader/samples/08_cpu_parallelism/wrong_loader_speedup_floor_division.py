"""loader_speedup divides the two times with //: the speed-up is floored to a whole number
(1.9x with 2 workers becomes 1.0x)."""

# fails: test_loader_speedup
# %% loader_speedup
import time

from torch.utils.data import DataLoader


def loader_speedup(dataset, batch_size, workers) -> float:
    def seconds_per_pass(num_workers):
        loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers)
        start = time.perf_counter()
        for _ in loader:
            pass
        return time.perf_counter() - start

    return seconds_per_pass(0) // seconds_per_pass(workers)
