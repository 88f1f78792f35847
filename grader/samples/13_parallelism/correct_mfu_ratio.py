"""A correct mfu written differently: FLOPs per step of a batch of sequences, and HFU as MFU
scaled by (8N + 16·L·s·d) / (6N + 12·L·s·d)."""


# %% mfu
def mfu(
    tokens_per_s,
    n_params,
    n_layers,
    seq_len,
    d_model,
    peak_flops,
    *,
    hardware=False,
    recompute=False,
):
    if tokens_per_s <= 0:
        raise ValueError(f"tokens_per_s must be positive: {tokens_per_s}")
    if peak_flops <= 0:
        raise ValueError(f"peak_flops must be positive: {peak_flops}")
    attn = n_layers * seq_len * d_model
    flops_per_sequence = seq_len * (6 * n_params + 12 * attn)
    sequences_per_s = tokens_per_s / seq_len
    model_util = sequences_per_s * flops_per_sequence / peak_flops
    if hardware and recompute:
        return model_util * (8 * n_params + 16 * attn) / (6 * n_params + 12 * attn)
    return model_util
