"""fused_step is torch.compile(unfused_step, backend="aot_eager") (the backend often suggested
when Inductor fails to build): it captures the graph but runs its operators one by one, so
nothing is fused."""

# fails: test_fused_step, test_fused_step_cuda
# %% fused_step
import torch

from grader.checks.ch10_profiling import unfused_step

fused_step = torch.compile(unfused_step, backend="aot_eager")
