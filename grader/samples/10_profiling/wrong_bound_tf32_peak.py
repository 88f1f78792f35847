"""predict_bound assumes float32 matmuls run on the TF32 Tensor Cores and uses the datasheets'
dense TF32 peaks for float32: PyTorch runs them in plain FP32 unless TF32 is switched on, so the
ridge point is 7x too high on an H100."""
# ruff: noqa: F821 - arithmetic_intensity is defined by the notebook's earlier cell

# fails: test_predict_bound
# %% predict_bound
import torch

from grader.checks.ch10_profiling import GPUS

TF32_TFLOPS = {"H100": 494.7, "A100": 156.0, "L4": 60.0, "T4": 8.1}  # T4: no TF32, FP32


def predict_bound(op, shape, dtype, gpu):
    spec = GPUS[gpu]
    if dtype == torch.float32:
        peak = TF32_TFLOPS[gpu]
    else:
        peak = spec.tflops["bf16" if dtype == torch.bfloat16 else "fp16"]
    ridge = peak * 1e12 / (spec.memory_gb_s * 1e9)
    return "compute" if arithmetic_intensity(op, shape, dtype) >= ridge else "memory"
