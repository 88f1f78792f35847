"""amp_train_step always autocasts to float16, whatever `dtype` says: a bfloat16 step runs in
float16 (with the scaler disabled, as it is for bfloat16)."""

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
    with torch.autocast(device_type, dtype=torch.float16):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    if max_grad_norm is not None:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()
