"""The boundary between the student's code and the grader (grader.runtime.handover, grader.runtime.remote,
grader.grading.judge): only plain data crosses, exceptions come back as the student raised them, test
cells are read and judged on the grading side. Fast, in-process."""

from __future__ import annotations

import collections
import pickle
from unittest import mock

import pytest
import torch

from grader.checks.common import CheckFailed, NotAttempted, call_student, expect_raises
from grader.grading import judge
from grader.runtime import course, handover, remote


class AlwaysEqual:
    def __eq__(self, other):
        return True


class SneakyInt(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


Point = collections.namedtuple("Point", "x y")


@pytest.mark.parametrize(
    "value",
    [
        None,
        3,
        2.5,
        1 + 2j,
        "s",
        b"b",
        True,
        [1, (2, 3)],
        {"a": {1, 2}},
        collections.OrderedDict(a=1),
        torch.ones(2),
        torch.ones(2, device="meta"),
        torch.Size([2, 3]),
        torch.device("cuda:1"),
        torch.bfloat16,
    ],
)
def test_plain_data_crosses_unchanged(value):
    back = handover.roundtrip(value)
    assert type(back) is type(value)
    if isinstance(value, torch.Tensor):
        assert back.device == value.device and back.shape == value.shape
    else:
        assert back == value


@pytest.mark.parametrize(
    "value, named",
    [
        (SneakyInt(3), "SneakyInt (a subclass of int)"),
        (AlwaysEqual(), "AlwaysEqual"),
        (mock.MagicMock(), "MagicMock"),
        (Point(1, 2), "a named tuple"),
        ({"k": [1, AlwaysEqual()]}, "['k'][1]"),
        (frozenset([1]), "frozenset"),
        (torch.ones(2).to_sparse(), "sparse"),
    ],
)
def test_anything_else_is_refused_with_its_place_and_type(value, named):
    with pytest.raises(
        handover.NotData, match=named.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")
    ):
        handover.dumps(value)


class EvilFloat(float):
    """A float subclass whose own methods lie: the handover must not run them."""

    def __float__(self):
        raise AssertionError("the handover ran the subclass's __float__")

    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


def test_a_float_subclass_crosses_as_the_plain_float_of_its_value():
    """numpy.float64 is a float: where a float is asked it is taken, as a plain float; the
    subclass's own methods never run; float32 and int64 are no subclasses and stay refused."""
    np = pytest.importorskip("numpy")
    record = remote.attempt(lambda: np.float64(2.5))
    assert record == {"ok": True, "value": 2.5} and type(record["value"]) is float
    nested = remote.attempt(lambda: {"a": [np.float64(1.0), (EvilFloat(2.0),)], 3: {np.float64(4)}})
    assert nested["ok"] and nested["value"] == {"a": [1.0, (2.0,)], 3: {4.0}}
    assert type(nested["value"]["a"][1][0]) is float
    reply = remote.student(lambda: EvilFloat(7.5), "f")()
    assert reply == 7.5 and type(reply) is float
    for value in (np.float32(1.5), np.int64(3)):
        assert not remote.attempt(lambda v=value: v)["ok"]
    assert remote.attempt(lambda: [SneakyInt(3)])["ok"] is False


@pytest.mark.timeout(120, method="thread")  # pytest-timeout's signal method holds SIGALRM
def test_a_call_that_never_returns_is_stopped_with_a_message(monkeypatch):
    """attempt() and a handle's call stop the student's function after CALL_LIMIT_S: an endless
    loop and an endless sleep both fail with CallTimedOut naming the function, quickly; the
    timer and the SIGALRM handler are put back; an enclosing timer is left to govern."""
    import signal
    import time

    monkeypatch.setattr(remote, "CALL_LIMIT_S", 0.3)

    def spins():
        while True:
            pass

    def sleeps():
        time.sleep(60)

    for fn in (spins, sleeps):
        t0 = time.monotonic()
        record = remote.attempt(fn)
        assert time.monotonic() - t0 < 5
        assert not record["ok"] and "grader.runtime.remote.CallTimedOut" in record["error"]["types"]
        assert f"your {fn.__name__} did not return within 0.3 s" in record["error"]["message"]
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.default_int_handler, None)
    with pytest.raises(CheckFailed, match="did not return within 0.3 s"):
        call_student(remote.student(spins, "spins"))
    assert remote.attempt(lambda: 4)["value"] == 4  # quick calls are untouched
    signal.setitimer(signal.ITIMER_REAL, 30)  # an enclosing timer (a runner's alarm) governs
    try:
        assert remote.attempt(lambda: time.sleep(0.5) or 5)["value"] == 5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def test_forged_bytes_are_refused():
    """Bytes written without dumps' check (a kernel can send anything) are refused by loads."""
    import io

    buffer = io.BytesIO()
    torch.save({"score": SneakyInt(5)}, buffer)
    with pytest.raises(handover.NotData):
        handover.loads(buffer.getvalue())
    with pytest.raises(handover.NotData):
        handover.loads(pickle.dumps(AlwaysEqual()))
    with pytest.raises(handover.NotData):
        handover.loads(b"not a pickle at all")


def test_exceptions_come_back_as_the_student_raised_them():
    try:
        {}["missing"]
    except KeyError as exc:
        rebuilt = handover.rebuild(handover.describe(exc))
    assert isinstance(rebuilt, KeyError) and isinstance(rebuilt, handover.StudentError)
    assert handover.exception_name(rebuilt) == "KeyError"
    assert any("missing" in line for line in rebuilt.remote_traceback)
    stub = handover.rebuild(handover.describe(NotImplementedError()))
    assert type(stub) is NotImplementedError and not stub.args
    assert isinstance(handover.rebuild(handover.describe(SystemExit(3))), RuntimeError)
    assert isinstance(handover.rebuild(handover.describe(KeyboardInterrupt())), RuntimeError)


def _not_a_grader_probe(obj, x):
    return obj(x)


def test_local_channel_copies_arguments_and_round_trips_results():
    seen = []

    def answer(x):
        seen.append(x)
        x.append("changed by the student")
        return len(x)

    h = remote.student(answer, "answer")
    arg = [1, 2]
    assert h(arg) == 3
    assert arg == [1, 2], "the probe works on a copy, as in the student's kernel"
    assert h.probe(remote.call, [0]) == 2
    for not_a_probe in (lambda obj: obj, _not_a_grader_probe):
        with pytest.raises(TypeError, match="module-level function of a grader module"):
            h.probe(not_a_probe, [0])


def test_results_that_are_not_plain_data_fail_with_a_teaching_message():
    def returns_mock():
        return mock.MagicMock()

    with pytest.raises(CheckFailed, match="MagicMock.*plain values"):
        call_student(remote.student(returns_mock, "returns_mock"))


def test_stub_and_errors_through_a_handle():
    def stub():
        raise NotImplementedError()

    def raises_value_error(x):
        raise ValueError(f"bad {x}")

    with pytest.raises(NotAttempted, match="not attempted yet"):
        call_student(remote.student(stub, "stub"))
    with pytest.raises(CheckFailed, match="ValueError: bad 1"):
        call_student(remote.student(raises_value_error, "f"), 1)
    err = expect_raises(ValueError, remote.student(raises_value_error, "f"), 2, what="w", cause="c")
    assert "bad 2" in str(err)


def test_a_missing_name_is_a_name_error():
    h = remote.Handle("nowhere", via=remote.LOCAL)
    with pytest.raises(CheckFailed, match="NameError"):
        call_student(h)


def test_recorded_answers_replay_a_probe():
    records = [remote.attempt(int, "3"), remote.attempt(int, "x")]
    f = remote.Recorded("int", [(("3",), {}), (("x",), {})], records)
    assert f("3") == 3
    with pytest.raises(ValueError):
        f("x")


# --------------------------------------------------------------------------- judge
def _all_test_cells():
    for aid in course.assignments():
        for test in course.test_cells(course.read(course.source_path(aid))):
            yield pytest.param(test, id=f"{aid}:{test.grade_id}")


@pytest.mark.parametrize("test", list(_all_test_cells()))
def test_every_test_cell_is_one_the_judge_reads(test):
    calls = judge.parse_test_cell(test.source)
    assert calls and all(c.name.startswith("check_") for c in calls)
    for call in calls:
        assert callable(call.check())


@pytest.mark.parametrize(
    "source",
    [
        "check_x(f)",  # not imported
        "from grader.checks.ch01_devices import check_pick_device\ncheck_pick_device(f())",
        "from grader.checks.ch01_devices import check_pick_device\nimport os\ncheck_pick_device(f)",
        "from os import system\nsystem('true')",
        "from grader.checks.ch01_devices import reference\nreference('01_devices')",
        "from grader.checks.ch01_devices import check_pick_device\ncheck_pick_device(f, x=1)",
        "from grader.checks.ch01_devices import check_pick_device\nx = 1\ncheck_pick_device(f)",
        '"""only a docstring"""',
    ],
)
def test_anything_else_in_a_test_cell_is_refused(source):
    with pytest.raises(judge.UnsupportedTestCell):
        judge.parse_test_cell(source)


def test_judge_runs_checks_here_and_turns_failures_into_outputs():
    def pick_device(preferred=None):
        return torch.device(preferred or "cpu")

    source = '"""doc"""\nfrom grader.checks.ch01_devices import check_pick_device\ncheck_pick_device(pick)\n'

    class Here:
        def request(self, fn, target, args, kwargs):
            return remote.LOCAL.request(fn, remote.Handle("pick", pick_device), args, kwargs)

    verdict = judge.judge_cell(source, Here(), points=2)
    assert not verdict.passed and verdict.error == "CheckFailed"
    assert verdict.outputs[-1]["output_type"] == "error"
    assert "must raise ValueError" in verdict.outputs[-1]["evalue"]


def test_the_request_code_runs_in_a_fresh_kernel_namespace(capsys):
    """What the grading side sends to the kernel is code that a fresh namespace can run: it
    finds :func:`grader.runtime.remote.serve` from the top package by itself (a package moved
    under another folder once broke every probe under autograde, not the in-process tests)."""
    code, nonce = remote.request_code(remote.call, "answer", (3,), {})
    shown = []
    namespace = {"__builtins__": __builtins__}
    with (
        mock.patch.object(remote, "_user_namespace", return_value={"answer": lambda x: x + 1}),
        mock.patch.object(remote, "_display", lambda n, data: shown.append((n, data))),
    ):
        exec(code, namespace)  # noqa: S102 - the course's own request code
    assert [n for n, _ in shown] == [nonce]
    assert handover.loads(shown[0][1])["ok"]
