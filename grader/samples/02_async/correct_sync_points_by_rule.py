"""A correct SYNC_POINTS written differently: built from the set of snippets that synchronize."""

# %% sync_points
from grader.checks.ch02_async import SYNC_SNIPPETS

WAITS_FOR_GPU = {
    "format",
    "int_count",
    "if_tensor",
    "boolean_mask",
    "where_one_arg",
    "to_cpu",
    "unique",
}
SYNC_POINTS = {}
for name in SYNC_SNIPPETS:
    SYNC_POINTS[name] = name in WAITS_FOR_GPU
