"""SYNC_POINTS misses that formatting a tensor's value and torch.where(condition) synchronize."""

# fails: test_sync_points, test_sync_points_cuda
# %% sync_points
from grader.checks.ch02_async import SYNC_SNIPPETS

SYNC_POINTS = {
    name: name in {"int_count", "if_tensor", "boolean_mask", "to_cpu", "unique"}
    for name in SYNC_SNIPPETS
}
