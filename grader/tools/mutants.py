"""``python -m grader mutants``: how strong is each exercise's grader? Mutation testing says.

A *mutant* is the reference solution with one small change in the code a student writes (only
between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` of the exercise's solution cell): ``<``
for ``<=``, ``+`` for ``-``, a number off by one, a keyword argument left out, ``[:, None]`` for
``[None, :]``... Each mutant is graded like a sample submission that replaces that one cell
(:mod:`grader.tools.samples`): the other solution cells are the reference, then the exercise's
CPU checks run in order, visible then hidden (the calls of its test cell ``test_<exercise>``,
judged as autograde judges them, :func:`grader.tools.samples._judge_here`); the ``_cuda`` cells
are left out (without a GPU they only say NOT CHECKED). The first failing check *kills* the
mutant; a mutant still running after the time limit is *killed by timeout* (a loop that never
ends); a mutant that passes every check *survives*. A survivor is either *equivalent* (it
behaves as the reference on every input the statement allows: explained, one line each, in
``grader/samples/<id>/mutants_equivalent.json``) or a *HOLE*: a wrong answer the grader gives
full marks.

How it runs: the mutation operators are Cosmic Ray's (``cosmic-ray``, applied programmatically
to Parso trees of the cell: comparison, arithmetic, unary and boolean operators, numbers off by
one, ``True``/``False``, ``and``/``or``, ``not`` added, ``for`` loops made empty,
``break``/``continue``), plus the operators Cosmic Ray lacks, written here on its
:class:`Operator` interface (an argument removed, a call statement removed, a call replaced by
its argument, ``in``/``not in``, a number replaced by 0, a slice bound dropped, subscript items
swapped). Each mutant runs in a process of its own, forked by Python's fork server after the
checks were imported, in its own session, killed with whatever it started when its time is up;
``--jobs`` at a time. Results are cached in ``grader/work/mutants/<id>/<exercise>.json`` keyed
by a hash of the mutant's source (and dropped when the checks, the test cells, the solutions or
the runtime change), so a rerun skips the mutants done. The report,
``grader/samples/<id>/MUTANTS.md``, is written from the cache after every run.

A mutant's *stable id* is ``<exercise>:L<line>:<operator>:<k>``: the cell line, the operator,
and the k-th place that operator applies on that line. It stays the same as long as the
solution cell does; ``mutants_equivalent.json`` also stores the line's text, so an entry whose
line changed is reported as stale instead of explaining another mutant. An entry may name a
whole line (``<exercise>:L<line>:*``) or one operator's mutants of it
(``<exercise>:L<line>:<operator>:*``), and say ``"kind"``: ``equivalent`` (the default),
``tolerated`` (off by less than the checks can measure by design, e.g. 0.1 % of a timing),
``cpu-same`` (the same on every CPU input, different only on a GPU: a tensor left on the CPU) or
``gpu-only`` (code only a GPU runs, such as 12's autotuning configs: honoured only for a line
the reference's run of the CPU checks never executed, which the command records). The last two
are what the ``_cuda`` checks are for; none of them counts as a HOLE.

May import: everything below the tools (:mod:`grader.runtime`, :mod:`grader.checks`,
:mod:`grader.grading`) and the other tools (:mod:`grader.tools.samples`); of third-party code,
``cosmic_ray`` (its operators and Parso trees; imported in functions, so that the course runs
without it: ``pip install cosmic-ray==8.7.0``), ``psutil`` and ``tqdm``.
"""

from __future__ import annotations

import contextlib
import datetime
import difflib
import hashlib
import json
import linecache
import multiprocessing
import multiprocessing.connection
import os
import platform
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader.checks.common import CUDA_SUFFIX, GRADING_ENV
from grader.runtime import course

#: The version the command was written and measured with (``requirements.txt`` pins it).
COSMIC_RAY = "cosmic-ray==8.7.0"
MUTANTS_WORK = course.WORK / "mutants"
EQUIVALENT_FILE = "mutants_equivalent.json"
REPORT_FILE = "MUTANTS.md"
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
#: Modules every mutant process needs, imported once by the fork server that forks them.
FORKSERVER_PRELOAD = ["grader.tools.mutants", "grader.tools.samples", "grader.grading.judge"]
#: Statuses of a mutant that ran: killed by a check, by the time limit, or survived.
KILLED, TIMEOUT, SURVIVED = "killed", "timeout", "survived"
#: Default time limit: this many times the reference's own run, and at least ``MIN_TIMEOUT_S``.
TIMEOUT_FACTOR, MIN_TIMEOUT_S = 6.0, 30.0


class MissingDependency(RuntimeError):
    """cosmic-ray is not installed: the message says how to install it."""


def _cosmic_ray():
    """Cosmic Ray's operator modules and its Parso helpers, or :class:`MissingDependency`."""
    try:
        from cosmic_ray import ast as cr_ast
        from cosmic_ray.operators import (
            binary_operator_replacement,
            boolean_replacer,
            break_continue,
            comparison_operator_replacement,
            number_replacer,
            operator,
            unary_operator_replacement,
            zero_iteration_for_loop,
        )
    except ImportError as exc:
        raise MissingDependency(
            f"`python -m grader mutants` needs Cosmic Ray's mutation operators ({exc}): "
            f"install them with `.venv/bin/pip install {COSMIC_RAY}` (requirements.txt pins it)"
        ) from None
    return {
        "ast": cr_ast,
        "binary": binary_operator_replacement,
        "boolean": boolean_replacer,
        "break": break_continue,
        "comparison": comparison_operator_replacement,
        "number": number_replacer,
        "operator": operator,
        "unary": unary_operator_replacement,
        "loop": zero_iteration_for_loop,
    }


# --------------------------------------------------------------------------- operators
#: Cosmic Ray's operator classes used, by name. Its binary and comparison families hold every
#: pair (132 and 56 classes); these are the usual replacements (PIT's and mutmut's): one
#: arithmetic operator for its inverse, a boundary moved (< for <=), a condition negated.
COSMIC_RAY_OPERATORS = (
    *(
        f"ReplaceBinaryOperator_{a}_{b}"
        for a, b in (
            ("Add", "Sub"), ("Sub", "Add"), ("Mul", "Div"), ("Div", "Mul"),
            ("FloorDiv", "Div"), ("Div", "FloorDiv"), ("Mod", "Div"), ("Pow", "Mul"),
            ("LShift", "RShift"), ("RShift", "LShift"), ("BitAnd", "BitOr"),
            ("BitOr", "BitAnd"), ("BitXor", "BitAnd"),
        )
    ),
    *(
        f"ReplaceComparisonOperator_{a}_{b}"
        for a, b in (
            ("Lt", "LtE"), ("LtE", "Lt"), ("Gt", "GtE"), ("GtE", "Gt"),
            ("Lt", "GtE"), ("GtE", "Lt"), ("Gt", "LtE"), ("LtE", "Gt"),
            ("Eq", "NotEq"), ("NotEq", "Eq"), ("Is", "IsNot"), ("IsNot", "Is"),
        )
    ),
    "ReplaceUnaryOperator_Delete_USub",
    "ReplaceUnaryOperator_Delete_Not",
    "ReplaceUnaryOperator_Delete_Invert",
    "ReplaceUnaryOperator_UAdd_USub",
    "ReplaceTrueWithFalse",
    "ReplaceFalseWithTrue",
    "ReplaceAndWithOr",
    "ReplaceOrWithAnd",
    "AddNot",
    "ZeroIterationForLoop",
    "ReplaceBreakWithContinue",
    "ReplaceContinueWithBreak",
)  # fmt: skip


def _first_leaf_prefix(node) -> str:
    return node.get_first_leaf().prefix


def _set_first_leaf_prefix(node, prefix: str) -> None:
    node.get_first_leaf().prefix = prefix


def _call_arguments(trailer) -> list:
    """The argument nodes of a call trailer ``( ... )`` (empty for ``()``)."""
    if len(trailer.children) != 3:
        return []
    inner = trailer.children[1]
    if inner.type == "arglist":
        return [c for c in inner.children if c.type != "operator" or c.value != ","]
    return [inner]


def _is_call(trailer) -> bool:
    return (
        trailer.type == "trailer"
        and trailer.children[0].type == "operator"
        and (trailer.children[0].value == "(")
    )


def _course_operators(cr) -> dict:
    """The operators Cosmic Ray lacks, on its :class:`Operator` interface (Parso nodes)."""
    import parso.python.tree as tree

    base = cr["operator"].Operator
    Example = cr["operator"].Example

    class RemoveArgument(base):
        """A call's argument left out, positional or keyword: ``f(a, mask=m)`` -> ``f(a)``."""

        @classmethod
        def examples(cls):
            return (Example("f(a, mask=m)", "f(a)", occurrence=1), Example("f(a, b)", "f(b)"))

        def mutation_positions(self, node):
            if _is_call(node) and node.parent is not None and node.parent.type == "atom_expr":
                for arg in _call_arguments(node):
                    yield (arg.start_pos, arg.end_pos)

        def mutate(self, node, index):
            inner = node.children[1]
            if inner.type != "arglist":
                node.children = [node.children[0], node.children[2]]
                return node
            kids = inner.children
            items = [i for i, c in enumerate(kids) if c.type != "operator" or c.value != ","]
            at = items[index]
            prefix = _first_leaf_prefix(kids[at])
            if at + 1 < len(kids):  # the argument and the comma after it
                del kids[at : at + 2]
                if at < len(kids) and index == 0:
                    _set_first_leaf_prefix(kids[at], prefix)
            else:  # the last one: the comma before it
                del kids[at - 1 : at + 1]
            return node

    class RemoveCallStatement(base):
        """A statement that is only a call, removed: ``random.seed(seed)`` -> ``None``."""

        @classmethod
        def examples(cls):
            return (Example("x = 1\nrandom.seed(x)\n", "x = 1\nNone\n"),)

        def mutation_positions(self, node):
            if node.type == "simple_stmt":
                for child in node.children:
                    if child.type == "atom_expr" and _is_call(child.children[-1]):
                        yield (child.start_pos, child.end_pos)

        def mutate(self, node, index):
            calls = [
                i
                for i, c in enumerate(node.children)
                if c.type == "atom_expr" and _is_call(c.children[-1])
            ]
            old = node.children[calls[index]]
            new = tree.Keyword("None", old.start_pos, prefix=_first_leaf_prefix(old))
            new.parent = node
            node.children[calls[index]] = new
            return node

    class ReplaceCallWithArgument(base):
        """A call of one positional argument replaced by it: ``float(x)`` -> ``x``."""

        @classmethod
        def examples(cls):
            return (Example("y = float(x)", "y = x"),)

        def mutation_positions(self, node):
            if node.type == "atom_expr" and _is_call(node.children[-1]):
                args = _call_arguments(node.children[-1])
                if len(args) == 1 and args[0].type not in ("argument", "star_expr"):
                    yield (node.start_pos, node.end_pos)

        def mutate(self, node, index):
            arg = _call_arguments(node.children[-1])[0]
            _set_first_leaf_prefix(arg, _first_leaf_prefix(node))
            return arg

    class _ReplaceMembership(base):
        """``in`` <-> ``not in`` (Cosmic Ray's comparison family has neither)."""

        from_op = to_op = ""

        def _points(self, node):
            if node.type == "comparison":
                for i, op in enumerate(node.children[1::2]):
                    if " ".join(op.get_code().split()) == self.from_op:
                        yield 2 * i + 1, op

        def mutation_positions(self, node):
            for _, op in self._points(node):
                yield (op.start_pos, op.end_pos)

        def mutate(self, node, index):
            at, old = list(self._points(node))[index]
            new = tree.Keyword(self.to_op, old.start_pos, prefix=_first_leaf_prefix(old))
            new.parent = node
            node.children[at] = new
            return node

    class ReplaceInWithNotIn(_ReplaceMembership):
        """``x in y`` -> ``x not in y``."""

        @classmethod
        def examples(cls):
            return (Example("a in b", "a not in b"),)

        from_op, to_op = "in", "not in"

    class ReplaceNotInWithIn(_ReplaceMembership):
        """``x not in y`` -> ``x in y``."""

        @classmethod
        def examples(cls):
            return (Example("a not in b", "a in b"),)

        from_op, to_op = "not in", "in"

    class ReplaceNumberWithZero(base):
        """A number other than 0 and 1 replaced by 0 (NumberReplacer's +-1 covers 0 and 1)."""

        @classmethod
        def examples(cls):
            return (Example("x = 2.5", "x = 0.0"), Example("x = 16", "x = 0"))

        def mutation_positions(self, node):
            if node.type == "number":
                try:
                    value = complex(eval(node.value))  # noqa: S307 - a literal of the cell
                except Exception:  # noqa: BLE001
                    return
                if value not in (0, 1):
                    yield (node.start_pos, node.end_pos)

        def mutate(self, node, index):
            is_float = any(c in node.value.lower() for c in ".e") and "x" not in node.value
            node.value = "0.0" if is_float else "0"
            return node

    class DropSliceBound(base):
        """A slice's start, stop or step left out: ``x[1:n]`` -> ``x[:n]``."""

        @classmethod
        def examples(cls):
            return (Example("x[1:n]", "x[:n]"), Example("x[1:n]", "x[1:]", occurrence=1))

        @staticmethod
        def _bounds(node):
            return [i for i, c in enumerate(node.children) if c.type != "operator"]

        def mutation_positions(self, node):
            if node.type == "subscript":
                for i in self._bounds(node):
                    child = node.children[i]
                    yield (child.start_pos, child.end_pos)

        def mutate(self, node, index):
            del node.children[self._bounds(node)[index]]
            return node

    class SwapSubscripts(base):
        """Two neighbouring items of a subscript swapped: ``x[:, None]`` -> ``x[None, :]``."""

        @classmethod
        def examples(cls):
            return (Example("x[:, None]", "x[None, :]"),)

        @staticmethod
        def _pairs(node):
            items = node.children[0::2]
            return [
                (2 * i, 2 * i + 2)
                for i in range(len(items) - 1)
                if items[i].get_code().strip() != items[i + 1].get_code().strip()
            ]

        def mutation_positions(self, node):
            if node.type == "subscriptlist":
                for a, b in self._pairs(node):
                    yield (node.children[a].start_pos, node.children[b].end_pos)

        def mutate(self, node, index):
            a, b = self._pairs(node)[index]
            kids = node.children
            pa, pb = _first_leaf_prefix(kids[a]), _first_leaf_prefix(kids[b])
            kids[a], kids[b] = kids[b], kids[a]
            _set_first_leaf_prefix(kids[a], pa)
            _set_first_leaf_prefix(kids[b], pb)
            return node

    class NumberReplacer(cr["number"].NumberReplacer):
        """Cosmic Ray's NumberReplacer (a number plus or minus 1), keeping the number's prefix
        (its own puts a space inside the new number's text and drops the prefix)."""

        def mutate(self, node, index):
            prefix = node.prefix
            new = super().mutate(node, index)
            new.value, new.prefix = new.value.strip(), prefix
            return new

    ours = (
        NumberReplacer,
        RemoveArgument,
        RemoveCallStatement,
        ReplaceCallWithArgument,
        ReplaceInWithNotIn,
        ReplaceNotInWithIn,
        ReplaceNumberWithZero,
        DropSliceBound,
        SwapSubscripts,
    )
    return {cls.__name__: cls for cls in ours}


def operators() -> dict:
    """Operator name -> operator instance, in the order mutants are listed."""
    cr = _cosmic_ray()
    found = {}
    for module in ("binary", "comparison", "unary"):
        for cls in cr[module].operators():
            found[cls.__name__] = cls
    for module, names in (
        ("boolean", ("ReplaceTrueWithFalse", "ReplaceFalseWithTrue", "ReplaceAndWithOr",
                     "ReplaceOrWithAnd", "AddNot")),
        ("loop", ("ZeroIterationForLoop",)),
        ("break", ("ReplaceBreakWithContinue", "ReplaceContinueWithBreak")),
    ):  # fmt: skip
        for name in names:
            found[name] = getattr(cr[module], name)
    chosen = {name: found[name]() for name in COSMIC_RAY_OPERATORS}
    chosen.update({name: cls() for name, cls in _course_operators(cr).items()})
    return chosen


# --------------------------------------------------------------------------- mutants
@dataclass(frozen=True)
class Mutant:
    """One mutant of a solution cell.

    Attributes:
        exercise: The solution cell's grade id.
        line: Cell line (1-based) where the mutation starts.
        operator: The operator's name.
        occurrence: Which place on that line the operator changed (0 for the first).
        source: The whole mutated cell, solution markers and ``%%writefile`` line kept.
        before: The changed lines of the reference, stripped, joined by `` / ``.
        after: The same lines in the mutant.
    """

    exercise: str
    line: int
    operator: str
    occurrence: int
    source: str
    before: str
    after: str

    @property
    def id(self) -> str:
        """The stable id: exercise, line, operator and occurrence."""
        return f"{self.exercise}:L{self.line}:{self.operator}:{self.occurrence}"

    @property
    def key(self) -> str:
        """The cache key: a hash of the mutant's source."""
        return source_hash(self.source)

    @property
    def diff(self) -> str:
        """The change on one line: ``before → after``."""
        return f"{self.before} → {self.after or '(removed)'}"


def source_hash(source: str) -> str:
    """sha256 of a cell's source, the first 16 hex digits."""
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def solution_lines(source: str) -> set[int]:
    """The cell lines (1-based) strictly between ``### BEGIN SOLUTION`` and
    ``### END SOLUTION`` markers: what the student writes."""
    inside, lines = False, set()
    for number, text in enumerate(source.splitlines(), start=1):
        if text.strip() == BEGIN:
            inside = True
        elif text.strip() == END:
            inside = False
        elif inside:
            lines.add(number)
    return lines


def _one_line_change(original: str, mutated: str) -> tuple[str, str]:
    old, new = original.splitlines(), mutated.splitlines()
    before, after = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new).get_opcodes():
        if tag != "equal":
            before += [s.strip() for s in old[i1:i2]]
            after += [s.strip() for s in new[j1:j2]]
    return " / ".join(before), " / ".join(after)


class _Applier:
    """Applies the ``occurrence``-th mutation of an operator in a walk of a Parso tree (the walk
    Cosmic Ray's ``MutationVisitor`` makes, without its plugin machinery)."""

    def __init__(self, operator, occurrence: int) -> None:
        self.operator, self.occurrence, self.count, self.applied = operator, occurrence, 0, False

    def walk(self, node):
        import parso.tree

        for index, _ in enumerate(list(self.operator.mutation_positions(node))):
            if self.count == self.occurrence:
                node = self.operator.mutate(node, index)
                self.applied = True
            self.count += 1
        if node is not None and isinstance(node, parso.tree.BaseNode):
            node.children = [c for c in map(self.walk, node.children) if c is not None]
        return node


def mutate_code(code: str, operator: str, occurrence: int = 0) -> str | None:
    """``code`` with the ``occurrence``-th mutation of the operator named ``operator`` applied
    (counting over the whole code), or None when the operator applies fewer times."""
    applier = _Applier(operators()[operator], occurrence)
    mutated = applier.walk(_cosmic_ray()["ast"].get_ast(code)).get_code()
    return mutated if applier.applied else None


def generate_mutants(exercise: str, source: str) -> tuple[list[Mutant], int]:
    """Every mutant of a solution cell, mutating only its solution lines.

    Args:
        exercise: The cell's grade id.
        source: The cell as in ``solutions/`` (with its markers; a ``%%writefile`` line first
            is kept and the script below it mutated).

    Returns:
        (mutants sorted by line, operator and occurrence, with duplicates of the same source
        dropped; the number of mutants left out because they are not valid Python).
    """
    cr = _cosmic_ray()
    magic = course.writefile_line(source)
    body = source
    if magic:  # parsed as an empty first line, so that line numbers stay the cell's
        body = source.partition("\n")[2]
        body = "\n" + body
    allowed = solution_lines(source)
    ops = operators()
    found: list[Mutant] = []
    seen = {source}
    invalid = 0
    for name, op in ops.items():
        per_line: Counter = Counter()
        count = 0
        for node in cr["ast"].ast_nodes(cr["ast"].get_ast(body)):
            for start, end in op.mutation_positions(node):
                occurrence, count = count, count + 1
                if start[0] not in allowed or end[0] not in allowed:
                    continue
                k = per_line[start[0]]
                per_line[start[0]] += 1
                applier = _Applier(op, occurrence)
                mutated_body = applier.walk(cr["ast"].get_ast(body)).get_code()
                mutated = f"{magic}{mutated_body}" if magic else mutated_body
                if not applier.applied or mutated in seen:
                    continue
                seen.add(mutated)
                try:
                    compile(mutated_body, "<mutant>", "exec", dont_inherit=True)
                except SyntaxError:
                    invalid += 1
                    continue
                before, after = _one_line_change(source, mutated)
                found.append(Mutant(exercise, start[0], name, k, mutated, before, after))
    order = {name: i for i, name in enumerate(ops)}
    found.sort(key=lambda m: (m.line, order[m.operator], m.occurrence))
    return found, invalid


# --------------------------------------------------------------------------- the checks
@dataclass(frozen=True)
class Check:
    """One check call of an exercise's test cell (``check_x(name)``), run as autograde runs it."""

    cell: str
    module: str
    name: str
    args: tuple

    @property
    def label(self) -> str:
        return self.name

    def source(self) -> str:
        """A one-call test cell for the judge (:func:`grader.grading.judge.judge_cell`)."""
        args = ", ".join(value if kind == "name" else repr(value) for kind, value in self.args)
        return f"from {self.module} import {self.name}\n{self.name}({args})\n"


def exercise_checks(nb, exercise: str) -> list[Check]:
    """The CPU checks of an exercise: the check calls of its test cell ``test_<exercise>``
    (visible, then hidden), in order; the ``_cuda`` cells are left out."""
    from grader.grading import judge

    out = []
    for test in course.test_cells(nb):
        if test.grade_id != f"test_{exercise}" or test.grade_id.endswith(CUDA_SUFFIX):
            continue
        for call in judge.parse_test_cell(test.source):
            out.append(Check(test.grade_id, call.module, call.name, call.args))
    return out


# --------------------------------------------------------------------------- one mutant's process
@dataclass
class Job:
    """What a mutant's process runs: every solution cell, then the checks.

    Attributes:
        cells: (grade id, source) of every solution cell, the mutated one among them.
        checks: The exercise's checks, in order.
        trace: Record which lines of ``trace`` (a cell's grade id) run (the reference's run).
        parent: The command's pid: the process ends when that one is gone.
        alarm_s: The process ends itself after this many seconds (a backstop for the
            command's own time limit).
    """

    cells: list[tuple[str, str]]
    checks: list[Check]
    trace: str | None = None
    parent: int = 0
    alarm_s: int = 0


def _watch_parent(pid: int) -> None:
    import psutil

    try:
        parent = psutil.Process(pid)
    except psutil.Error:
        os._exit(3)
    while True:
        time.sleep(1.0)
        if not parent.is_running():
            os._exit(3)


def _tracer(filename: str, lines: set[int]):
    def local(frame, event, arg):
        if event == "line":
            lines.add(frame.f_lineno)
        return local

    def tracer(frame, event, arg):
        if frame.f_code.co_filename == filename:
            return local
        return None

    return tracer


def run_job(job: Job, conn) -> None:
    """The body of a mutant's process: run the cells, then each check until one fails.

    Sends ``("check", name)`` before each check, then ``("done", result)``: ``result`` has
    ``status`` (killed or survived), ``check``, ``message`` and ``seconds`` (and ``lines``, the
    traced cell lines run, when asked).
    """
    os.setsid()  # its own session: killed with everything it starts
    if job.alarm_s:
        signal.alarm(job.alarm_s)  # default action: the process ends, whatever it is doing
    if job.parent:
        threading.Thread(target=_watch_parent, args=(job.parent,), daemon=True).start()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.environ[GRADING_ENV] = "1"
    from grader.tools import samples

    started = time.monotonic()
    lines: set[int] = set()
    if job.trace:
        tracer = _tracer(f"<solution {job.trace}>", lines)
        sys.settrace(tracer)
        threading.settrace(tracer)
    namespace: dict = {"__name__": "__main__"}
    result = {"status": SURVIVED, "check": "", "message": ""}
    with (
        tempfile.TemporaryDirectory(prefix="mutant-") as scratch,
        contextlib.chdir(scratch),
    ):
        # the cells as samples.run_test_cells runs them: %%writefile cells written, the others
        # executed in one namespace, each in the line cache as IPython keeps a cell
        for grade_id, code in job.cells:
            path, body = course.split_writefile(code)
            if path:
                Path(path).write_text(body)
                continue
            filename = f"<solution {grade_id}>"
            linecache.cache[filename] = (len(body), None, body.splitlines(True), filename)
            with contextlib.suppress(Exception):
                exec(compile(body, filename, "exec", dont_inherit=True), namespace)  # noqa: S102
        for check in job.checks:
            conn.send(("check", check.name))
            try:
                failure = samples._judge_here(check.source(), namespace)
            except Exception as exc:  # noqa: BLE001 - the channel itself failed: a verdict too
                failure = f"{type(exc).__name__}: {exc}"
            if failure:
                result = {"status": KILLED, "check": check.name, "message": failure[:500]}
                break
    sys.settrace(None)
    result["seconds"] = round(time.monotonic() - started, 3)
    if job.trace:
        result["lines"] = sorted(lines)
    conn.send(("done", result))
    conn.close()


# --------------------------------------------------------------------------- running many
def _context(check_modules: list[str]):
    """Python's fork server, preloaded with what a mutant imports. A process has one fork
    server, shared with the grading engine's (:mod:`grader.grading.grading`): whichever starts
    it names its imports, so this list holds the engine's too (nbgrader, about 5 s once), and a
    class graded later in the same process (a test run) still forks from a loaded server."""
    from grader.grading import grading

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(
        [*FORKSERVER_PRELOAD, *grading.FORKSERVER_PRELOAD, *sorted(set(check_modules))]
    )
    return context


@dataclass
class _Running:
    key: str
    proc: multiprocessing.Process
    conn: multiprocessing.connection.Connection
    deadline: float
    started: float
    check: str = ""
    result: dict | None = None


def run_jobs(
    jobs: dict[str, Job],
    *,
    parallel: int = 1,
    timeout_s: float = 60.0,
    on_result=None,
    check_modules: list[str] = (),
) -> dict[str, dict]:
    """Run jobs, each in a process of its own from the fork server, ``parallel`` at a time.

    Args:
        jobs: key -> job.
        parallel: Processes at a time.
        timeout_s: A process still running after this many seconds is killed with every
            process it started: status ``timeout``, with the check it was running.
        on_result: Called with (key, result) as each job ends (to save progress).
        check_modules: Modules the fork server imports first (the checks).

    Returns:
        key -> result (``status``: killed, timeout or survived; ``check``, ``message``,
        ``seconds``; a process that ended without a verdict is *killed*, by the check it was
        running, with its exit status).
    """
    from grader.grading.job import kill_tree

    context = _context(list(check_modules))
    pending = list(jobs.items())
    running: list[_Running] = []
    results: dict[str, dict] = {}

    def finish(run: _Running, result: dict) -> None:
        results[run.key] = result
        if on_result is not None:
            on_result(run.key, result)

    try:
        while pending or running:
            while pending and len(running) < max(1, parallel):
                key, job = pending.pop(0)
                job.parent = os.getpid()
                job.alarm_s = int(timeout_s) + 30
                receive, send = context.Pipe(duplex=False)
                proc = context.Process(target=run_job, args=(job, send), name=f"mutant {key}")
                proc.start()
                send.close()
                now = time.monotonic()
                running.append(_Running(key, proc, receive, now + timeout_s, now))
            waitables = [r.conn for r in running] + [r.proc.sentinel for r in running]
            multiprocessing.connection.wait(waitables, timeout=0.5)
            now = time.monotonic()
            for run in list(running):
                with contextlib.suppress(EOFError, OSError):
                    while run.conn.poll():
                        kind, value = run.conn.recv()
                        if kind == "check":
                            run.check = value
                        else:
                            run.result = value
                if run.result is not None or not run.proc.is_alive():
                    run.proc.join(5)
                    if run.proc.is_alive():
                        kill_tree(run.proc.pid)
                    result = run.result or {
                        "status": KILLED,
                        "check": run.check,
                        "message": f"the process ended without a verdict (exit status "
                        f"{run.proc.exitcode}) during {run.check or 'the cells'}",
                        "seconds": round(now - run.started, 3),
                    }
                elif now > run.deadline:
                    kill_tree(run.proc.pid)
                    run.proc.join(5)
                    result = {
                        "status": TIMEOUT,
                        "check": run.check,
                        "message": f"still running after {timeout_s:.0f} s "
                        f"(in {run.check or 'the cells'})",
                        "seconds": round(now - run.started, 3),
                    }
                else:
                    continue
                running.remove(run)
                run.conn.close()
                finish(run, result)
    finally:
        for run in running:
            kill_tree(run.proc.pid)
    return results


# --------------------------------------------------------------------------- the cache
def checks_fingerprint(assignment: str, exercise: str, checks: list[Check]) -> str:
    """A hash of what a mutant's verdict depends on besides its own source: every solution cell
    (the reference the hidden checks compare with), the exercise's test cell, the checks'
    modules (a package: all its files), the checks' common module, the runtime, and torch's
    version."""
    import importlib

    import torch

    digest = hashlib.sha256(torch.__version__.encode())
    nb = course.read(course.source_path(assignment))
    for cell in course.solution_cells(nb):
        digest.update(cell.source.encode())
    for test in course.test_cells(nb):
        if test.grade_id == f"test_{exercise}":
            digest.update(test.source.encode())
    files: set[Path] = set()
    for module_name in {c.module for c in checks} | {"grader.checks.common"}:
        module = importlib.import_module(module_name)
        path = Path(module.__file__)
        files |= set(path.parent.rglob("*.py")) if path.name == "__init__.py" else {path}
    files |= set((course.PACKAGE / "runtime").rglob("*.py"))
    for path in sorted(files):
        digest.update(str(path.relative_to(course.PACKAGE)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


class Cache:
    """One exercise's results: ``<work>/<exercise>.json``, written after each mutant."""

    def __init__(self, path: Path, fingerprint: str) -> None:
        self.path = Path(path)
        self.fingerprint = fingerprint
        data = {}
        if self.path.is_file():
            with contextlib.suppress(ValueError):
                data = json.loads(self.path.read_text())
        if data.get("fingerprint") != fingerprint:
            data = {}
        self.results: dict[str, dict] = data.get("results", {})
        self.baseline: dict = data.get("baseline", {})
        self.wall_s: float = data.get("wall_s", 0.0)
        self.runs: list[dict] = data.get("runs", [])

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "fingerprint": self.fingerprint,
            "baseline": self.baseline,
            "wall_s": round(self.wall_s, 1),
            "runs": self.runs,
            "results": self.results,
        }
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(self.path)


# --------------------------------------------------------------------------- equivalents
def load_equivalents(path: Path) -> dict[str, dict]:
    """``mutants_equivalent.json``: stable id (or ``<exercise>:L<n>:<operator>:*`` for one
    operator's mutants of a line, ``<exercise>:L<n>:*`` for all of them) -> ``{"line": ...,
    "why": ..., "kind": "equivalent" | "gpu-only"}``; empty when there is no file."""
    path = Path(path)
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


#: What an entry of ``mutants_equivalent.json`` may say a survivor is (``kind``; default
#: ``equivalent``), and how the report names it. None of them is a HOLE.
KINDS = {
    "equivalent": "equivalent",  # same behaviour on every input the statement allows
    "tolerated": "tolerated",  # differs by less than what the checks can measure, by design
    "cpu-same": "same on CPU",  # same on every CPU input; differs only on a GPU (a device)
    "gpu-only": "GPU only",  # code only a GPU runs: the line never ran in the CPU checks
}


def explain(
    mutant: Mutant, line_text: str, equivalents: dict[str, dict], ran: set[int] | None = None
) -> tuple[str, str]:
    """(kind, why) for a survivor.

    Args:
        mutant: The survivor.
        line_text: Its line in the reference (to tell a stale entry).
        equivalents: ``mutants_equivalent.json``.
        ran: The cell lines the reference's run of the checks executed (an entry ``gpu-only``
            for a line in it is refused: the CPU checks did run that code).

    Returns:
        A kind of :data:`KINDS` and the entry's explanation; ``("stale", ...)`` when the entry
        names another text for the line; ``("HOLE", "")`` when no entry explains it (or
        ``("HOLE", why)`` when its entry is refused).
    """
    operator = mutant.id.split(":")[2] if mutant.id.count(":") >= 3 else ""
    keys = (mutant.id, f"{mutant.exercise}:L{mutant.line}:{operator}:*")
    for key in (*keys, f"{mutant.exercise}:L{mutant.line}:*"):
        entry = equivalents.get(key)
        if entry is None:
            continue
        if " ".join(entry.get("line", "").split()) != " ".join(line_text.split()):
            return "stale", (
                f"entry {key} is for `{entry.get('line', '')}`; the line is now "
                f"`{line_text.strip()}`"
            )
        kind = entry.get("kind", "equivalent")
        if kind not in KINDS:
            return "HOLE", f"entry {key}: unknown kind {kind!r} (one of {', '.join(KINDS)})"
        if kind == "gpu-only" and ran is not None and mutant.line in ran:
            return "HOLE", f"entry {key} says GPU only, but the CPU checks ran this line"
        return kind, entry.get("why", "")
    return "HOLE", ""


# --------------------------------------------------------------------------- the command
@dataclass
class ExerciseResult:
    """What the report says about one exercise."""

    exercise: str
    mutants: list[Mutant] = field(default_factory=list)
    invalid: int = 0
    results: dict[str, dict] = field(default_factory=dict)
    baseline: dict = field(default_factory=dict)
    wall_s: float = 0.0
    runs: list[dict] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    error: str = ""
    lines: list[str] = field(default_factory=list)

    def status(self, m: Mutant) -> str | None:
        r = self.results.get(m.key)
        return r["status"] if r else None

    def count(self, status: str) -> int:
        return sum(1 for m in self.mutants if self.status(m) == status)


def _cell_sources(assignment: str) -> list[tuple[str, str]]:
    nb = course.read(course.source_path(assignment))
    return [(course.nbgrader_meta(c)["grade_id"], c.source) for c in course.solution_cells(nb)]


def run(
    assignment: str,
    exercises: list[str] | None = None,
    *,
    jobs: int = 1,
    limit: int | None = None,
    timeout_s: float | None = None,
    fresh: bool = False,
    work: Path | None = None,
    progress: bool = True,
) -> list[ExerciseResult]:
    """Generate, run (or read from the cache) the mutants of an assignment's exercises.

    Args:
        assignment: Assignment id.
        exercises: Solution grade ids (default: every one with a CPU test cell).
        jobs: Mutants run at the same time.
        limit: Run at most this many (not yet cached) mutants of each exercise, in order.
        timeout_s: Per-mutant time limit (default: ``TIMEOUT_FACTOR`` times the reference's
            run, at least ``MIN_TIMEOUT_S``).
        fresh: Ignore the cache (and overwrite it).
        work: Cache folder (default ``grader/work/mutants/<assignment>``).
        progress: Show a tqdm progress bar.

    Returns:
        One result per exercise of the assignment, in notebook order (an exercise not asked
        for this time carries what its cache holds).

    Raises:
        ValueError: unknown assignment or exercise.
        MissingDependency: cosmic-ray is missing.
    """
    from tqdm.auto import tqdm

    course.check_assignment(assignment)
    _cosmic_ray()
    work = Path(work) if work else MUTANTS_WORK / assignment
    nb = course.read(course.source_path(assignment))
    cells = _cell_sources(assignment)
    known = [g for g, _ in cells]
    for name in exercises or []:
        if name not in known:
            raise ValueError(f"{assignment} has no exercise {name!r}; it has: {', '.join(known)}")
    out = []
    for grade_id, source in cells:
        res = ExerciseResult(grade_id, lines=source.splitlines())
        checks = exercise_checks(nb, grade_id)
        res.checks = [c.name for c in checks]
        out.append(res)
        if not checks:
            res.error = "no CPU test cell (only _cuda checks, or none)"
            continue
        res.mutants, res.invalid = generate_mutants(grade_id, source)
        cache = Cache(work / f"{grade_id}.json", checks_fingerprint(assignment, grade_id, checks))
        if fresh:
            cache.results, cache.baseline, cache.wall_s, cache.runs = {}, {}, 0.0, []
        wanted = exercises is None or grade_id in exercises
        if wanted:
            _run_exercise(
                assignment, grade_id, cells, checks, res, cache, jobs, limit, timeout_s,
                progress and tqdm,
            )  # fmt: skip
        res.results = {m.key: cache.results[m.key] for m in res.mutants if m.key in cache.results}
        res.baseline, res.wall_s, res.runs = cache.baseline, cache.wall_s, cache.runs
        if cache.baseline.get("status") == KILLED:
            res.error = (
                f"the reference fails its own checks ({cache.baseline.get('check')}: "
                f"{cache.baseline.get('message', '')[:200]}): no mutant was run"
            )
    return out


def _run_exercise(assignment, grade_id, cells, checks, res, cache, jobs, limit, timeout_s, bar):
    modules = [c.module for c in checks]

    def job_for(source: str, trace: bool = False) -> Job:
        return Job(
            [(g, source if g == grade_id else s) for g, s in cells],
            checks,
            trace=grade_id if trace else None,
        )

    started = time.monotonic()
    original = dict(cells)[grade_id]
    if not cache.baseline:
        (cache.baseline,) = run_jobs(
            {"reference": job_for(original, trace=True)},
            timeout_s=timeout_s or 1800,
            check_modules=modules,
        ).values()
        cache.save()
    if cache.baseline.get("status") != SURVIVED:
        return
    limit_s = timeout_s or max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * cache.baseline["seconds"])
    todo = [m for m in res.mutants if m.key not in cache.results]
    if limit is not None:
        todo = todo[:limit]
    by_key = {m.key: m for m in todo}
    progress = (
        bar(total=len(todo), desc=f"{assignment} {grade_id}", unit="mutant")
        if bar and todo
        else None
    )

    def saved(key: str, result: dict) -> None:
        result["id"] = by_key[key].id
        cache.results[key] = result
        cache.wall_s += time.monotonic() - saved.last
        saved.last = time.monotonic()
        cache.save()
        tally[result["status"]] += 1
        if progress is not None:
            progress.update()
            progress.set_postfix(tally, refresh=False)

    saved.last = started
    tally = {KILLED: 0, TIMEOUT: 0, SURVIVED: 0}
    try:
        run_jobs(
            {m.key: job_for(m.source) for m in todo},
            parallel=jobs,
            timeout_s=limit_s,
            on_result=saved,
            check_modules=modules,
        )
    finally:
        if progress is not None:
            progress.close()
        cache.baseline["timeout_s"] = limit_s
        ran = sum(1 for m in todo if m.key in cache.results)
        if ran:
            cache.runs.append(
                {
                    "date": datetime.date.today().isoformat(),
                    "jobs": jobs,
                    "mutants": ran,
                    "wall_s": round(time.monotonic() - started, 1),
                }
            )
        cache.save()


# --------------------------------------------------------------------------- the report
def _md(text: str, width: int | None = None) -> str:
    text = " ".join(str(text).split())
    if width and len(text) > width:
        text = text[: width - 1] + "…"
    return text.replace("|", "\\|").replace("`", "'")


def _jobs_note(res: ExerciseResult) -> str:
    jobs = sorted({run["jobs"] for run in res.runs})
    return f" ({'/'.join(map(str, jobs))} job{'s' if jobs != [1] else ''})" if jobs else ""


def _code(text: str) -> str:
    return f"`{_md(text)}`" if text else "(removed)"


def machine_line() -> str:
    """The machine, Python, torch and triton versions, for the report."""
    import torch

    try:
        import triton

        triton_version = f", triton {triton.__version__}"
    except ImportError:
        triton_version = ""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, {gpu}; "
        f"Python {platform.python_version()}, torch {torch.__version__}{triton_version}"
    )


def format_report(
    assignment: str,
    results: list[ExerciseResult],
    equivalents: dict[str, dict],
    *,
    wall_s: float,
    jobs: int,
    command: str,
    today: str | None = None,
    machine: str | None = None,
) -> tuple[str, int]:
    """MUTANTS.md, and the number of HOLEs (survivors no entry explains) in it."""
    today = today or datetime.date.today().isoformat()
    total_s = sum(r.wall_s for r in results)
    all_jobs = sorted({run["jobs"] for r in results for run in r.runs})
    runs_jobs = (
        f"{' or '.join(map(str, all_jobs))} job(s) at a time" if all_jobs else "nothing run yet"
    )
    lines = [
        f"# Mutation testing of {assignment}'s graders",
        "",
        "<!-- Written by `python -m grader mutants`; edit mutants_equivalent.json, not this. -->",
        "",
        f"Generated {today} by `{command}` on {machine or machine_line()}. Running the "
        f"mutants took {total_s:.0f} s of wall time in all ({runs_jobs}; per exercise below, "
        f"runs resumed from the cache added up); this command took {wall_s:.0f} s with "
        f"{jobs} job(s) at a time.",
        "",
        "Each mutant is the reference solution with one change between `### BEGIN SOLUTION` and "
        "`### END SOLUTION`, graded by the exercise's CPU checks (visible, then hidden; the "
        "`_cuda` cells need a GPU and are left out). **Killed**: a check failed (the first one "
        "named). **Timeout**: still running at the time limit. **Survived**: every check "
        "passed: *equivalent* (same behaviour on every input the statement allows), "
        "*tolerated* (off by less than the checks can measure, by design: a timing, a "
        "tolerance), *same on CPU* (differs only on a GPU, e.g. a tensor's device), *GPU only* "
        "(code that never ran in the CPU checks); the `_cuda` checks are there for the last two; "
        f"each with its reason in [`{EQUIVALENT_FILE}`]({EQUIVALENT_FILE}); or "
        "a **HOLE**: a wrong answer the CPU checks give full marks. Score: killed (timeouts "
        "included) over the mutants run that are not equivalent, tolerated or GPU only.",
        "",
        "| exercise | mutants | killed | timeout | survived | equivalent | tolerated "
        "| same on CPU | GPU only | HOLE | not run yet | score | time |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    holes = 0
    sections = []
    for res in results:
        if res.error and not res.results:
            lines.append(f"| `{res.exercise}` | {len(res.mutants)} | – | – | – | – | – | – | – | – | "
                         f"– | – | {_md(res.error)} |")  # fmt: skip
            continue
        survivors = [m for m in res.mutants if res.status(m) == SURVIVED]
        kinds = Counter()
        rows = []
        ran = set(res.baseline.get("lines", []))
        for m in survivors:
            kind, why = explain(m, res.lines[m.line - 1], equivalents, ran)
            kinds[kind] += 1
            if kind in KINDS:
                shown = f"{KINDS[kind]}: {_md(why)}"
            elif kind == "stale":
                shown = f"**STALE**: {_md(why)}"
            else:
                shown = "**HOLE**" + (f": {_md(why)}" if why else "")
                if m.line not in ran:
                    shown += " (this line never ran in the checks' process)"
            rows.append(f"| `{m.id}` | {_code(m.before)} → {_code(m.after)} | {shown} |")
        hole = kinds["HOLE"] + kinds["stale"]
        holes += hole
        killed, timeout = res.count(KILLED), res.count(TIMEOUT)
        done = killed + timeout + len(survivors)
        left = len(res.mutants) - done
        counted = done - sum(kinds[k] for k in KINDS)
        score = f"{(killed + timeout) / counted:.0%}" if counted else "–"
        lines.append(
            f"| `{res.exercise}` | {len(res.mutants)} | {killed} | {timeout} | {len(survivors)} | "
            f"{kinds['equivalent']} | {kinds['tolerated']} | {kinds['cpu-same']} | "
            f"{kinds['gpu-only']} | {hole} | "
            f"{left} | {score} | "
            f"{res.wall_s:.0f} s{_jobs_note(res)} |"
        )
        sec = [f"## `{res.exercise}`", ""]
        base = res.baseline
        text = (
            f"{len(res.mutants)} mutants ({res.invalid} more were not valid Python), checks "
            f"{', '.join(f'`{c}`' for c in res.checks)}"
        )
        if base.get("status") == SURVIVED:
            text += (
                f"; the reference passes them in {base.get('seconds', 0):.1f} s (traced); time "
                f"limit per mutant {base.get('timeout_s', 0):.0f} s."
            )
        else:
            text += "."
        if left:
            text += f" **{left} not run yet** (`--limit`, not asked for, or stopped)."
        sec.append(text)
        if res.error:
            sec += ["", f"**{_md(res.error)}**"]
        by_check = Counter(res.results[m.key]["check"] for m in res.mutants
                           if res.status(m) == KILLED)  # fmt: skip
        if by_check:
            sec += ["", "Killed by: " + ", ".join(f"`{c}` {n}" for c, n in by_check.most_common())
                    + "."]  # fmt: skip
        if rows:
            sec += ["", "| survivor | change | why |", "|---|---|---|", *rows]
        else:
            sec += ["", "No survivor." if done else "Nothing run yet."]
        timeouts = [m for m in res.mutants if res.status(m) == TIMEOUT]
        if timeouts:
            sec += ["", "Killed by timeout:", ""]
            sec += [f"- `{m.id}`: {_code(m.before)} → {_code(m.after)} "
                    f"({_md(res.results[m.key]['message'])})" for m in timeouts]  # fmt: skip
        killed_rows = [
            f"| `{m.id}` | {_code(m.before)} → {_code(m.after)} | "
            f"`{res.results[m.key]['check']}` | {_md(res.results[m.key]['message'], 140)} |"
            for m in res.mutants
            if res.status(m) == KILLED
        ]
        if killed_rows:
            sec += ["", f"<details><summary>The {len(killed_rows)} killed mutants</summary>", "",
                    "| mutant | change | killed by | first failure |", "|---|---|---|---|",
                    *killed_rows, "", "</details>"]  # fmt: skip
        sections.append("\n".join(sec))
    used = (
        {m.id for r in results for m in r.mutants}
        | {f"{m.exercise}:L{m.line}:*" for r in results for m in r.mutants}
        | {f"{m.exercise}:L{m.line}:{m.id.split(':')[2]}:*" for r in results for m in r.mutants}
    )
    unused = sorted(k for k in equivalents if k not in used)
    body = "\n".join(lines) + "\n\n" + "\n\n".join(sections) + "\n"
    if unused:
        body += (
            f"\n## Entries of `{EQUIVALENT_FILE}` that name no mutant now\n\n"
            + "\n".join(f"- `{k}`" for k in unused)
            + "\n"
        )
    return body, holes


def write_report(
    assignment: str,
    results: list[ExerciseResult],
    *,
    wall_s: float,
    jobs: int,
    command: str,
    report: Path | None = None,
    equivalents: Path | None = None,
) -> tuple[Path, int]:
    """Write MUTANTS.md (default ``grader/samples/<id>/MUTANTS.md``); return (path, HOLEs)."""
    folder = course.PACKAGE / "samples" / assignment
    report = Path(report) if report else folder / REPORT_FILE
    equivalents = Path(equivalents) if equivalents else folder / EQUIVALENT_FILE
    text, holes = format_report(
        assignment, results, load_equivalents(equivalents), wall_s=wall_s, jobs=jobs,
        command=command,
    )  # fmt: skip
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(text)
    return report, holes


def summary_lines(results: list[ExerciseResult]) -> list[str]:
    """One line per exercise for the terminal."""
    out = []
    for r in results:
        done = sum(1 for m in r.mutants if r.status(m))
        out.append(
            f"{r.exercise:<24} {len(r.mutants):>4} mutants, {done:>4} run: "
            f"{r.count(KILLED)} killed, {r.count(TIMEOUT)} by timeout, {r.count(SURVIVED)} survived"
            + (f"  ({r.error})" if r.error else "")
        )
    return out


def as_json(results: list[ExerciseResult]) -> list[dict]:
    """The results as plain data (for tests and scripts)."""
    return [
        {
            "exercise": r.exercise,
            "mutants": [{**asdict(m), "id": m.id, **r.results.get(m.key, {})} for m in r.mutants],
            "invalid": r.invalid,
            "error": r.error,
        }
        for r in results
    ]
