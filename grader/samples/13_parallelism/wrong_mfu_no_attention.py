"""mfu that counts 6·N FLOPs per token and omits attention's 12·L·s·d."""


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
    per_token = 6 * n_params
    if hardware and recompute:
        per_token += 2 * n_params
    return tokens_per_s * per_token / peak_flops
