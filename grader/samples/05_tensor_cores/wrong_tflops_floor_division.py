"""matmul_tflops divides the last step with //: the figure is rounded down to a whole number of
TFLOP/s. On a fast GPU that is 0.1% off; on a GPU whose float64 matmuls run at 1.29 TFLOP/s it
reads 1.0."""

# fails: test_matmul_tflops
# %% matmul_tflops
import torch
from torch.utils import benchmark


def matmul_tflops(n, dtype):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    seconds = benchmark.Timer("a @ b", globals={"a": a, "b": b}).timeit(10).median
    return 2 * n**3 / seconds // 1e12
