"""predict_bound always uses the float32 peak (CUDA cores), even for bf16 and fp16 matmuls that
run on Tensor Cores: the ridge point is far too low."""
# ruff: noqa: F821 - arithmetic_intensity is defined by the notebook's earlier cell

# fails: test_predict_bound
# %% predict_bound
from grader.checks.ch10_profiling import GPUS


def predict_bound(op, shape, dtype, gpu):
    spec = GPUS[gpu]
    ridge = spec.tflops["fp32"] * 1e12 / (spec.memory_gb_s * 1e9)
    return "compute" if arithmetic_intensity(op, shape, dtype) >= ridge else "memory"
