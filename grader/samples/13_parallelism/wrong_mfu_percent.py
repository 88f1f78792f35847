"""mfu that returns a percentage (42.0) instead of a fraction (0.42)."""


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
    if hardware and recompute:
        per_token += 2 * n_params + 4 * att
    return 100 * tokens_per_s * per_token / peak_flops
