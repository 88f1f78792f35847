"""07_multi_gpu: the checks accept the reference and written-differently answers and reject
every listed mistake (gloo processes on the CPU, virtual devices for placement); the course's
process launcher never waits forever and never needs a fixed port."""

import inspect
import json
import os
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from grader.checks import ch07_multi_gpu as checks
from grader.checks.common import CheckFailed, NotAttempted
from grader.runtime import course, distributed
from grader.runtime.distributed import RanksFailed, run_ranks, run_torchrun, spawn_script
from grader.tools import samples

from .helpers import (
    assert_sample_scores_as_declared,
    exercise_params,
    reference_fn,
    run_every_check,
    sample_params,
)

A = "07_multi_gpu"


@pytest.mark.parametrize(
    "name, signature",
    [
        ("average_gradients", "(model) -> None"),
        (
            "shard_indices",
            "(num_samples: int, rank: int, world_size: int, *, shuffle: bool = True, "
            "seed: int = 0, epoch: int = 0, drop_last: bool = False) -> list[int]",
        ),
        ("ddp_train", "(rank: int, world_size: int, config: dict) -> None"),
        (
            "split_model",
            "(model: torch.nn.modules.container.Sequential, devices: list[str]) "
            "-> torch.nn.modules.module.Module",
        ),
    ],
)
def test_reference_has_the_curriculum_signature(name, signature):
    assert str(inspect.signature(reference_fn(A, name))) == signature


@pytest.mark.parametrize(
    "name", exercise_params(A, ["average_gradients", "shard_indices", "split_model"])
)
def test_reference_passes_every_check(name, capsys):
    run_every_check(checks, name, reference_fn(A, name))
    assert "OK:" in capsys.readouterr().out


def _write_reference_script(folder):
    nb = course.read(course.source_path(A))
    cell = next(
        c for c in course.solution_cells(nb) if course.nbgrader_meta(c)["grade_id"] == "ddp_train"
    )
    path, body = course.split_writefile(course.strip_solution_markers(cell.source))
    assert path == "ddp_script.py"
    script = folder / path
    script.write_text(body)
    return script


@pytest.mark.slow  # starts rank processes (seconds)
def test_reference_ddp_script_passes_with_spawn_and_torchrun(tmp_path, capsys):
    script = _write_reference_script(tmp_path)
    checks.check_ddp_train(str(script))
    checks.check_ddp_train_hidden(str(script))
    out = capsys.readouterr().out
    assert "mp.spawn" in out and "torchrun" in out


@pytest.mark.parametrize("sample", sample_params(A))
def test_sample_scores_as_declared(sample):
    assert_sample_scores_as_declared(sample)


@given(
    n=st.integers(1, 60),
    world_size=st.integers(1, 6),
    data=st.data(),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**31),
    epoch=st.integers(0, 5),
    drop_last=st.booleans(),
)
def test_reference_shard_indices_equals_distributed_sampler(
    n, world_size, data, shuffle, seed, epoch, drop_last
):
    if drop_last and n < world_size:
        return
    rank = data.draw(st.integers(0, world_size - 1))
    kwargs = dict(shuffle=shuffle, seed=seed, epoch=epoch, drop_last=drop_last)
    assert reference_fn(A, "shard_indices")(n, rank, world_size, **kwargs) == (
        checks.sampler_indices(n, rank, world_size, **kwargs)
    )


def test_best_max_stage_by_hand():
    model = nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 1), nn.Linear(1, 100))
    # layer sizes 110, 0, 11, 200: two stages -> [110, 0, 11 | 200] = 200
    assert checks.best_max_stage(model, 2) == 200
    assert checks.best_max_stage(model, 4) == 200
    assert checks.best_max_stage(model, 1) == 321


def test_virtual_devices_follow_cuda_placement_rules():
    layer = nn.Linear(3, 2)
    x = torch.randn(4, 3, requires_grad=True)
    with checks.VirtualDevices() as vd:
        layer.to("cuda:1")
        assert next(layer.parameters()).device == torch.device("cuda:1")
        with pytest.raises(RuntimeError, match="same device"):
            layer(x)
        y = layer(x.to("cuda:1"))
        assert vd.device_of(y) == "cuda:1" and y.is_cuda
        z = y.cpu() * 2
        assert z.device == torch.device("cpu")
        w = torch.zeros(2, device="cuda:0")
        assert w.device == torch.device("cuda:0")
    z.sum().backward()  # autograd flows back through the moves
    assert x.grad is not None and x.grad.abs().sum() > 0


@pytest.mark.slow  # starts rank processes (seconds)
def test_run_ranks_ends_a_deadlock_with_a_clear_message():
    def only_rank0_reduces(rank, world_size):
        if rank == 0:
            dist.all_reduce(torch.ones(1))
        else:
            time.sleep(600)

    start = time.monotonic()
    with pytest.raises(
        RanksFailed, match=r"rank\(s\) \[.*\] of 2 had not finished.*same collectives"
    ):
        run_ranks(only_rank0_reduces, 2, timeout_s=5)
    assert time.monotonic() - start < 30


def test_run_ranks_reports_the_failing_rank_and_its_traceback():
    def rank1_fails(rank, world_size):
        if rank == 1:
            raise ValueError("rank one is broken")
        return rank

    with pytest.raises(RanksFailed, match=r"rank 1 raised:(.|\n)*ValueError: rank one is broken"):
        run_ranks(rank1_fails, 2, timeout_s=30)


def test_two_runs_at_once_need_no_port(tmp_path):
    """Each run has its own file store: runs started back to back (or in parallel gradings)
    cannot collide on a port."""

    def world(rank, world_size):
        t = torch.tensor([1.0])
        dist.all_reduce(t)
        return t.item()

    assert run_ranks(world, 2) == [2.0, 2.0]
    assert run_ranks(world, 3) == [3.0, 3.0, 3.0]


@pytest.mark.slow  # starts rank processes (seconds)
def test_torchrun_failure_and_timeout_are_reported(tmp_path):
    crash = tmp_path / "crash.py"
    crash.write_text("import os\nif os.environ['RANK'] == '1':\n    raise SystemExit(3)\n")
    with pytest.raises(RanksFailed, match="exited with code"):
        run_torchrun(crash, 2, timeout_s=120)
    hang = tmp_path / "hang.py"
    hang.write_text("import time\ntime.sleep(600)\n")
    start = time.monotonic()
    with pytest.raises(RanksFailed, match="not finished after 8 s"):
        run_torchrun(hang, 2, timeout_s=8)
    assert time.monotonic() - start < 40


def test_ddp_check_explains_a_crashing_script(tmp_path):
    script = tmp_path / "ddp_script.py"
    script.write_text(
        "from torch import nn\n\n\ndef make_model():\n    return nn.Linear(8, 1)\n\n\n"
        "def ddp_train(rank, world_size, config):\n    raise KeyError('dataset')\n"
    )
    with pytest.raises(AssertionError, match="rank . raised(.|\n)*KeyError"):
        checks.check_ddp_train(str(script))


def test_ddp_config_is_json_serialisable(tmp_path):
    config = checks.ddp_config(tmp_path)
    assert json.loads(json.dumps(config)) == config
    assert config["init_method"].startswith("file://")


@pytest.mark.multi_gpu
def test_reference_ddp_script_trains_with_nccl_on_two_gpus(tmp_path):
    from grader.runtime.distributed import load_script, spawn_script

    script = _write_reference_script(tmp_path)
    config = dict(checks.ddp_config(tmp_path), backend="nccl")
    spawn_script(script, 2, config, timeout_s=300)
    x, y = checks.ddp_data(0)
    expected = checks.single_process_training(load_script(script).make_model, x, y, config, 2)
    got = torch.load(config["out"])
    assert max((got[k] - expected[k]).abs().max().item() for k in expected) < 1e-4


_ABORT_AT_EXIT = (
    "import atexit\nimport os\n\n\n"
    "def ddp_train(rank, world_size, config):\n"
    "    atexit.register(os.abort)  # what torch's gloo threads may do at interpreter shutdown\n\n\n"
    "if __name__ == '__main__':\n"
    "    ddp_train(int(os.environ['RANK']), int(os.environ['WORLD_SIZE']), {})\n"
)


@pytest.mark.slow  # starts rank processes (seconds)
def test_launchers_end_a_finished_rank_before_interpreter_shutdown(tmp_path):
    """A rank whose function returned is not failed by an abort during interpreter shutdown
    (DDP on gloo can abort there: grader.runtime.distributed, "No abort at exit")."""
    script = tmp_path / "abort_at_exit.py"
    script.write_text(_ABORT_AT_EXIT)
    spawn_script(script, 2, {}, timeout_s=120)
    run_torchrun(script, 2, timeout_s=120)


@pytest.mark.slow  # starts rank processes (seconds)
def test_launchers_still_report_a_rank_that_raises(tmp_path):
    script = tmp_path / "raises.py"
    script.write_text(_ABORT_AT_EXIT.replace("atexit.register(os.abort)", "raise KeyError('x')"))
    with pytest.raises(RanksFailed, match="KeyError"):
        spawn_script(script, 2, {}, timeout_s=120)
    with pytest.raises(RanksFailed, match="KeyError"):
        run_torchrun(script, 2, timeout_s=120)


# --------------------------------------------------------------------------- spawned ranks
def _define_in_notebook(source: str, name: str, number: int):
    """Define ``name`` as a notebook cell does: IPython's compiler registers the cell's text in
    the line cache (where ipykernel's does too) and runs it in a ``__main__`` namespace."""
    from IPython.core.compilerop import CachingCompiler

    filename = CachingCompiler().cache(source, number=number)
    namespace = {"__name__": "__main__"}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


def _sample_cell(name: str) -> str:
    (sample,) = [s for s in samples.load_samples(A) if s.name == name]
    return sample.cells["average_gradients"]


def test_fork_is_safe_only_without_accelerator_devices():
    assert distributed.fork_is_safe() == (torch.cuda.device_count() == 0)
    assert distributed.default_start_method() == ("fork" if distributed.fork_is_safe() else "spawn")


@pytest.mark.parametrize(
    "name",
    ["correct_avg_one_flat_buffer", "correct_avg_helper_and_constant", "wrong_avg_no_division"],
)
def test_average_gradients_check_spawns_ranks_where_fork_is_unsafe(monkeypatch, name):
    """On a GPU machine a kernel that has run a backward cannot fork ranks that run backward
    (autograd's device threads); the check then spawns them and rebuilds the notebook's
    function from its cell (helpers and constants of the cell included). Forced here, on the
    CPU: correct answers pass, a wrong one fails as it does with fork."""
    monkeypatch.setattr(distributed, "fork_is_safe", lambda: False)
    methods = []
    start = distributed._start_ranks

    def spy(fn, world_size, args, backend, timeout_s, start_method):
        methods.append(start_method)
        return start(fn, world_size, args, backend, timeout_s, start_method)

    monkeypatch.setattr(distributed, "_start_ranks", spy)
    setup = "import torch\nimport torch.distributed as dist\n"  # an earlier cell's imports
    fn = _define_in_notebook(setup + _sample_cell(name), "average_gradients", 101)
    # a backward in the "kernel" first, as earlier cells of a notebook may run
    torch.nn.Linear(2, 1)(torch.ones(1, 2)).sum().backward()
    if name.startswith("correct"):
        checks.check_average_gradients(fn)
    else:
        with pytest.raises(CheckFailed, match="divide the all-reduced sum"):
            checks.check_average_gradients(fn)
    assert methods == ["spawn"]


def test_spawned_ranks_report_the_unsolved_stub(monkeypatch):
    monkeypatch.setattr(distributed, "fork_is_safe", lambda: False)
    stub = _define_in_notebook(
        "def average_gradients(model) -> None:\n    raise NotImplementedError()\n",
        "average_gradients",
        103,
    )
    with pytest.raises(NotAttempted):
        checks.check_average_gradients(stub)


def test_a_notebook_function_runs_in_spawned_ranks_with_its_helpers():
    helper_cell = "SCALE = 10.0\n\n\ndef scaled(t):\n    return t * SCALE\n"
    scaled = _define_in_notebook(helper_cell, "scaled", 104)
    cell = (
        "import torch\nimport torch.distributed as dist\n\n\n"
        "class Box:\n    def __init__(self, v):\n        self.v = v\n\n\n"
        "def world(rank, world_size):\n"
        "    t = Box(scaled(torch.tensor([float(rank + 1)]))).v\n"
        "    dist.all_reduce(t)\n"
        "    return t.item()\n"
    )
    namespace = {"__name__": "__main__", "scaled": scaled}
    from IPython.core.compilerop import CachingCompiler

    filename = CachingCompiler().cache(cell, number=105)
    exec(compile(cell, filename, "exec"), namespace)
    assert run_ranks(namespace["world"], 2, start_method="spawn", timeout_s=120) == [30.0, 30.0]


def test_a_function_without_source_cannot_be_sent_to_spawned_ranks():
    namespace = {"__name__": "__main__"}
    exec(compile("def f(rank, world_size):\n    return rank\n", "<nowhere>", "exec"), namespace)
    with pytest.raises(TypeError, match="fresh process"):
        distributed.portable(namespace["f"])
    assert distributed.portable(checks.sampler_indices) is checks.sampler_indices
    in_a_cell = _define_in_notebook("f = lambda rank, world_size: rank\n", "f", 106)
    with pytest.raises(TypeError, match="define the function with def"):
        distributed.portable(in_a_cell)


def test_ddp_check_names_a_state_dict_saved_from_the_wrapper(tmp_path):
    script = _write_reference_script(tmp_path)
    text = script.read_text().replace(
        'torch.save({k: v.cpu() for k, v in model.state_dict().items()}, config["out"])',
        'torch.save(ddp_model.state_dict(), config["out"])',
    )
    assert text != script.read_text()
    script.write_text(text)
    with pytest.raises(CheckFailed, match="prefixes every key"):
        checks.check_ddp_train(str(script))


def test_probes_hand_back_plain_data_only(tmp_path):
    """The DDP probe returns tensors and text, never the student's objects."""
    from grader.runtime import handover

    script = _write_reference_script(tmp_path)
    x, y = checks.ddp_data(3)
    seen = checks._probe_ddp_train(str(script), "spawn", 2, x, y, 3)
    assert set(seen) == {"state"}
    handover.check_data(seen)
    assert sys.modules["grader.checks.ch07_multi_gpu"].JUDGED_IN_GRADER is True


_AFTER_TRACING = """
import torch
from IPython.core.compilerop import CachingCompiler
from torch._subclasses.fake_tensor import FakeTensorMode

from grader.checks import ch07_multi_gpu as checks

from grader.runtime import distributed

with FakeTensorMode():  # what tracing (torch.compile, export, explain) does on a CPU machine
    torch.ones(1) * 2
torch.nn.Linear(2, 1)(torch.ones(1, 2)).sum().backward()  # autograd now runs a device thread
assert distributed.fork_is_safe()  # no GPU: fork is tried first
cell = CELL
namespace = {"__name__": "__main__"}
exec(compile(cell, CachingCompiler().cache(cell, number=1), "exec"), namespace)
checks.check_average_gradients(namespace["average_gradients"])
"""


@pytest.mark.slow  # starts rank processes (seconds)
def test_forked_ranks_that_cannot_run_autograd_are_spawned_again(tmp_path):
    """After tracing with fake tensors, a CPU-only process's autograd runs a device thread (a
    stand-in CUDA device guard counts one device), so forked ranks cannot run backward: the
    launcher sees their error and spawns the ranks again. In a fresh process, to keep this one's
    autograd as it is."""
    cell = "import torch.distributed as dist\n\n" + _sample_cell("correct_avg_one_flat_buffer")
    code = _AFTER_TRACING.replace("CELL", repr(cell))
    # The case is a machine without a GPU: on a GPU machine, hide the GPUs from the child (there
    # fork_is_safe() is False and the ranks are spawned from the start, so nothing is retried).
    env = dict(os.environ, PYTHONPATH=str(course.REPO), CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OK: average_gradients" in proc.stdout


def test_the_reference_can_be_rebuilt_in_a_spawned_rank():
    """Where fork is unsafe (after fake-tensor tracing in this process, say), ranks are spawned
    and rebuild the function from its source: the reference's source is in the line cache."""
    import inspect

    from grader.runtime import course
    from grader.runtime.distributed import function_recipe

    fn = course.reference(A).average_gradients
    assert "def average_gradients" in inspect.getsource(fn)
    assert function_recipe(fn)


def test_alexnet_channel_split_cell_matches_the_unsplit_layers(capsys):
    """07's AlexNet cell: both split layers equal the unsplit ones; only layer 3 exchanges bytes."""
    from grader.runtime import course

    cells = {c.get("id"): c.source for c in course.read(course.source_path(A)).cells}
    namespace = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, "N_GPUS": 0}
    exec(compile(cells["code-03d"], "code-03d", "exec"), namespace)
    out = capsys.readouterr().out
    assert "layer 2 split equals the grouped conv: True | bytes exchanged: 0" in out
    assert "layer 3 split equals the full conv: True" in out
    assert namespace["exchanged"] == 2 * 2 * 128 * 13 * 13 * 4  # both halves of 128 channels


def test_parallel_loss_and_peer_access_apis_exist():
    """07 names DataParallel's output_device (the first fix) and can_device_access_peer."""
    import inspect

    assert "output_device" in inspect.signature(torch.nn.DataParallel).parameters
    assert callable(torch.cuda.can_device_access_peer)
