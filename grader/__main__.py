"""Instructor command line: ``python -m grader <command>``.

Commands:
  start       a student's JupyterLab on their own workspace (the README's student command)
  release     regenerate notebooks/ from solutions/ (``--check``: only report differences)
  clean       strip outputs and execution metadata from the sources in solutions/
  autograde   autograde a folder of submissions (<student>/<assignment>/<assignment>.ipynb)
  feedback    generate HTML feedback for everything autograded
  export      export all grades to CSV
  demo        run the whole flow on the bundled sample class and check every score
  benchmark   time grading a class of sample students, one at a time vs in parallel
  measure     measure the course's GPU figures here and record them (CUDA machines)
  verify-gpu  prove the course on a lent GPU in three parts of under 9 minutes each
  gpu-record  record what a lent GPU proved (images/gpu_verification.json), or print its table
  merge       merge the working folders of shards graded apart into one gradebook
  hub         start the course on JupyterHub on loopback for a demo class (--demo)
  mutants     mutation testing of an assignment's graders: which wrong answers get full marks

Exit status: 0 on success, 1 when a check or a grading step failed, 2 for usage errors
and refusals (e.g. grading CUDA checks on a machine without a GPU).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

# The modules a command needs (torch, nbgrader, the grading engine) are imported inside that
# command's function, so that `--help` and a usage error answer at once (issue 38: under 2 s).
# The sample classes of `demo --class` are grader.tools.samples.CLASSES, written out below
# (tests/test_layout.py keeps them equal).
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grader.grading import grading


def _cmd_start(args) -> int:
    from grader.deploy import workspace

    return workspace.start(args.workspace, [a for a in args.lab_args if a != "--"])


def _cmd_release(args) -> int:
    from grader.grading import pipeline

    changed = pipeline.release(args.assignments or None, check=args.check)
    if args.check:
        if changed:
            print(
                f"out of sync with solutions/: {', '.join(changed)}. Run `python -m grader release`."
            )
            return 1
        print("notebooks/ is in sync with solutions/.")
        return 0
    print(f"regenerated: {', '.join(changed)}" if changed else "notebooks/ was already up to date.")
    return 0


def _cmd_clean(args) -> int:
    from grader.grading import pipeline

    changed = pipeline.clean_sources(args.assignments or None)
    print(f"cleaned: {', '.join(changed)}" if changed else "sources were already clean.")
    return 0


def _grading_options(args) -> grading.GradingOptions:
    from grader.grading import grading

    return grading.GradingOptions.for_machine(
        args.jobs,
        cell_timeout=args.cell_timeout,
        notebook_timeout=args.notebook_timeout,
        memory_gb=args.memory_gb,
        disk_gb=getattr(args, "disk_gb", None),
        processes=getattr(args, "processes", None),
        isolate=not args.no_sandbox,
        regrade=args.regrade,
        cpu_ok=args.cpu_ok,
        rerun_demos=args.rerun_demos,
        cells=getattr(args, "cells", None),
        allow_root_unsandboxed=getattr(args, "allow_root_unsandboxed", None),
    )


def _cmd_autograde(args) -> int:
    import torch

    from grader.grading import grading, pipeline, sandbox
    from grader.tools import verify

    options = _grading_options(args)
    pipeline.refuse_root_unsandboxed(options)  # before anything else is said or done
    submitted = Path(
        args.submissions or pipeline.course_config(args.work).CourseDirectory.submitted_directory
    )
    wanted = args.assignment or (
        [a for _, a in pipeline.submissions_in(submitted)] if submitted.is_dir() else []
    )
    for problem in verify.compile_problems(wanted):
        print(f"warning: {problem}: the torch.compile checks (09_compilation) will fail here")
    if not torch.cuda.is_available() and args.cpu_ok:
        print("No CUDA GPU: CUDA-only cells score 0 and are listed as not checked (--cpu-ok).")
    unsafe = pipeline.root_unsandboxed(options)
    if unsafe and options.allow_root_unsandboxed:
        banner = "!" * 78
        print(
            f"{banner}\nWARNING: grading AS ROOT WITHOUT THE SANDBOX ({unsafe}; "
            "--allow-root-unsandboxed):\nevery student's code runs as root on this machine and "
            f"can read and change anything here.\n{banner}",
            file=sys.stderr,
        )
    print(
        f"Grading {options.jobs} submission(s) at a time; cells stop after {options.cell_timeout} s, "
        f"notebooks after {options.notebook_timeout} s, kernels at {options.memory_gb:g} GB of "
        f"memory, {options.disk_gb:g} GB of disk and {options.processes} processes and threads. "
        f"Kernels: {sandbox.isolation_label(options.isolate)}."
    )
    engine = None
    if args.engine == "ray":
        from grader.grading.ray_engine import RayEngine

        engine = RayEngine(
            args.address, cpus_per_task=args.cpus_per_task, gpus_per_task=args.gpus_per_task
        )
    results = pipeline.autograde(
        args.submissions,
        work=args.work,
        assignment_ids=args.assignment or None,
        options=options,
        shard=_shard(args.shard),
        engine=engine,
    )
    if not results:
        print("no submissions found.")
        return 1
    print(grading.format_summary(results))
    for line in pipeline.skipped_submissions(submitted):
        print(f"not graded: {line}")
    if args.report:
        print(f"report written to {grading.write_report_csv(results, args.report)}")
    failed = [r for r in results if r.status == "failed"]
    if failed:
        print(f"\n{len(failed)} submission(s) could not be graded; run the command again to retry.")
        return 1
    return 0


def _shard(text: str | None) -> tuple[int, int] | None:
    from grader.grading import pipeline

    if not text:
        return None
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise pipeline.PipelineError(f"--shard {text}: write K/N, e.g. 2/8") from None
    return k, n


def _cmd_merge(args) -> int:
    from grader.grading import grading, merge

    results = merge.merge(args.shards, args.work)
    print(grading.format_summary(results))
    if args.report:
        print(f"report written to {grading.write_report_csv(results, args.report)}")
    return 0


def _cmd_feedback(args) -> int:
    from grader.grading import pipeline

    written = pipeline.feedback(args.work)
    print(
        f"wrote {len(written)} feedback file(s) under {Path(written[0]).parents[2] if written else '-'}"
    )
    return 0


def _cmd_export(args) -> int:
    from grader.grading import pipeline

    print(f"grades written to {pipeline.export_csv(args.to, args.work)}")
    return 0


def _cmd_measure(args) -> int:
    from grader.tools import measure

    if args.list:
        for name, what, _ in measure.GPU_FIGURES:
            print(f"{name:<10} {what}")
        return 0
    return measure.main(args.only, args.out)


def _cmd_benchmark(args) -> int:
    from grader.grading import pipeline
    from grader.tools import bench

    if args.students < 1 or any(j < 1 for j in args.jobs):
        raise pipeline.PipelineError("--students and --jobs must be at least 1")
    from grader.runtime import course

    aids = course.assignments() if args.assignment == ["all"] else args.assignment
    for aid in aids:
        course.check_assignment(aid)
    if len(aids) == 1 and not args.readme:
        rows = bench.run(aids[0], args.students, args.jobs, ray_nodes=args.ray_nodes)
        print(bench.format_rows(rows, aids[0]))
    else:
        if args.ray_nodes:
            raise pipeline.PipelineError("--ray-nodes times one assignment: name only one")
        rows = bench.run_all(list(aids), args.students, args.jobs)
        print(bench.format_table(rows))
        if args.readme:
            bench.write_readme(rows, course.REPO / "README.md")
            print(f"wrote the table into {course.REPO / 'README.md'}")
    if args.json:
        bench.write_json(rows, ",".join(aids), args.json)
    return 0 if all(r.ok for r in rows) else 1


def _cmd_verify_gpu(args) -> int:
    from grader.tools import verify

    result = verify.run_part(
        args.part, args.out, budget_s=args.budget, assignments=args.assignment, only=args.only,
        keyword=args.keyword, measure=not args.no_measure, workers=args.workers,
        jobs=args.jobs,
    )  # fmt: skip
    print((Path(args.out) / f"part{args.part}.md").read_text())
    return 0 if result["ok"] else 1


def _cmd_gpu_record(args) -> int:
    from grader.tools import gpu_record

    if args.lease is not None:
        if not args.commit:
            raise SystemExit("gpu-record --lease needs --commit (the commit the lent machine ran)")
        run = gpu_record.record_from_lease(args.lease, args.commit, args.note or "")
        gpu_record.add_run(run)
        print(f"recorded the run of {run['date']} on {run['device']} in {gpu_record.RECORD_FILE}")
    print(gpu_record.table())
    return 0


def _cmd_demo(args) -> int:
    import torch

    from grader.tools import demo

    gpu = torch.cuda.is_available()
    print(
        "Demo: autograding the bundled sample class (reference, blank copy, typical mistakes, "
        "correct answers written differently) with nbgrader."
    )
    if not gpu:
        print(
            "No CUDA GPU here: CUDA-only cells score 0 for every student and are listed as not checked."
        )
    results = demo.run_demo(
        args.assignment or None,
        keep=args.keep,
        feedback=not args.no_feedback,
        options=_grading_options(args),
        kind=args.sample_class,
    )
    print()
    print(demo.format_table(results))
    not_checked = sorted({c for r in results for c in r.not_checked})
    if not_checked:
        print(f"\nNot checked without a GPU (score 0 for everyone): {', '.join(not_checked)}")
    if args.json:
        demo.write_json(results, args.json)
    bad = [r for r in results if not r.ok]
    if bad:
        print("\nScores that differ from what the samples must score:")
        print(demo.explain_mismatches(bad))
        return 1
    print("\nEvery score is as expected.")
    return 0


def _cmd_mutants(args) -> int:
    import time

    from grader.grading import pipeline
    from grader.tools import mutants

    if args.jobs < 1 or (args.limit is not None and args.limit < 0):
        raise pipeline.PipelineError("--jobs must be at least 1 and --limit at least 0")
    command = " ".join(
        ["python -m grader mutants --assignment", args.assignment]
        + [f"--exercise {e}" for e in args.exercise or []]
        + [f"--jobs {args.jobs}"]
        + ([f"--limit {args.limit}"] if args.limit is not None else [])
    )
    started = time.monotonic()
    try:
        results = mutants.run(
            args.assignment, args.exercise, jobs=args.jobs, limit=args.limit,
            timeout_s=args.timeout, fresh=args.fresh, work=args.work,
        )  # fmt: skip
    except mutants.MissingDependency as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    wall = time.monotonic() - started
    report, holes = mutants.write_report(
        args.assignment, results, wall_s=wall, jobs=args.jobs, command=command,
        report=args.report,
    )  # fmt: skip
    print("\n".join(mutants.summary_lines(results)))
    print(f"{wall:.0f} s; report: {report}")
    if holes:
        print(f"{holes} survivor(s) that no entry of {mutants.EQUIVALENT_FILE} explains (HOLE)")
        return 1
    return 0


def _cmd_hub(args) -> int:
    from grader.deploy.jupyterhub import hub

    students = tuple(args.student or hub.DEMO_STUDENTS)
    return hub.run(args.root, args.instructor, students, args.port, args.password)


def _add_grading_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="submissions graded at the same time (default: one per two cores, at most 8; 4 on a GPU)",
    )
    p.add_argument("--cell-timeout", type=int, default=None, help="seconds per cell (default 600)")
    p.add_argument(
        "--notebook-timeout", type=int, default=None, help="seconds per notebook (default 3600)"
    )
    p.add_argument(
        "--memory-gb",
        type=float,
        default=None,
        help="memory limit per kernel, GB (default: 80%% of the machine's memory split between jobs, at most 16)",
    )
    p.add_argument(
        "--disk-gb",
        type=float,
        default=None,
        help="disk quota per kernel, GB: its folder, home, /tmp and /dev/shm in all (default 4)",
    )
    p.add_argument(
        "--processes",
        type=int,
        default=None,
        help="processes and threads per kernel at once, where the machine enforces it (default 1024)",
    )
    p.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run kernels without the bubblewrap sandbox (they can then read the course folder)",
    )
    p.add_argument(
        "--regrade", action="store_true",
        help="grade again submissions already graded with the same content",
    )  # fmt: skip
    p.add_argument(
        "--rerun-demos", action="store_true",
        help="also re-run unchanged teaching demo cells (tagged demo; slower, same scores)",
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m grader``."""
    parser = argparse.ArgumentParser(
        prog="python -m grader",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "start",
        help="a student's JupyterLab on their own workspace, filled from the release",
        description="Fill the workspace from notebooks/ (never overwriting your work) and open "
        "JupyterLab on it. Arguments after the options go to `jupyter lab` (e.g. --no-browser "
        "--ip=127.0.0.1 --port=8888).",
    )
    p.add_argument(
        "--workspace", type=Path, default=None,
        help="your workspace folder (default: workspace/ in the course's folder)",
    )  # fmt: skip
    p.set_defaults(func=_cmd_start, cpu_ok=True, takes_lab_args=True)

    p = sub.add_parser("release", help="regenerate notebooks/ from solutions/")
    p.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    p.add_argument("--check", action="store_true", help="only report whether notebooks/ is in sync")
    p.set_defaults(func=_cmd_release)

    p = sub.add_parser("clean", help="strip outputs from the sources in solutions/")
    p.add_argument("assignments", nargs="*")
    p.set_defaults(func=_cmd_clean)

    p = sub.add_parser("autograde", help="autograde a folder of submissions")
    p.add_argument(
        "submissions",
        nargs="?",
        type=Path,
        default=None,
        help="folder of <student>/<assignment>/ (default: grader/work/submitted)",
    )
    p.add_argument("--assignment", action="append", help="only this assignment (repeatable)")
    p.add_argument("--work", type=Path, default=None, help="working folder (default: grader/work)")
    p.add_argument(
        "--cpu-ok", action="store_true", help="without a GPU, accept that CUDA-only cells score 0"
    )
    _add_grading_arguments(p)
    p.add_argument(
        "--allow-root-unsandboxed", action="store_true",
        help="grade even though this command runs as root without the bubblewrap sandbox "
        "(students' code then runs as root; refused otherwise)",
    )  # fmt: skip
    p.add_argument("--report", type=Path, default=None, help="also write the report as CSV")
    scale = p.add_argument_group("grading at scale (see the README)")
    scale.add_argument(
        "--shard", default=None, metavar="K/N",
        help="grade only shard K of N (students split by a hash of their id); merge the shards' "
        "working folders with `python -m grader merge`",
    )  # fmt: skip
    cells = scale.add_mutually_exclusive_group()
    cells.add_argument(
        "--only-cuda", dest="cells", action="store_const", const="cuda",
        help="grade only the _cuda test cells (a GPU node's share)",
    )  # fmt: skip
    cells.add_argument(
        "--no-cuda", dest="cells", action="store_const", const="no-cuda",
        help="grade every test cell but the _cuda ones (a CPU node's share)",
    )  # fmt: skip
    scale.add_argument(
        "--engine", choices=("local", "ray"), default="local",
        help="local: processes on this machine (default); ray: tasks on a Ray cluster",
    )  # fmt: skip
    scale.add_argument(
        "--address", default=None,
        help="Ray cluster to join: auto or HOST:PORT (default: start a local one)",
    )  # fmt: skip
    scale.add_argument("--cpus-per-task", type=float, default=1, help="Ray: CPUs per submission")
    scale.add_argument(
        "--gpus-per-task", type=float, default=1,
        help="Ray: GPUs (or a fraction) per submission whose CUDA cells are graded",
    )  # fmt: skip
    p.set_defaults(func=_cmd_autograde)

    p = sub.add_parser("merge", help="merge shards' working folders into one gradebook")
    p.add_argument("shards", nargs="+", type=Path, help="working folders of graded shards")
    p.add_argument(
        "--work", type=Path, default=None, help="target working folder (default: grader/work)"
    )
    p.add_argument("--report", type=Path, default=None, help="also write the report as CSV")
    p.set_defaults(func=_cmd_merge)

    p = sub.add_parser("feedback", help="generate HTML feedback for autograded submissions")
    p.add_argument("--work", type=Path, default=None)
    p.set_defaults(func=_cmd_feedback)

    p = sub.add_parser("export", help="export grades to CSV")
    p.add_argument("--to", type=Path, default=Path("grades.csv"))
    p.add_argument("--work", type=Path, default=None)
    p.set_defaults(func=_cmd_export)

    p = sub.add_parser("demo", help="run the whole flow on the bundled sample class")
    p.add_argument("--assignment", action="append", help="only this assignment (repeatable)")
    p.add_argument("--keep", type=Path, default=None, help="keep the working folder here")
    p.add_argument("--json", type=Path, default=None, help="also write the results as JSON")
    p.add_argument("--no-feedback", action="store_true", help="skip the HTML feedback step")
    p.add_argument(
        "--class", dest="sample_class", choices=("full", "core"), default="full",
        help="full: every sample (default); core: the reference, the blank copy and one mistake "
        "and one correct alternative per exercise (what the default test command grades)",
    )  # fmt: skip
    _add_grading_arguments(p)
    p.set_defaults(func=_cmd_demo, cpu_ok=True)

    p = sub.add_parser(
        "hub",
        help="start the course on JupyterHub on loopback for a demo class (root makes accounts)",
    )
    p.add_argument(
        "--demo", action="store_true", help="the demo class: instructor, student1, student2"
    )
    p.add_argument(
        "--root", type=Path, default=Path("/srv/gpu-course-hub"), help="the hub's folder"
    )
    p.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (default 8000)")
    p.add_argument("--instructor", default="instructor", help="the instructor's account")
    p.add_argument("--student", action="append", help="a student's account (repeatable)")
    p.add_argument("--password", default=None, help="the accounts' password (default: random)")
    p.set_defaults(func=_cmd_hub, cpu_ok=True)

    p = sub.add_parser(
        "mutants",
        help="mutation testing of an assignment's graders (writes grader/samples/<id>/MUTANTS.md)",
    )
    p.add_argument("--assignment", required=True, help="the assignment, e.g. 12_triton")
    p.add_argument(
        "--exercise", action="append", default=None,
        help="only this exercise (a solution cell's grade id; repeatable; default: all)",
    )  # fmt: skip
    p.add_argument("--jobs", type=int, default=1, help="mutants run at the same time (default 1)")
    p.add_argument(
        "--limit", type=int, default=None,
        help="run at most this many not yet cached mutants of each exercise (to estimate)",
    )  # fmt: skip
    p.add_argument(
        "--timeout", type=float, default=None,
        help="seconds per mutant (default: 6 times the reference's run, at least 30)",
    )  # fmt: skip
    p.add_argument("--fresh", action="store_true", help="ignore the cache and run every mutant")
    p.add_argument(
        "--work", type=Path, default=None,
        help="cache folder (default grader/work/mutants/<assignment>)",
    )  # fmt: skip
    p.add_argument(
        "--report", type=Path, default=None,
        help="the report (default grader/samples/<assignment>/MUTANTS.md)",
    )  # fmt: skip
    p.set_defaults(func=_cmd_mutants)

    p = sub.add_parser(
        "benchmark", help="time grading a class of sample students, serial vs parallel"
    )
    p.add_argument(
        "--assignment", nargs="+", default=["03_streams"],
        help="the assignments graded, one class each, or all (default 03_streams)",
    )  # fmt: skip
    p.add_argument("--students", type=int, default=50, help="submissions in the class (default 50)")
    p.add_argument(
        "--readme", action="store_true",
        help="write the per-assignment table into the README (between its benchmark-table "
        "markers)",
    )  # fmt: skip
    p.add_argument(
        "--jobs",
        type=int,
        nargs="+",
        default=[1, 2],
        help="submissions graded at a time; one run per value (default 1 2)",
    )
    p.add_argument(
        "--ray-nodes", type=int, default=0,
        help="also grade once with the Ray engine on a local cluster of this many one-CPU node "
        "processes (default 0: no Ray run)",
    )  # fmt: skip
    p.add_argument("--json", type=Path, default=None, help="also write the runs as JSON")
    p.set_defaults(func=_cmd_benchmark)

    p = sub.add_parser(
        "measure", help="measure the course's GPU figures here and record them (CUDA machines)"
    )
    p.add_argument(
        "--only", nargs="+", default=None, help="figure groups to run (default: all; see --list)"
    )
    p.add_argument("--list", action="store_true", help="list the figure groups and exit")
    p.add_argument(
        "--out", type=Path, default=None,
        help="records file (default on a GPU: images/recorded_figures.json; on a CPU: none)",
    )  # fmt: skip
    p.set_defaults(func=_cmd_measure)

    p = sub.add_parser(
        "verify-gpu",
        help="prove the course on a lent GPU: 1 preflight, CUDA tests, measure; 2 and 3 demo on CUDA",
    )
    p.add_argument("--part", type=int, required=True, choices=(1, 2, 3), help="which part to run")
    p.add_argument(
        "--out", type=Path, default=Path("verify-gpu"), help="folder for logs and summaries"
    )
    p.add_argument(
        "--assignment", nargs="+", default=None,
        help="parts 2 and 3: grade these assignments (e.g. those a stopped part did not reach)",
    )  # fmt: skip
    p.add_argument(
        "--only", nargs="+", default=None, help="part 1: measure only these figure groups"
    )
    p.add_argument("-k", dest="keyword", default=None, help="part 1: pytest -k for the CUDA tests")
    p.add_argument(
        "--budget", type=int, default=530,
        help="seconds the part may take (default 530: a lent machine allows 600 per command)",
    )  # fmt: skip
    p.add_argument(
        "--no-measure", action="store_true",
        help="part 1: only the preflight and the CUDA tests (measure run on its own, alone on the GPU)",
    )  # fmt: skip
    p.add_argument(
        "--workers", type=int, default=1,
        help="part 1: run the CUDA tests in this many processes (pytest-xdist)",
    )  # fmt: skip
    p.add_argument(
        "--jobs", type=int, default=None,
        help="parts 2 and 3: submissions graded at the same time (demo --jobs)",
    )  # fmt: skip
    p.set_defaults(func=_cmd_verify_gpu)

    p = sub.add_parser(
        "gpu-record",
        help="record what a lent GPU proved (images/gpu_verification.json); print the README's table",
    )
    p.add_argument(
        "--lease", type=Path, default=None,
        help="a folder .ci/gpu-lease filled (logs.tgz unpacked): append its run to the record",
    )  # fmt: skip
    p.add_argument("--commit", default=None, help="with --lease: the commit the machine ran")
    p.add_argument("--note", default=None, help="with --lease: what the files do not say")
    p.set_defaults(func=_cmd_gpu_record, cpu_ok=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run a command; return its exit status."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "takes_lab_args", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.lab_args = extra  # `start`: what goes to `jupyter lab`
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as err:  # MergeError too
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception as err:
        from grader.grading.release import PipelineError

        if not isinstance(err, PipelineError):
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2


def _exit_on_sigterm(signum, frame) -> None:
    # SIGTERM (kill, a scheduler's timeout) ends the command like Ctrl-C does: grading stops the
    # submissions it is running and their kernels instead of leaving them behind.
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    sys.exit(main())
