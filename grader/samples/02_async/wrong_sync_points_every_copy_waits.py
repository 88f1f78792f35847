"""SYNC_POINTS says every copy to the CPU waits (non_blocking=True too) and that (x > 0).any()
waits even without an `if`."""

# fails: test_sync_points, test_sync_points_cuda
# %% sync_points
SYNC_POINTS = {
    "matmul": False,
    "max": False,
    "format": True,
    "int_count": True,
    "any": True,
    "if_tensor": True,
    "masked_fill": False,
    "boolean_mask": True,
    "where": False,
    "where_one_arg": True,
    "to_cpu": True,
    "to_cpu_non_blocking": True,
    "shape": False,
    "unique": True,
}
