"""A correct mfu written differently: the FLOPs counted per pass (a forward is 2N + 4·L·s·d,
a backward twice that) and the passes the model or the hardware ran."""


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
    if not (tokens_per_s > 0 and peak_flops > 0):
        raise ValueError("tokens_per_s and peak_flops must be > 0")
    forward = 2 * n_params + 4 * n_layers * seq_len * d_model
    passes = 3  # forward + backward (twice a forward)
    if hardware and recompute:
        passes += 1  # the forward again, inside backward
    achieved = tokens_per_s * passes * forward
    return achieved / peak_flops
