"""Instructor command line: ``python -m grader <command>``.

Commands:
  release    regenerate notebooks/ from solutions/ (``--check``: only report differences)
  clean      strip outputs and execution metadata from the sources in solutions/
  autograde  autograde a folder of submissions (<student>/<assignment>/<assignment>.ipynb)
  feedback   generate HTML feedback for everything autograded
  export     export all grades to CSV
  demo       run the whole flow on the bundled sample class and check every score

Exit status: 0 on success, 1 when a check or a grading step failed, 2 for usage errors
and refusals (e.g. grading CUDA checks on a machine without a GPU).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from . import demo, pipeline


def _cmd_release(args) -> int:
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
    changed = pipeline.clean_sources(args.assignments or None)
    print(f"cleaned: {', '.join(changed)}" if changed else "sources were already clean.")
    return 0


def _cmd_autograde(args) -> int:
    if not torch.cuda.is_available() and args.cpu_ok:
        print("No CUDA GPU: CUDA-only cells score 0 and are listed as not checked (--cpu-ok).")
    outcomes = pipeline.autograde(
        args.submissions, work=args.work, assignment_ids=args.assignment or None, cpu_ok=args.cpu_ok
    )
    if not outcomes:
        print("no submissions found.")
        return 1
    print(pipeline.format_report(outcomes))
    failed = [o for o in outcomes if o.status != "graded"]
    if failed:
        print(f"\n{len(failed)} submission(s) could not be autograded; see the notes above.")
        return 1
    return 0


def _cmd_feedback(args) -> int:
    written = pipeline.feedback(args.work)
    print(
        f"wrote {len(written)} feedback file(s) under {Path(written[0]).parents[2] if written else '-'}"
    )
    return 0


def _cmd_export(args) -> int:
    print(f"grades written to {pipeline.export_csv(args.to, args.work)}")
    return 0


def _cmd_demo(args) -> int:
    gpu = torch.cuda.is_available()
    print(
        "Demo: autograding the bundled sample class (reference, blank copy, typical mistakes, "
        "correct answers written differently) with nbgrader."
    )
    if not gpu:
        print(
            "No CUDA GPU here: CUDA-only cells score 0 for every student and are listed as not checked."
        )
    results = demo.run_demo(args.assignment or None, keep=args.keep, feedback=not args.no_feedback)
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m grader``."""
    parser = argparse.ArgumentParser(
        prog="python -m grader",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

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
    p.set_defaults(func=_cmd_autograde)

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
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run a command; return its exit status."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (pipeline.PipelineError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
