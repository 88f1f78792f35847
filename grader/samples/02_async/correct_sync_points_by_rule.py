"""A correct SYNC_POINTS written differently: built from the set of snippets that synchronize."""

# %% sync_points
from grader.ch02_async import SYNC_SNIPPETS

WAITS_FOR_GPU = {
    "item",
    "print_tensor",
    "to_cpu",
    "tolist",
    "boolean_mask",
    "if_tensor",
    "nonzero",
    "unique",
}
SYNC_POINTS = {}
for name in SYNC_SNIPPETS:
    SYNC_POINTS[name] = name in WAITS_FOR_GPU
