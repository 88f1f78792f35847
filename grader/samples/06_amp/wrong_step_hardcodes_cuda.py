"""amp_train_step writes torch.autocast("cuda", ...) instead of using `device_type`: on a CPU batch
nothing is autocast (and without a GPU autocast is switched off with a warning)."""

# fails: test_amp_train_step, test_train_amp
# %% amp_train_step
import torch


def amp_train_step(
    model,
    inputs,
    targets,
    loss_fn,
    optimizer,
    scaler,
    *,
    device_type: str,
    dtype=torch.float16,
    max_grad_norm: float | None = None,
) -> torch.Tensor:
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=dtype):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    if max_grad_norm is not None:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()
