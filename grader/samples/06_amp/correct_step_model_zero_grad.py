"""A correct amp_train_step written differently: model.zero_grad(), the parameters taken from the
optimizer for clipping, and the loss returned as a new tensor."""

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
    model.zero_grad(set_to_none=False)
    autocast = torch.autocast(device_type=device_type, dtype=dtype)
    autocast.__enter__()
    try:
        outputs = model(inputs)
        loss = loss_fn(outputs, targets)
    finally:
        autocast.__exit__(None, None, None)
    scaled = scaler.scale(loss)
    scaled.backward()
    if max_grad_norm is not None:
        scaler.unscale_(optimizer)
        params = [p for group in optimizer.param_groups for p in group["params"]]
        torch.nn.utils.clip_grad_norm_(params, max_norm=max_grad_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach().clone()
