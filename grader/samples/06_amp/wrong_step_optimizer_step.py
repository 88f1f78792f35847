"""amp_train_step unscales by hand and calls optimizer.step(), so an overflowed step is not skipped."""

# fails: test_amp_train_step
# may-fail-on-gpu: test_train_amp_cuda
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
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    scaler.update()
    return loss.detach()
