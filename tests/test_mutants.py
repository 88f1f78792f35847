"""``python -m grader mutants``: mutants made only from the student's lines, with stable ids; every
operator does what its examples say; a survivor is explained only by an entry for its own line
text; and, run for real on 02_async's ``pipeline_time`` (checks of a few milliseconds), a wrong
mutant is killed by the check that sees it, an equivalent one survives and is explained by the
committed ``mutants_equivalent.json``, a mutant that never returns is killed by the time limit, one
that kills its own process is killed, and a second run takes every verdict from the cache."""

from __future__ import annotations

import json
import os
import time

import psutil
import pytest

from grader.__main__ import main
from grader.runtime import course
from grader.tools import mutants

CELL = '''import math


def area(r: float) -> float:
    """The area of a disc of radius r >= 0."""
    scale = 2 + 1  # outside the solution: never mutated
    ### BEGIN SOLUTION
    if r < 0:
        raise ValueError(f"negative radius {r}")
    return math.pi * r**2
    ### END SOLUTION
'''


def _ids(found):
    return [m.id for m in found]


def test_operators_do_what_their_examples_say():
    """Cosmic Ray's operators (as used here) and the course's own, on their documented examples."""
    ops = mutants.operators()
    assert {"RemoveArgument", "SwapSubscripts", "DropSliceBound", "ReplaceCallWithArgument"} <= set(
        ops
    )
    checked = 0
    for name, op in ops.items():
        for example in op.examples():
            got = mutants.mutate_code(example.pre_mutation_code, name, example.occurrence)
            assert got == example.post_mutation_code, (name, example)
            checked += 1
    assert checked >= len(ops)


def test_mutants_come_only_from_the_solution_lines_with_stable_ids():
    found, invalid = mutants.generate_mutants("area", CELL)
    assert invalid == 0
    assert found and {m.line for m in found} == {8, 9, 10}  # never line 6, outside the markers
    ids = _ids(found)
    assert len(ids) == len(set(ids))
    for expected in (
        "area:L8:ReplaceComparisonOperator_Lt_LtE:0",
        "area:L8:NumberReplacer:0",
        "area:L9:RemoveArgument:0",
        "area:L10:ReplaceBinaryOperator_Mul_Div:0",
        "area:L10:ReplaceBinaryOperator_Pow_Mul:0",
    ):
        assert expected in ids
    pow_mul = found[ids.index("area:L10:ReplaceBinaryOperator_Pow_Mul:0")]
    assert "return math.pi * r*2" in pow_mul.source and pow_mul.diff.endswith("r*2")
    assert pow_mul.source.count("### BEGIN SOLUTION") == 1
    # the same cell gives the same mutants, ids and cache keys; another cell other keys
    again, _ = mutants.generate_mutants("area", CELL)
    assert [(m.id, m.key) for m in again] == [(m.id, m.key) for m in found]
    assert len({m.key for m in found}) == len(found)


def test_a_writefile_cell_keeps_its_magic_and_its_line_numbers():
    cell = "%%writefile script.py\nimport sys\n### BEGIN SOLUTION\nx = 1 + 2\n### END SOLUTION\n"
    found, _ = mutants.generate_mutants("script", cell)
    assert found and all(m.line == 4 for m in found)
    assert all(m.source.startswith("%%writefile script.py\n") for m in found)
    assert "x = 1 - 2" in {m.source.splitlines()[3] for m in found}


def test_each_exercise_runs_its_cpu_checks_visible_then_hidden_and_no_cuda_check():
    nb = course.read(course.source_path("12_triton"))
    checks = mutants.exercise_checks(nb, "softmax_rows")
    assert [c.name for c in checks] == ["check_softmax_rows", "check_softmax_rows_hidden"]
    assert checks[0].source() == (
        "from grader.checks.ch12_triton import check_softmax_rows\n"
        "check_softmax_rows(softmax_rows)\n"
    )
    nb = course.read(course.source_path("07_multi_gpu"))
    (script, _hidden) = mutants.exercise_checks(nb, "ddp_train")
    assert script.source().endswith("check_ddp_train('ddp_script.py')\n")


def test_a_survivor_is_explained_only_by_an_entry_for_its_own_line():
    found, _ = mutants.generate_mutants("area", CELL)
    (m,) = [x for x in found if x.id == "area:L9:RemoveArgument:0"]
    line = CELL.splitlines()[8]
    entry = {"line": line.strip(), "why": "the message is not asked for"}
    assert mutants.explain(m, line, {}) == ("HOLE", "")
    assert mutants.explain(m, line, {m.id: entry}) == ("equivalent", "the message is not asked for")
    assert mutants.explain(m, line, {"area:L9:*": {**entry, "kind": "tolerated"}})[0] == "tolerated"
    one_operator = {"area:L9:RemoveArgument:*": entry}
    assert mutants.explain(m, line, one_operator)[0] == "equivalent"
    assert mutants.explain(m, line, {"area:L9:NumberReplacer:*": entry}) == ("HOLE", "")
    kind, why = mutants.explain(m, "        raise KeyError(r)", {m.id: entry})
    assert kind == "stale" and "raise KeyError(r)" in why
    gpu = {m.id: {**entry, "kind": "gpu-only"}}
    assert mutants.explain(m, line, gpu, ran={8})[0] == "gpu-only"
    kind, why = mutants.explain(m, line, gpu, ran={8, 9})
    assert kind == "HOLE" and "the CPU checks ran this line" in why
    assert mutants.explain(m, line, {m.id: {**entry, "kind": "fine"}})[0] == "HOLE"


def test_the_report_lists_survivors_with_why_and_counts_holes():
    found, _ = mutants.generate_mutants("area", CELL)
    res = mutants.ExerciseResult("area", found, lines=CELL.splitlines(), checks=["check_area"])
    res.baseline = {"status": "survived", "seconds": 0.1, "timeout_s": 30, "lines": [8, 9, 10]}
    explained, hole, slow = found[0], found[1], found[2]
    res.results = {m.key: {"status": "killed", "check": "check_area", "message": "CheckFailed: x"}
                   for m in found[3:]}  # fmt: skip
    res.results[explained.key] = {"status": "survived", "check": "", "message": ""}
    res.results[hole.key] = {"status": "survived", "check": "", "message": ""}
    res.results[slow.key] = {"status": "timeout", "check": "check_area", "message": "after 30 s"}
    line = CELL.splitlines()[explained.line - 1].strip()
    text, holes = mutants.format_report(
        "demo", [res], {explained.id: {"line": line, "why": "same area | any r"}},
        wall_s=12, jobs=2, command="python -m grader mutants --assignment demo", today="2026-01-02",
        machine="a test machine",
    )  # fmt: skip
    assert holes == 1
    assert "Generated 2026-01-02 by `python -m grader mutants --assignment demo` on a test " in text
    assert f"| `{explained.id}` |" in text and "equivalent: same area \\| any r" in text
    assert f"| `{hole.id}` |" in text and "**HOLE**" in text
    assert f"- `{slow.id}`" in text and "Killed by timeout" in text
    n = len(found)
    assert f"| `area` | {n} | {n - 3} | 1 | 2 | 1 | 0 | 0 | 0 | 1 | 0 |" in text


# --------------------------------------------------------------------------- real processes
A, EXERCISE = "02_async", "pipeline_time"


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """``pipeline_time``'s mutants run once, for real, into a scratch cache (about 10 s)."""
    work = tmp_path_factory.mktemp("mutants")
    (res,) = [r for r in mutants.run(A, [EXERCISE], work=work, progress=False) if r.results]
    return work, res


def _result(res, mutant_id):
    (m,) = [m for m in res.mutants if m.id == mutant_id]
    return res.results[m.key]


@pytest.mark.slow
def test_a_wrong_mutant_is_killed_by_the_check_that_sees_it(first_run):
    _, res = first_run
    assert res.baseline["status"] == "survived" and 19 in res.baseline["lines"]
    killed = _result(res, f"{EXERCISE}:L19:ReplaceBinaryOperator_Mul_Div:0")  # n / (t1 + ...)
    assert killed["status"] == "killed" and killed["check"] == "check_pipeline_time"
    assert "synchronous total" in killed["message"]
    assert len(res.results) == len(res.mutants)


@pytest.mark.slow
def test_an_equivalent_survivor_is_explained_by_the_committed_file(first_run):
    _, res = first_run
    survivor = f"{EXERCISE}:L18:RemoveArgument:0"  # raise ValueError() without its message
    assert _result(res, survivor)["status"] == "survived"
    folder = course.PACKAGE / "samples" / A
    equivalents = mutants.load_equivalents(folder / mutants.EQUIVALENT_FILE)
    text, holes = mutants.format_report(
        A, [res], equivalents, wall_s=1, jobs=1, command="test", machine="here"
    )
    assert holes == 0, text
    assert f"| `{survivor}` |" in text and "equivalent: the statement asks for a ValueError" in text


@pytest.mark.slow
def test_a_second_run_takes_every_verdict_from_the_cache(first_run, monkeypatch, tmp_path):
    work, res = first_run
    saved = json.loads((work / f"{EXERCISE}.json").read_text())
    assert {m.key for m in res.mutants} <= set(saved["results"])

    def no_new_run(jobs, **kwargs):
        assert not jobs, f"ran again: {sorted(jobs)}"
        return {}

    monkeypatch.setattr(mutants, "run_jobs", no_new_run)
    report = tmp_path / "MUTANTS.md"
    argv = ["mutants", "--assignment", A, "--exercise", EXERCISE, "--work", str(work)]
    assert main([*argv, "--report", str(report)]) == 0  # every survivor explained
    text = report.read_text()
    assert f"| `{EXERCISE}` | {len(res.mutants)} | " in text and "| `time_gpu` | " in text


@pytest.mark.slow
def test_a_mutant_that_never_returns_or_kills_itself_is_killed():
    nb = course.read(course.source_path(A))
    checks = mutants.exercise_checks(nb, EXERCISE)
    cells = mutants._cell_sources(A)

    def job(code: str) -> mutants.Job:
        return mutants.Job([(g, code if g == EXERCISE else s) for g, s in cells], checks)

    token = f"mutants-test-{os.getpid()}-{time.time_ns()}"  # names the grandchild to look for
    hang = "import subprocess, sys\ndef pipeline_time(*a):\n"
    hang += f"    subprocess.Popen([sys.executable, '-c', 'while True: pass  # {token}'])\n"
    hang += "    while True: pass\n"
    results = mutants.run_jobs(
        {"hang": job(hang), "exit": job("import os\ndef pipeline_time(*a):\n    os._exit(7)\n")},
        parallel=2, timeout_s=8, check_modules=[c.module for c in checks],
    )  # fmt: skip
    assert results["hang"]["status"] == "timeout"
    assert results["hang"]["check"] == "check_pipeline_time"
    assert results["exit"]["status"] == "killed" and "exit status 7" in results["exit"]["message"]

    def spinning(proc: psutil.Process) -> bool:
        try:
            return token in " ".join(proc.cmdline()) and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    # anywhere on the machine: killed without its children, the grandchild would be init's now
    leftovers = [p for p in psutil.process_iter() if spinning(p)]
    assert not leftovers, f"processes the hanging mutant started still run: {leftovers}"
