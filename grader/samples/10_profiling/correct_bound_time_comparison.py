"""A correct predict_bound written differently: compares the time the op's FLOPs take at peak
with the time its bytes take at full bandwidth, for a unit-size problem."""
# ruff: noqa: F821 - arithmetic_intensity is defined by the notebook's earlier cell

# %% predict_bound
from grader.checks.ch10_profiling import GPUS


def predict_bound(op, shape, dtype, gpu):
    spec = GPUS[gpu]
    peak = spec.tflops[
        {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}[str(dtype)]
    ]
    intensity = arithmetic_intensity(op, shape, dtype)
    math_time = intensity / (peak * 1e12)  # seconds for `intensity` FLOPs
    memory_time = 1.0 / (spec.memory_gb_s * 1e9)  # seconds for 1 byte
    return "memory" if memory_time > math_time else "compute"
