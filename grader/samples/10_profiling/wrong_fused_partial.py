"""fused_step fuses the matmul and the bias (torch.addmm) but keeps the hand-written tanh GELU:
9 kernel launches."""

# fails: test_fused_step, test_fused_step_cuda
# %% fused_step
import torch


def fused_step(x, w, b):
    h = torch.addmm(b, x, w)
    return 0.5 * h * (1.0 + torch.tanh(0.7978845608028654 * (h + 0.044715 * h**3)))
