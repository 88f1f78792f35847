"""mfu that does not check its inputs: a zero peak raises ZeroDivisionError, negative values
give a negative utilization, instead of ValueError."""


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
    att = n_layers * seq_len * d_model
    per_token = 6 * n_params + 12 * att
    if hardware and recompute:
        per_token += 2 * n_params + 4 * att
    return tokens_per_s * per_token / peak_flops
