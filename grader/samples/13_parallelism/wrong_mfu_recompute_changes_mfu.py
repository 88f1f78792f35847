"""mfu that adds the recomputed forward whenever recompute=True, so MFU changes with
recomputation (only HFU should)."""


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
    per_token = 6 * n_params + 12 * att
    if recompute:
        per_token += 2 * n_params + 4 * att
    return tokens_per_s * per_token / peak_flops
