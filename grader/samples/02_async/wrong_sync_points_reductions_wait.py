"""SYNC_POINTS says that a reduction to a single number (x.max(), (x > 0).any()) waits for the
GPU: the result is a 0-d tensor on the device, and nothing waits until the host reads it."""

# fails: test_sync_points, test_sync_points_cuda
# %% sync_points
SYNC_POINTS = {
    "matmul": False,
    "max": True,
    "format": True,
    "int_count": True,
    "any": True,
    "if_tensor": True,
    "masked_fill": False,
    "boolean_mask": True,
    "where": False,
    "where_one_arg": True,
    "to_cpu": True,
    "to_cpu_non_blocking": False,
    "shape": False,
    "unique": True,
}
