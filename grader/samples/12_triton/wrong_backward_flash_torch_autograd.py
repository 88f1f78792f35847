"""FlashAttention's forward calls the kernel, but its backward differentiates torch's attention
(autograd through softmax(q k^T / sqrt(d)) v, recomputed): the L x S probabilities are made
again, and no kernel computes the gradients."""

# fails: test_flash_attention
# ruff: noqa: F821 - attention_forward_lse and attention_backward are the earlier cell's
# %% flash_attention
import math

import torch


class FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        o, lse = attention_forward_lse(q, k, v)
        ctx.save_for_backward(q, k, v, o, lse)
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        with torch.enable_grad():
            q_, k_, v_ = (t.detach().requires_grad_() for t in (q, k, v))
            p = torch.softmax(q_ @ k_.T / math.sqrt(q.shape[1]), dim=1)
            return torch.autograd.grad(p @ v_, (q_, k_, v_), do)


def flash_attention(q, k, v):
    return FlashAttention.apply(q, k, v)
