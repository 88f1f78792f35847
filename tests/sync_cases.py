"""Tensor calls known to synchronize on CUDA, and calls known not to, for the tests of the
simulated GPU (tests/test_simulate.py) and, on a real GPU, against
``torch.cuda.set_sync_debug_mode("error")`` (tests/test_cuda.py).

Sources: torch's own test of ``set_sync_debug_mode`` (test/test_torch.py, ``test_sync_warning``:
its ``expect_sync`` and ``expect_no_sync`` lists, with x = rand(4), y = rand(()),
ind = randint(4, (3,)), repeats = full((1,), 2), mask = randint(2, (4,)).bool(), all on the GPU,
and ind_cpu on the host), and the host reads PyTorch documents in "CUDA semantics" (.item(),
.tolist(), printing, copies to the host) and for the operators whose output sizes depend on the
data (nonzero, argwhere, unique, masked_select, bincount). Each case takes the keyword arguments
of :func:`sync_inputs`.
"""

import torch
import torch.nn.functional as F


def _set(t, index, value):
    t[index] = value
    return t


SIZE = 4
SYNCS = {
    # test_sync_warning's expect_sync
    "x[mask] = y": lambda x, y, ind, ind_cpu, repeats, mask: _set(x, mask, y),
    "x[ind_cpu] = y": lambda x, y, ind, ind_cpu, repeats, mask: _set(x, ind_cpu, y),
    "x[mask]": lambda x, y, ind, ind_cpu, repeats, mask: x[mask],
    "x[ind_cpu]": lambda x, y, ind, ind_cpu, repeats, mask: x[ind_cpu],
    "x.nonzero()": lambda x, y, ind, ind_cpu, repeats, mask: x.nonzero(),
    "if y:": lambda x, y, ind, ind_cpu, repeats, mask: x if y else 2 * x,
    "one_hot(ind)": lambda x, y, ind, ind_cpu, repeats, mask: F.one_hot(ind),
    "repeat_interleave(x, repeats)": lambda x, y, ind, ind_cpu, repeats, mask: (
        torch.repeat_interleave(x, repeats)
    ),
    # documented host reads and data-dependent sizes
    "y.item()": lambda x, y, ind, ind_cpu, repeats, mask: y.item(),
    "float(y)": lambda x, y, ind, ind_cpu, repeats, mask: float(y),
    "int(y)": lambda x, y, ind, ind_cpu, repeats, mask: int(y * 10),
    "x.tolist()": lambda x, y, ind, ind_cpu, repeats, mask: x.tolist(),
    "repr(x)": lambda x, y, ind, ind_cpu, repeats, mask: repr(x),
    "f-string": lambda x, y, ind, ind_cpu, repeats, mask: f"{y:.3f}",
    "x.cpu()": lambda x, y, ind, ind_cpu, repeats, mask: x.cpu(),
    "x.to('cpu')": lambda x, y, ind, ind_cpu, repeats, mask: x.to("cpu"),
    "torch.tensor([y, y])": lambda x, y, ind, ind_cpu, repeats, mask: torch.tensor([y, y]),
    "torch.bincount(ind)": lambda x, y, ind, ind_cpu, repeats, mask: torch.bincount(ind),
    "torch.unique(ind)": lambda x, y, ind, ind_cpu, repeats, mask: torch.unique(ind),
    "unique_consecutive": lambda x, y, ind, ind_cpu, repeats, mask: ind.unique_consecutive(),
    "masked_select": lambda x, y, ind, ind_cpu, repeats, mask: torch.masked_select(x, mask),
    "torch.where(mask)": lambda x, y, ind, ind_cpu, repeats, mask: torch.where(mask),
    "torch.argwhere(x)": lambda x, y, ind, ind_cpu, repeats, mask: torch.argwhere(x),
    # Two tensors: torch.equal(x, x) of one and the same tensor answers True without reading the
    # data (seen on an H200 with torch 2.11: no synchronizing call reported).
    "torch.equal": lambda x, y, ind, ind_cpu, repeats, mask: torch.equal(x, x * 1),
    "torch.allclose": lambda x, y, ind, ind_cpu, repeats, mask: torch.allclose(x, x),
    "torch.arange(y)": lambda x, y, ind, ind_cpu, repeats, mask: torch.arange(y * 10),
    "bool(any)": lambda x, y, ind, ind_cpu, repeats, mask: bool((x > 0.5).any()),
}
NO_SYNCS = {
    # One tensor compared with itself: answered without reading the data (an H200, torch 2.11).
    "torch.equal(x, x)": lambda x, y, ind, ind_cpu, repeats, mask: torch.equal(x, x),
    # test_sync_warning's expect_no_sync
    "x[mask] = 1.": lambda x, y, ind, ind_cpu, repeats, mask: _set(x, mask, 1.0),
    "x[ind] = y": lambda x, y, ind, ind_cpu, repeats, mask: _set(x, ind, y),
    "x[ind]": lambda x, y, ind, ind_cpu, repeats, mask: x[ind],
    "one_hot(ind, num_classes)": lambda x, y, ind, ind_cpu, repeats, mask: F.one_hot(
        ind, num_classes=SIZE
    ),
    "randperm": lambda x, y, ind, ind_cpu, repeats, mask: torch.randperm(20000, device=x.device),
    "repeat_interleave(x, 2, output_size)": lambda x, y, ind, ind_cpu, repeats, mask: (
        torch.repeat_interleave(x, 2, output_size=2 * SIZE)
    ),
    "repeat_interleave(x, repeats, output_size)": lambda x, y, ind, ind_cpu, repeats, mask: (
        torch.repeat_interleave(x, repeats, output_size=2 * SIZE)
    ),
    "torch.any(y)": lambda x, y, ind, ind_cpu, repeats, mask: torch.any(y),
    # work that stays on the device
    "x.shape": lambda x, y, ind, ind_cpu, repeats, mask: x.shape[0] + x.dim() + x.numel(),
    "x.max()": lambda x, y, ind, ind_cpu, repeats, mask: x.max(),
    "x.argmax()": lambda x, y, ind, ind_cpu, repeats, mask: x.argmax(),
    "x.sum() / y": lambda x, y, ind, ind_cpu, repeats, mask: x.sum() / y,
    "masked_fill": lambda x, y, ind, ind_cpu, repeats, mask: x.masked_fill(mask, 0.0),
    "torch.where(mask, x, 0)": lambda x, y, ind, ind_cpu, repeats, mask: torch.where(mask, x, 0.0),
    "x.clamp(max=y)": lambda x, y, ind, ind_cpu, repeats, mask: x.clamp(max=y),
    "topk": lambda x, y, ind, ind_cpu, repeats, mask: torch.topk(x, 2),
    "sort": lambda x, y, ind, ind_cpu, repeats, mask: torch.sort(x),
    "gather": lambda x, y, ind, ind_cpu, repeats, mask: x.gather(0, ind),
    "index_select": lambda x, y, ind, ind_cpu, repeats, mask: x.index_select(0, ind),
    "scatter_add": lambda x, y, ind, ind_cpu, repeats, mask: torch.zeros_like(x).scatter_add(
        0, ind, x[:3]
    ),
    "count_nonzero": lambda x, y, ind, ind_cpu, repeats, mask: torch.count_nonzero(x),
    "torch.isin": lambda x, y, ind, ind_cpu, repeats, mask: torch.isin(ind, ind),
    "nan_to_num": lambda x, y, ind, ind_cpu, repeats, mask: torch.nan_to_num(x),
    "cross_entropy ignore_index": lambda x, y, ind, ind_cpu, repeats, mask: F.cross_entropy(
        x.view(1, SIZE), torch.full((1,), -1, device=x.device), ignore_index=-1
    ),
    "torch.stack": lambda x, y, ind, ind_cpu, repeats, mask: torch.stack([y, y]),
    "x.to('cpu', non_blocking=True)": lambda x, y, ind, ind_cpu, repeats, mask: x.to(
        "cpu", non_blocking=True
    ),
    "torch.tensor of floats": lambda x, y, ind, ind_cpu, repeats, mask: torch.tensor([1.0, 2.0]),
}


def sync_inputs(device="cpu"):
    """The cases' tensors, seeded, on ``device`` (``ind_cpu`` always on the host)."""
    g = torch.Generator().manual_seed(0)
    inputs = {
        "x": torch.rand(SIZE, generator=g),
        "y": torch.rand((), generator=g) + 0.5,
        "ind": torch.randint(SIZE, (3,), generator=g),
        "ind_cpu": torch.randint(SIZE, (3,), generator=g),
        "repeats": torch.full((1,), 2),
        "mask": torch.tensor([True, False, True, True]),
    }
    return {k: v if k == "ind_cpu" else v.to(device) for k, v in inputs.items()}


#: Cases whose tensors must be on two devices (a host index, a copy to the host of a tensor
#: already on the CPU): not for SyncRecorder, where every tensor stands for a GPU's.
TWO_DEVICES = {"x[ind_cpu] = y", "x[ind_cpu]", "x.to('cpu')", "x.to('cpu', non_blocking=True)"}
