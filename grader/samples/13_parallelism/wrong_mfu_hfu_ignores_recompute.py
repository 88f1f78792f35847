"""mfu whose HFU ignores recomputation: hardware=True returns the same as MFU."""


# fails: test_mfu
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
    if tokens_per_s <= 0 or peak_flops <= 0:
        raise ValueError("tokens_per_s and peak_flops must be positive")
    att = n_layers * seq_len * d_model
    return tokens_per_s * (6 * n_params + 12 * att) / peak_flops  # hardware: the same count
