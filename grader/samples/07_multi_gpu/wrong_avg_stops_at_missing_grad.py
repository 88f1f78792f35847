"""average_gradients stops at the first parameter without a gradient (break where continue was
meant): every parameter after an unused layer keeps its own rank's gradient."""

# fails: test_average_gradients
# %% average_gradients
import torch.distributed as dist


def average_gradients(model) -> None:
    for p in model.parameters():
        if p.grad is None:
            break
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
