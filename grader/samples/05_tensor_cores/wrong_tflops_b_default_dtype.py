"""matmul_tflops creates the second operand without dtype=: a float32 matrix times a bf16 one,
which torch refuses on every device ("expected m1 and m2 to have the same dtype")."""

# fails: test_matmul_tflops
# fails-on-gpu: test_matmul_tflops_cuda
# %% matmul_tflops
import statistics

import torch


def matmul_tflops(n, dtype):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device)
    for _ in range(3):
        a @ b
    seconds = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        seconds.append(start.elapsed_time(end) / 1000)
    return 2 * n**3 / statistics.median(seconds) / 1e12
