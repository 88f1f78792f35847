"""amp_train_step never zeroes the gradients, so every step adds to the previous ones (train_amp,
built on it, fails too). With the grad scaler at a large scale it hardly shows: scaler.step left
the previous gradients unscaled, and the next unscale divides them by the scale again. So the
checks also train with the scale held at 1, and bfloat16 (no scaler); train_amp's CUDA check
trains in float16 with the scaler's 65536 and cannot see it."""

# fails: test_amp_train_step, test_train_amp
# fails-on-gpu: test_amp_train_step_cuda
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
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    if max_grad_norm is not None:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()
