"""A correct loader_speedup written differently: samples per second counted from the batches,
persistent workers started by a warm-up epoch that is not timed."""

# %% loader_speedup
import time

from torch.utils.data import DataLoader


def loader_speedup(dataset, batch_size, workers) -> float:
    def samples_per_second(loader):
        start = time.monotonic()
        samples = sum(len(batch) for batch in loader)
        return samples / (time.monotonic() - start)

    serial = samples_per_second(DataLoader(dataset, batch_size=batch_size))
    loader = DataLoader(
        dataset, batch_size=batch_size, num_workers=workers, persistent_workers=True
    )
    samples_per_second(loader)  # warm-up: starts the workers
    return samples_per_second(loader) / serial
