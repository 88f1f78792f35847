"""arithmetic_intensity returns a fixed intensity for softmax and layer norm, 1.25 FLOP/byte (the
bf16 figure of 5 FLOPs per element), whatever the dtype: in float32 that claims 10 FLOPs per
element for the same op, a count that changes with the element size."""

# fails: test_arithmetic_intensity
# %% arithmetic_intensity
import torch


def arithmetic_intensity(op, shape, dtype=torch.float32):
    size = dtype.itemsize
    if op == "matmul":
        m, k, n = shape
        return 2 * m * k * n / ((m * k + k * n + m * n) * size)
    if op == "add":
        return 1 / (3 * size)
    if op == "relu":
        return 1 / (2 * size)
    if op in ("softmax", "layer_norm"):
        return 1.25
    raise ValueError(op)
