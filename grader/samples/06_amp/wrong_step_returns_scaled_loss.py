"""amp_train_step returns the scaled loss it called backward on: the loss times the grad scaler's
scale (4096 in the check), not the step's loss."""

# fails: test_amp_train_step, test_train_amp
# fails-on-gpu: test_train_amp_cuda
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
    scaled = scaler.scale(loss)
    scaled.backward()
    if max_grad_norm is not None:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    scaler.step(optimizer)
    scaler.update()
    return scaled.detach()
