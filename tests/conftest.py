"""Shared test setup: hardware markers, the hypothesis profile, and the xdist groups with each
worker's wall time (printed at the end of a ``-n 2 --dist loadgroup`` run)."""

import os
import time

import pytest
import torch
from hypothesis import HealthCheck, settings

# No deadlines: CI machines have 2 busy cores, and timing belongs in benchmarks, not here.
settings.register_profile(
    "ci", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


#: pytest-xdist groups for the README's full command (``-n 2 --dist loadgroup``). The modules
#: named here grade whole classes through subprocesses (nbgrader autograde of the demo class,
#: shards and a Ray cluster): on 2026-11-26, with the course-local nbgrader round in this group
#: too, the group took about 41 minutes (the demo class 29, the round 5) and set CI's time.
#: With 13_parallelism the demo class grows, so the round (test_nbgrader_flow.py) moved to the
#: other worker, which runs every other test in this module's order (rank launchers first).
#: The closing lines of a run give each worker's wall time. The fast tier and single files run
#: without xdist. Under other ``--dist`` modes the groups are ignored.
XDIST_GROUPS = {
    "test_pipeline.py": "classes",
    "test_scale.py": "classes",
    "test_whole_class.py": "classes",
}
#: Finer than a module: the tests of a module that use one of its module-scoped fixtures, which
#: then runs on that group's worker only. The fresh clone's run of 2026-11-28 (1766 passed, the
#: core demo class) took 47.3 min on the main worker and about 30 on the classes one; the
#: nbgrader round through the exchange (``flow``, about 2 min) and the foreign configuration
#: (``foreign``: the blank copy, the reference and a correct alternative of every notebook under
#: plain nbgrader, 13.7 min on 2026-11-27) run on the classes worker.
XDIST_FIXTURE_GROUPS = {
    ("test_nbgrader_flow.py", "flow"): "classes",
    ("test_nbgrader_flow.py", "foreign"): "classes",
    ("test_nbgrader_flow.py", "foreign_alternatives"): "classes",
    # the bad-submissions class (61 submissions, hostile ones included: about 10 minutes)
    ("test_grading.py", "graded"): "classes",
}


#: Unit tests left to the full command (marked ``slow``): each took 3 s or more on 2 cores in the
#: fast tier of 2026-11-28 (``-n 2``), and none is a sample's check (the fast tier checks every
#: sample in process: ``tests/test_<nn>_*.py::test_sample_scores_as_declared`` and the
#: references). Matched as node-id prefixes.
SLOW_UNIT_TESTS = (
    # every quick check again, with probes from the kernel view (the references pass in the
    # fast tier with the real modules)
    "tests/test_hostile.py::test_every_quick_check_passes_the_reference_with_probes_from_the_kernel_view",
    "tests/test_hostile.py::test_the_kernel_side_of_the_course_runs_on_the_kernel_view",
    "tests/test_hostile.py::test_a_job_with_many_spinning_processes_gets_the_cpu_share_of_one_job",
    # the CUDA check's logic on the simulated link: timed rounds
    "tests/test_04_memory.py::test_h2d_bandwidth_cuda_check_",
    "tests/test_05_tensor_cores.py::test_any_correct_timer_passes_on_the_simulated_gpu",
    # a fresh Python, rank processes or a trace analysis each
    "tests/test_01_devices.py::test_fresh_process_sees_the_simulated_machine",
    "tests/test_09_compilation.py::test_fresh_process_",
    "tests/test_07_multi_gpu.py::test_probes_hand_back_plain_data_only",
    "tests/test_07_multi_gpu.py::test_ddp_check_",
    "tests/test_07_multi_gpu.py::test_average_gradients_check_spawns_ranks_where_fork_is_unsafe",
    "tests/test_11_scaling.py::test_hta_cell_gives_what_the_raw_events_hold",
    "tests/test_triton_cpu.py::test_use_interpreter_after_triton_and_inductor_were_imported",
    # the visible checks again, for the samples test_12_triton.py grades with the hidden ones
    "tests/test_12_backward.py::test_correct_answers_pass_the_visible_checks",
    # two fresh Pythons: nbgrader's own stamp against the one read in process
    "tests/test_speed.py::test_the_gradebook_stamp_read_in_process_is_the_alembic_commands",
)


def pytest_configure(config):
    """Declare ``xdist_group`` where pytest-xdist is not loaded (``-p no:xdist``), so the marks
    this module adds do not warn."""
    config.addinivalue_line("markers", "xdist_group(name): pytest-xdist's group of a test")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """Skip `cuda` / `multi_gpu` tests, with the reason, where the hardware is missing; mark
    every notebook run by nbmake `slow` (the fast tier, `-m "not slow"`, leaves them out)."""
    n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    # Tests that start rank processes run first, while this process may still fork them: after
    # fake-tensor tracing (torch.compile, the simulated GPU's sync test) a forked rank cannot run
    # backward, ranks are spawned instead, and a class defined by exec (a sample) has no source a
    # spawned rank could rebuild it from (grader.runtime.distributed.fork_is_safe).
    first = (
        "test_07_multi_gpu.py",
        "test_11_scaling.py",
        "test_13_tensor_parallel.py",
        "test_13_pipeline.py",
        "test_13_communication.py",
    )
    items.sort(key=lambda item: 0 if item.fspath.basename in first else 1)
    for item in items:
        # Under `-n 2 --dist loadgroup` (the README's full command): the modules that grade
        # whole classes in subprocesses on one worker, everything else, in the order above,
        # on the other (see XDIST_GROUPS).
        group = XDIST_GROUPS.get(item.fspath.basename, "main")
        for (module, fixture), fixture_group in XDIST_FIXTURE_GROUPS.items():
            if item.fspath.basename == module and fixture in getattr(item, "fixturenames", ()):
                group = fixture_group
        item.add_marker(pytest.mark.xdist_group(group))
        if str(item.fspath).endswith(".ipynb") or item.nodeid.startswith(SLOW_UNIT_TESTS):
            item.add_marker(pytest.mark.slow)
        if "cuda" in item.keywords and n_gpus == 0:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU; this machine has none"))
        if "multi_gpu" in item.keywords and n_gpus < 2:
            item.add_marker(
                pytest.mark.skip(reason=f"needs 2+ CUDA GPUs; this machine has {n_gpus}")
            )


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook, in the controlling process
def pytest_xdist_node_collection_finished(node, ids):
    """Stop a ``--dist loadgroup`` run whose groups pytest-xdist did not apply. With pytest 9.2
    its node-id suffix (``test_x@main``) no longer takes (pytest-dev/pytest-xdist issue #1386):
    the groups are ignored without a word, and both workers would grade the demo class."""
    if node.config.getvalue("dist") == "loadgroup" and ids and not any("@" in i for i in ids):
        pytest.exit(
            "pytest-xdist's --dist loadgroup did not apply the xdist_group marks (pytest "
            f"{pytest.__version__}; pytest-dev/pytest-xdist issue #1386): install the pytest "
            "that requirements.txt pins (pip install -r requirements.txt)",
            returncode=4,
        )


#: File to which each failure's report is appended as soon as the test fails (set by
#: ``python -m grader verify-gpu``): a run stopped at a lent machine's time limit never reaches
#: pytest's closing report, and the reasons would be lost.
FAILURE_LOG = "COURSE_FAILURE_LOG"


def pytest_runtest_logreport(report):
    """Append a failed test's report to ``$COURSE_FAILURE_LOG`` (once: in the controlling
    process when pytest-xdist runs workers)."""
    path = os.environ.get(FAILURE_LOG)
    if not path or not report.failed or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    with open(path, "a", encoding="utf-8", errors="replace") as out:
        out.write(f"===== {report.nodeid} ({report.when}) =====\n{report.longreprtext[-6000:]}\n")


# --------------------------------------------------------------------------- each worker's time
def pytest_sessionstart(session):
    session.config._course_start = time.monotonic()
    session.config._course_groups = set()


def pytest_runtest_setup(item):
    """Remember which xdist groups this process ran (for the closing lines)."""
    for mark in item.iter_markers("xdist_group"):
        item.config._course_groups.add(mark.args[0] if mark.args else mark.kwargs.get("name"))


def pytest_sessionfinish(session):
    """In an xdist worker: hand the controller this worker's wall time and groups."""
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["course_wall_s"] = time.monotonic() - session.config._course_start
        out["course_groups"] = sorted(g for g in session.config._course_groups if g)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook, in the controlling process
def pytest_testnodedown(node, error):
    out = getattr(node, "workeroutput", None) or {}
    if "course_wall_s" in out:
        workers = node.config.__dict__.setdefault("_course_workers", {})
        workers[getattr(node, "workerinput", {}).get("workerid", "?")] = (
            out["course_wall_s"],
            out.get("course_groups", []),
        )


def pytest_terminal_summary(terminalreporter, config):
    """One line per xdist worker: how long it ran and which groups: the numbers that say whether
    XDIST_GROUPS still balances the two workers (CI must stay under 45 minutes)."""
    workers = config.__dict__.get("_course_workers")
    if not workers:
        return
    terminalreporter.section("xdist workers (wall time)")
    for worker, (seconds, groups) in sorted(workers.items()):
        terminalreporter.write_line(
            f"{worker}: {seconds:7.1f} s ({seconds / 60:.1f} min), groups {', '.join(groups)}"
        )
