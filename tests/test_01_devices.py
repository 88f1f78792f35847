"""01_devices: the checks accept the reference and written-differently answers, and reject
every listed mistake with a teaching message. Fast, in-process, on the CPU."""

import collections
import inspect
import os

import pytest
import torch

from grader.checks import ch01_devices as checks
from grader.checks.common import CheckFailed
from grader.runtime.simulate import simulated_cuda

from .helpers import assert_sample_scores_as_declared, reference_fn, run_every_check, sample_params

A = "01_devices"


@pytest.mark.parametrize(
    "name, signature",
    [
        ("pick_device", "(preferred: str | None = None) -> torch.device"),
        ("to_device", "(obj, device, non_blocking: bool = False)"),
        ("seed_everything", "(seed: int) -> None"),
        ("visible_gpu_count", "(cuda_visible_devices: str) -> int"),
    ],
)
def test_reference_has_the_curriculum_signature(name, signature):
    assert str(inspect.signature(reference_fn(A, name))) == signature


@pytest.mark.parametrize(
    "name", ["pick_device", "to_device", "seed_everything", "visible_gpu_count"]
)
def test_reference_passes_every_check(name, capsys):
    run_every_check(checks, name, reference_fn(A, name))
    out = capsys.readouterr().out
    assert "OK:" in out
    if not torch.cuda.is_available():
        assert "NOT CHECKED here" in out


@pytest.mark.parametrize("sample", sample_params(A))
def test_sample_scores_as_declared(sample):
    assert_sample_scores_as_declared(sample)


def test_pick_device_message_names_available_devices():
    def accepts_everything(preferred=None):
        return torch.device(preferred or "cpu")

    with pytest.raises(CheckFailed) as err:
        checks.check_pick_device(accepts_everything)
    text = str(err.value)
    assert "Yours" in text and "Expected" in text and "Likely cause" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="the simulated machine is for CPU-only hosts")
def test_reference_pick_device_on_simulated_gpus():
    pick = reference_fn(A, "pick_device")
    with simulated_cuda(device_count=2):
        assert pick() == torch.device("cuda:0")
        assert pick("cuda:1") == torch.device("cuda:1")
        assert pick("cuda") == torch.device("cuda:0")
        with pytest.raises(ValueError, match="cuda:0, cuda:1, cpu"):
            pick("cuda:2")


def test_to_device_keeps_namedtuple_and_does_not_mutate():
    to_device = reference_fn(A, "to_device")
    Pair = collections.namedtuple("Pair", "a b")
    batch = [Pair(torch.ones(1), "x"), {"k": torch.zeros(2)}]
    out = to_device(batch, "meta")
    assert type(out[0]) is Pair and out[0].a.is_meta and out[0].b == "x"
    assert batch[0].a.device.type == "cpu" and out is not batch


def test_seed_check_names_the_forgotten_generator():
    def torch_only(seed):
        torch.manual_seed(seed)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False

    with pytest.raises(CheckFailed, match="random.random"):
        checks.check_seed_everything(torch_only)


def test_visible_gpu_count_check_puts_back_what_the_answer_changed():
    before = os.environ.get("CUDA_VISIBLE_DEVICES")

    def sets_environ(value):
        os.environ["CUDA_VISIBLE_DEVICES"] = value
        return torch.cuda.device_count()

    try:
        with pytest.raises(CheckFailed, match="read once, at CUDA initialisation"):
            checks.check_visible_gpu_count(sets_environ)
        assert os.environ.get("CUDA_VISIBLE_DEVICES") == before
    finally:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


@pytest.mark.parametrize(
    "value, count",
    [(None, 4), ("", 0), ("-1", 0), ("0", 1), ("2,0", 2), ("1,-1,3", 1), ("5", 0), ("0,0", 0),
     ("3,4", 1), ("1gpu2,2", 2)],
)  # fmt: skip
def test_simulated_machine_counts_visible_devices_as_cuda_does(value, count):
    from grader.runtime.simulated_site.sitecustomize import visible_count

    assert visible_count(value, 4) == count


@pytest.mark.skipif(torch.cuda.is_available(), reason="plays a GPU machine on a CPU-only host")
def test_fresh_process_sees_the_simulated_machine():
    """The simulated machine reaches a child started with a copy of the environment, as the
    reference starts it, and tells CUDA_VISIBLE_DEVICES values apart."""
    seen = reference_fn(A, "visible_gpu_count")
    probe = checks._probe_visible_gpu_count
    result = probe(seen, ("0,1", "3"), True)
    assert [r["value"] for r in result["records"]] == [2, 1]


def test_visible_gpu_count_check_on_a_gpu_machine_rejects_always_zero(monkeypatch):
    """On a GPU machine the check compares with the reference for its own values: an answer
    that always says 0 is right for "" and "-1", so one value must expose a GPU. Plays a
    1-GPU machine: CUDA "available", its initialisation a no-op, and a reference that counts
    what CUDA would expose there."""
    import types

    from grader.runtime.simulated_site.sitecustomize import visible_count

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    ref = types.SimpleNamespace(visible_gpu_count=lambda value: visible_count(value, 1))
    monkeypatch.setattr(checks, "reference", lambda assignment: ref)

    def always_zero(cuda_visible_devices):
        return 0

    with pytest.raises(CheckFailed, match="visible_gpu_count\\('0'\\)"):
        checks.check_visible_gpu_count(always_zero)
    checks.check_visible_gpu_count(ref.visible_gpu_count)  # the right counts pass


@pytest.mark.parametrize(
    "env, graded",
    [
        ({}, False),
        ({"NBGRADER_EXECUTION": "validate", "NBGRADER_VALIDATING": "1"}, False),
        ({"NBGRADER_EXECUTION": "autograde"}, True),
        ({"GPU_COURSE_AUTOGRADE": "1"}, True),
    ],
    ids=["student", "nbgrader-validate", "nbgrader-autograde-any-config", "course-autograde"],
)
def test_a_cuda_check_that_cannot_run_scores_0_under_any_autograde(
    env, graded, monkeypatch, capsys
):
    """Without a GPU: under nbgrader's autograde with any configuration (it sets
    NBGRADER_EXECUTION=autograde) or the course's command, a CUDA check raises (the cell scores
    0); in a student's run and under validate it says "not checked here" and passes."""
    from grader.checks import common

    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    for name in ("NBGRADER_EXECUTION", "NBGRADER_VALIDATING", "GPU_COURSE_AUTOGRADE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if graded:
        with pytest.raises(common.NotCheckedWithoutCuda, match="scores 0"):
            common.cuda_or_not_checked("a CUDA check")
    else:
        assert common.cuda_or_not_checked("a CUDA check") is False
        assert "NOT CHECKED here" in capsys.readouterr().out


def test_glossary_defines_early_terms_where_the_notebook_starts_and_points_to_real_notebooks():
    """01's glossary (before the first exercise) defines the terms used before they are
    explained, and each notebook it names for a term exists and uses that term."""
    import re

    from grader.runtime import course

    nb = course.read(course.source_path("01_devices"))
    ids = [c.get("id") for c in nb.cells]
    glossary = nb.cells[ids.index("md-03b")].source
    assert ids.index("md-03b") < ids.index("pick_device")
    rows = [line for line in glossary.splitlines() if line.startswith("| **")]
    terms = {re.findall(r"\*\*(.+?)\*\*", row)[0]: row.rsplit("|", 2)[1] for row in rows}
    for term in ("SM", "warp", "HBM", "Kineto", "stream", "kernel", "Tensor Core", "NCCL"):
        assert any(term in row.split("|")[1] for row in rows), term
    sources = {aid: course.read(course.source_path(aid)) for aid in course.assignments()}
    for term, where in terms.items():
        for aid in (w.strip() for w in where.split(",")):
            if aid == "here":
                continue
            text = "\n".join(c.source for c in sources[aid].cells)
            assert term in text, f"{term!r} is said to be explained in {aid}, which never uses it"


def test_to_returns_the_tensor_itself_unless_copy_is_asked_for():
    """What 01's `.cuda(i)` and `.to(copy=True)` cell states, on the CPU."""
    t = torch.zeros(3)
    assert t.to("cpu") is t
    copied = t.to("cpu", copy=True)
    assert copied is not t and copied.data_ptr() != t.data_ptr()
    assert "device" in torch.Tensor.cuda.__doc__.split("Args:")[1]


def test_troubleshooting_names_apis_that_exist():
    """01's "why is my GPU not available" cell uses these: each must exist in this torch."""
    import importlib.util

    assert hasattr(torch.version, "cuda") and hasattr(torch.version, "hip")
    assert importlib.util.find_spec("torch.utils.collect_env") is not None
    assert importlib.util.find_spec("torch.utils.hipify") is not None


def test_hardware_section_names_its_source_for_every_table():
    from grader.runtime import course

    cells = {c.id: c.source for c in course.read(course.source_path(A)).cells}
    hardware = cells["md-03c"]
    assert "d2l.ai/chapter_computational-performance/hardware.html" in hardware
    assert "gist.github.com/eshelman" in hardware
    for topic in ("burst", "banks", "IOPs", "PCIe", "Ethernet", "inference", "instances"):
        assert topic in hardware, topic
    assert "torch.version.cuda" in cells["code-05c"] and "--gpus" in cells["md-05b"]
    assert "copy=True" in cells["code-07c"] and ".cuda(i)" in cells["code-07c"]
