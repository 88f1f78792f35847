"""mfu validates its rates through int(): half a token per second (a 70B model on one GPU)
truncates to 0 and is refused, though every positive rate is valid."""


# fails: test_mfu
# %% mfu
def mfu(
    tokens_per_s: float,
    n_params: int,
    n_layers: int,
    seq_len: int,
    d_model: int,
    peak_flops: float,
    *,
    hardware: bool = False,
    recompute: bool = False,
) -> float:
    if int(tokens_per_s) <= 0 or int(peak_flops) <= 0:
        raise ValueError("tokens_per_s and peak_flops must be positive")
    flops = 6 * n_params + 12 * n_layers * seq_len * d_model
    if hardware and recompute:
        flops += 2 * n_params + 4 * n_layers * seq_len * d_model
    return tokens_per_s * flops / peak_flops
