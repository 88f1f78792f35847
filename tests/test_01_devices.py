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
        (
            "visible_gpus",
            "(cuda_visible_devices: str, device_order: str = 'PCI_BUS_ID') -> list[str]",
        ),
    ],
)
def test_reference_has_the_curriculum_signature(name, signature):
    assert str(inspect.signature(reference_fn(A, name))) == signature


@pytest.mark.parametrize("name", ["pick_device", "to_device", "seed_everything", "visible_gpus"])
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


def test_visible_gpus_check_puts_back_what_the_answer_changed():
    before = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}

    def sets_environ(value, order="PCI_BUS_ID"):
        os.environ["CUDA_VISIBLE_DEVICES"] = value
        os.environ["CUDA_DEVICE_ORDER"] = order
        n = torch.cuda.device_count()
        return [str(torch.cuda.get_device_properties(i).uuid) for i in range(n)]

    try:
        with pytest.raises(CheckFailed, match="read once, at CUDA initialisation"):
            checks.check_visible_gpus(sets_environ)
        assert {k: os.environ.get(k) for k in before} == before
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.mark.parametrize(
    "value, count",
    [(None, 4), ("", 0), ("-1", 0), ("0", 1), ("2,0", 2), ("1,-1,3", 1), ("5", 0), ("0,0", 0),
     ("3,4", 1), ("1gpu2,2", 2)],
)  # fmt: skip
def test_simulated_machine_counts_visible_devices_as_cuda_does(value, count):
    from grader.runtime.simulated_site.sitecustomize import visible_count, visible_devices

    assert visible_count(value, 4) == count
    for order in (None, "PCI_BUS_ID", "FASTEST_FIRST"):
        assert len(visible_devices(value, 4, order)) == count


def test_simulated_machine_numbers_gpus_in_the_order_asked():
    """Two kinds of GPU: fastest first (the default) puts the two H100s (physical 1 and 3)
    before the two A100s; PCI_BUS_ID follows the bus ids. The value's indices count in that
    numbering, and the visible GPUs keep the value's order; UUID entries (or unique prefixes)
    name the same GPU under either order."""
    from grader.runtime.simulated_site.sitecustomize import machine, visible_devices

    gpus = machine(4)
    assert [g.name.split()[1][:4] for g in gpus] == ["A100", "H100", "A100", "H100"]
    assert sorted(g.pci_bus_id for g in gpus) == [g.pci_bus_id for g in gpus]
    assert len({str(g.uuid) for g in gpus}) == 4
    assert visible_devices(None, 4) == visible_devices(None, 4, "FASTEST_FIRST") == [1, 3, 0, 2]
    assert visible_devices(None, 4, "PCI_BUS_ID") == [0, 1, 2, 3]
    assert visible_devices("2,0", 4, "PCI_BUS_ID") == [2, 0]
    assert visible_devices("2,0", 4, "FASTEST_FIRST") == [0, 1]
    uuids = [f"GPU-{g.uuid}" for g in gpus]
    for order in ("PCI_BUS_ID", "FASTEST_FIRST"):
        assert visible_devices(f"{uuids[3][:8]},{uuids[0]}", 4, order) == [3, 0]
        assert visible_devices(f"{uuids[2]},{uuids[2][:9]}", 4, order) == []  # repeated GPU
        assert visible_devices(f"{uuids[1]},GPU-,{uuids[0]}", 4, order) == [1]  # ambiguous
        assert visible_devices(f"{uuids[1]},0", 4, order) == [1]  # not a UUID: the list ends


@pytest.mark.skipif(torch.cuda.is_available(), reason="plays a GPU machine on a CPU-only host")
def test_fresh_process_sees_the_simulated_machine():
    """The simulated machine reaches a child started with a copy of the environment, as the
    reference starts it, and its devices follow both variables."""
    seen = reference_fn(A, "visible_gpus")
    calls = [(("3,1",), {}), (("3,1", "FASTEST_FIRST"), {})]
    result = checks._probe_visible_gpus(seen, calls, True)
    uuid = checks._simulated_uuid
    assert [r["value"] for r in result["records"]] == [[uuid(3), uuid(1)], [uuid(2), uuid(3)]]
    assert result["here"] == [uuid(k) for k in (1, 3, 0, 2)] and not result["changed"]


def test_visible_gpus_check_on_a_gpu_machine_rejects_an_empty_list(monkeypatch):
    """On a GPU machine the check compares with the reference for its own values: an answer
    that always says [] is right for "" and "-1", so one value must expose a GPU. Plays a
    1-GPU machine: CUDA "available", its initialisation a no-op, and a reference that lists
    what CUDA would expose there."""
    import types

    from grader.runtime.simulated_site.sitecustomize import machine, visible_devices

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)

    def one_gpu(value, order="PCI_BUS_ID"):
        return [str(machine(1)[k].uuid) for k in visible_devices(value, 1, order)]

    monkeypatch.setattr(
        checks, "reference", lambda assignment: types.SimpleNamespace(visible_gpus=one_gpu)
    )

    def always_empty(cuda_visible_devices, device_order="PCI_BUS_ID"):
        return []

    with pytest.raises(CheckFailed, match="visible_gpus\\('0'\\)"):
        checks.check_visible_gpus(always_empty)
    checks._check_visible_gpus(one_gpu, hidden=False)  # the right lists pass (one_gpu starts
    # no child, so the failing-child part of check_visible_gpus is left to the other tests)
    checks.check_visible_gpus_hidden(one_gpu)


def test_visible_gpus_cuda_check_on_two_kinds_of_gpu(monkeypatch):
    """The CUDA check asks both orders and a UUID entry: plays a 2-GPU machine whose GPUs
    differ (an A100 on the first bus, an H100 on the second, so fastest first swaps them),
    with a reference that lists what CUDA would expose there. Answers that ignore the order
    or parse the value by hand lose the point; the reference's lists pass."""
    import types

    from grader.runtime.simulated_site.sitecustomize import (
        device_lookup,
        enumeration,
        machine,
        visible_devices,
    )

    props, name = device_lookup(enumeration(2, None), 2)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", props)

    def two_gpus(value, order="PCI_BUS_ID"):
        return [str(machine(2)[k].uuid) for k in visible_devices(value, 2, order)]

    monkeypatch.setattr(
        checks, "reference", lambda assignment: types.SimpleNamespace(visible_gpus=two_gpus)
    )

    def ignores_order(value, order="PCI_BUS_ID"):
        return two_gpus(value, "FASTEST_FIRST")

    def by_hand(value, order="PCI_BUS_ID"):
        uuids = two_gpus("0,1", order)
        return [uuids[int(v)] for v in value.split(",") if v.strip() and 0 <= int(v) < 2]

    checks.check_visible_gpus_cuda(two_gpus)
    with pytest.raises(CheckFailed, match="(?s)'0', 'PCI_BUS_ID'.*CUDA_DEVICE_ORDER=device_order"):
        checks.check_visible_gpus_cuda(ignores_order)
    with pytest.raises(CheckFailed, match="visible_gpus\\('GPU-.*raised ValueError"):
        checks.check_visible_gpus_cuda(by_hand)


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
