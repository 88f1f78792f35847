"""SYNC_POINTS misses that printing a tensor and boolean-mask indexing synchronize."""

# fails: test_sync_points, test_sync_points_cuda
# %% sync_points
from grader.ch02_async import SYNC_SNIPPETS

SYNC_POINTS = {
    name: name in {"item", "to_cpu", "tolist", "if_tensor", "nonzero", "unique"}
    for name in SYNC_SNIPPETS
}
