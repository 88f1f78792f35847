"""The grading side of a test cell: run its checks here, reach the student's code through a channel.

Under autograde a test cell is not run in the student's kernel. :class:`grader.grading.execute.CourseExecute`
hands its source (restored from the gradebook, so the course's own) to :func:`judge_cell`, which

1. reads it (:func:`parse_test_cell`): a docstring, ``from grader.<module> import check_...``
   lines and one-line calls ``check_x(name)`` or ``check_x("constant")``; anything else is a
   course error, caught by ``tests/test_release.py``;
2. runs each check *here*, in the grading process, with a :class:`grader.runtime.remote.Handle` for every
   name, bound to the channel that reaches the student's kernel;
3. turns the outcome into the cell's outputs: what the student's code printed during the
   checks (as ``stdout``), what the checks printed, and an ``error`` output when a check failed
   (or an ``execute_result`` with the points when a check gives partial credit).

nbgrader scores the cell from those outputs as usual (an error scores 0), so the verdict is
made where the student's code cannot reach: the reference solution, the expected values and the
comparisons all stay in this process, and only plain data comes back from the kernel
(:mod:`grader.runtime.handover`).

:func:`run_test_cells` judges the reference (or a sample) in this process, without nbgrader or
a kernel: the tests use it, and so does the class's compile-cache seed
(:func:`grader.grading.grading._seed_caches`).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import linecache
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbformat import NotebookNode

from grader.checks import common
from grader.checks.common import CUDA_SUFFIX, GRADING_ENV
from grader.runtime import course, handover, remote


class UnsupportedTestCell(ValueError):
    """A test cell that is not a docstring, imports of checks and one-line check calls."""


@dataclass(frozen=True)
class CheckCall:
    """One ``check_x(arg)`` line of a test cell.

    Attributes:
        module: Module of the check (``grader.checks.ch01_devices``).
        name: The check's name (``check_pick_device``).
        args: ``("name", "pick_device")`` for a name of the notebook, ``("value", x)`` for a
            constant.
    """

    module: str
    name: str
    args: tuple[tuple[str, Any], ...]

    def check(self):
        """The check function (imported here, in the grading process)."""
        return getattr(importlib.import_module(self.module), self.name)


def parse_test_cell(source: str) -> list[CheckCall]:
    """The check calls of a test cell, in order.

    Raises:
        UnsupportedTestCell: the cell holds anything but a docstring, ``from grader.X import
            check_...`` and calls of those checks with names or constants as arguments.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise UnsupportedTestCell(f"test cell does not parse: {exc}") from None
    imported: dict[str, tuple[str, str]] = {}
    calls: list[CheckCall] = []
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if not node.module.startswith("grader."):
                raise UnsupportedTestCell(f"test cell imports from {node.module}")
            for alias in node.names:
                if not alias.name.startswith("check_"):
                    raise UnsupportedTestCell(f"test cell imports {alias.name}, not a check")
                imported[alias.asname or alias.name] = (node.module, alias.name)
            continue
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id in imported
            and not node.value.keywords
        ):
            args = []
            for arg in node.value.args:
                if isinstance(arg, ast.Name):
                    args.append(("name", arg.id))
                elif isinstance(arg, ast.Constant):
                    args.append(("value", arg.value))
                else:
                    raise UnsupportedTestCell(
                        f"line {node.lineno}: check arguments must be names or constants"
                    )
            module, name = imported[node.value.func.id]
            calls.append(CheckCall(module, name, tuple(args)))
            continue
        raise UnsupportedTestCell(
            f"line {getattr(node, 'lineno', '?')}: a test cell holds only check imports and "
            "one-line check calls"
        )
    if not calls:
        raise UnsupportedTestCell("test cell calls no check")
    return calls


def judged_here(source: str) -> bool:
    """Whether a test cell is judged in the grading process: its checks' modules say so with
    ``JUDGED_IN_GRADER = True`` (each chapter's checks reach the student's code only through
    :mod:`grader.runtime.remote`); other test cells run in the kernel, as nbgrader runs them."""
    try:
        calls = parse_test_cell(source)
    except UnsupportedTestCell:
        return False
    return all(
        getattr(importlib.import_module(call.module), "JUDGED_IN_GRADER", False) for call in calls
    )


@dataclass
class Verdict:
    """What the judge decided for one test cell.

    Attributes:
        outputs: The cell's new outputs (nbformat output nodes).
        passed: Every check passed.
        fraction: The share of the points earned (1 when passed, 0 when a check failed,
            in between for partial credit).
        error: The failure's exception name (``CheckFailed``, ``NotCheckedWithoutCuda``, ...)
            or "".
    """

    outputs: list = field(default_factory=list)
    passed: bool = False
    fraction: float = 0.0
    error: str = ""


def _stream(text: str) -> NotebookNode:
    return NotebookNode(output_type="stream", name="stdout", text=text)


def error_output(exc: BaseException) -> NotebookNode:
    """An ``error`` output for a failed check, laid out as the notebook shows it."""
    name = handover.exception_name(exc)
    text = str(exc)
    render = getattr(exc, "_render_traceback_", None)
    if isinstance(exc, NotImplementedError) and not exc.args:
        text = "exercise not attempted yet"
        lines = [f"\x1b[0;31mNotImplementedError\x1b[0m: {text}"]
    elif callable(render):
        lines = list(render())
    else:
        lines = [*getattr(exc, "remote_traceback", []), f"\x1b[0;31m{name}\x1b[0m: {text}"]
    return NotebookNode(output_type="error", ename=name, evalue=text, traceback=lines)


@contextlib.contextmanager
def _grading_mode():
    saved = os.environ.get(common.GRADING_ENV)
    os.environ[common.GRADING_ENV] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(common.GRADING_ENV, None)
        else:
            os.environ[common.GRADING_ENV] = saved


def judge_cell(source: str, via: remote.Channel, points: float = 1.0) -> Verdict:
    """Run the checks of a test cell here, reaching the student's code through ``via``.

    Args:
        source: The test cell's source (the course's: restored from the gradebook).
        via: The channel to the student's kernel.
        points: The cell's points (for partial credit).

    Returns:
        The verdict, with the outputs the cell should show.

    Raises:
        UnsupportedTestCell: the source is not a test cell this judge can run.
        Anything the channel raises about the kernel itself (it died, it hung): the caller
        treats those as it treats a cell that killed its kernel.
    """
    calls = parse_test_cell(source)
    verdict = Verdict(passed=True, fraction=1.0)
    printed = io.StringIO()
    with _grading_mode(), remote.channel(via), contextlib.redirect_stdout(printed):
        for call in calls:
            args = [
                remote.Handle(value, via=via) if kind == "name" else value
                for kind, value in call.args
            ]
            try:
                result = call.check()(*args)
            except (KeyboardInterrupt, SystemExit):
                raise
            except remote.KernelLost:
                raise
            except remote.RequestTimedOut as exc:
                verdict.passed, verdict.fraction, verdict.error = False, 0.0, "CellTimeoutError"
                if printed.getvalue():
                    verdict.outputs.append(_stream(printed.getvalue()))
                verdict.outputs.append(
                    NotebookNode(
                        output_type="error",
                        ename="CellTimeoutError",
                        evalue=str(exc),
                        traceback=[f"\x1b[0;31mCellTimeoutError\x1b[0m: {exc}"],
                    )
                )
                return verdict
            except Exception as exc:  # noqa: BLE001 - any failure is the verdict  # noqa: BLE001 - any failure is the verdict
                verdict.passed, verdict.fraction = False, 0.0
                verdict.error = type(exc).__name__
                if printed.getvalue():
                    verdict.outputs.append(_stream(printed.getvalue()))
                verdict.outputs.append(error_output(exc))
                return verdict
            if isinstance(result, common.Partial):
                verdict.fraction = min(verdict.fraction, max(0.0, min(1.0, float(result))))
    if printed.getvalue():
        verdict.outputs.append(_stream(printed.getvalue()))
    if verdict.fraction < 1.0:
        verdict.passed = False
        earned = round(points * verdict.fraction, 4)
        verdict.outputs.append(
            NotebookNode(
                output_type="execute_result",
                execution_count=None,
                metadata={},
                data={"text/plain": f"{earned:g}"},
            )
        )
    return verdict


# --------------------------------------------------------------------------- in this process
class NamespaceChannel:
    """Reaches the student's objects in a namespace of this process, as the local channel does
    (copies of the arguments, results round-tripped as plain data)."""

    def __init__(self, namespace: dict) -> None:
        self.namespace = namespace

    def request(self, fn, target, args, kwargs):
        obj = self.namespace.get(target.__name__, remote._MISSING) if target else None
        local = remote.Handle(target.__name__, obj) if target is not None else None
        return remote.LOCAL.request(fn, local, args, kwargs)


def judge_here(source: str, namespace: dict) -> str:
    """Judge a test cell as autograde does (grader.grading.judge), against a namespace of this process:
    "" when every point is earned, else the failure's first line (or the partial credit)."""
    verdict = judge_cell(source, NamespaceChannel(namespace))
    if verdict.passed:
        return ""
    errors = [o for o in verdict.outputs if o.get("output_type") == "error"]
    if errors:
        text = str(errors[-1].get("evalue", ""))
        return f"{errors[-1].get('ename')}: {text.splitlines()[0] if text else ''}"
    return f"Partial: {verdict.fraction:.2f} of the points"


def run_test_cells(
    assignment: str, overrides: dict[str, str] | None, *, only_for: set[str] | None = None
) -> dict[str, str]:
    """Grade an answer in this process, without nbgrader: fast, for tests.

    Executes the reference solution cells (with ``overrides`` replacing some), then the
    source notebook's test cells, hidden parts included, in grading mode.

    Args:
        assignment: Assignment id.
        overrides: Solution grade id -> code.
        only_for: Run only the test cells of these solution grade ids
            (``test_<id>`` and ``test_<id>_cuda``).

    Returns:
        Test grade id -> "" when it passed, else the exception's first line.
    """
    nb = course.read(course.source_path(assignment))
    namespace: dict = {"__name__": "__main__"}
    saved = os.environ.get(GRADING_ENV)
    os.environ[GRADING_ENV] = "1"
    try:
        # In a scratch folder, as a notebook runs in its own: %%writefile cells land there.
        with (
            contextlib.redirect_stdout(io.StringIO()),
            tempfile.TemporaryDirectory(prefix="run-test-cells-") as scratch,
            contextlib.chdir(scratch),
        ):
            for cell in course.solution_cells(nb):
                grade_id = course.nbgrader_meta(cell)["grade_id"]
                code = (overrides or {}).get(grade_id) or course.strip_solution_markers(cell.source)
                path, _ = course.split_writefile(cell.source)
                if path:  # written, not executed, as IPython's %%writefile does
                    Path(path).write_text(course.split_writefile(code)[1])
                    continue
                filename = f"<solution {grade_id}>"
                # In the line cache, as IPython keeps a cell: ranks spawned on a machine with a
                # GPU rebuild the cell's functions and classes from their source.
                linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
                with contextlib.suppress(Exception):
                    exec(
                        compile(code, filename, "exec", dont_inherit=True),
                        namespace,
                    )  # noqa: S102
            results = {}
            for test in course.test_cells(nb):
                if only_for is not None and not any(
                    test.grade_id in (f"test_{s}", f"test_{s}{CUDA_SUFFIX}") for s in only_for
                ):
                    continue
                results[test.grade_id] = judge_here(test.source, namespace)
    finally:
        if saved is None:
            os.environ.pop(GRADING_ENV, None)
        else:
            os.environ[GRADING_ENV] = saved
    return results
