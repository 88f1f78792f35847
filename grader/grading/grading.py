"""Grade a whole class with nbgrader: in parallel, isolated, resumable, and with a clear result
for every submission, however broken or hostile.

The instructor's command (``python -m grader autograde``) calls :func:`grade_class`. For each
(student, assignment) it starts a **job**, a separate process that grades that one submission
(forked by Python's fork server, which has imported what a job needs once; :mod:`grader.grading.job`:
intake, sandboxed kernel, nbgrader's ``autograde``, checks judged in the job
process). The job writes a JSON result; this process then, one job at a time, copies the scores
into the main gradebook with nbgrader's ``Gradebook`` API under the student's real name
(flagged submissions get ``needs_manual_grade``, so nbgrader's formgrader lists them), copies the
autograded notebook for feedback, and records the submission's SHA-256 in
``<work>/grading-manifest.json``. A rerun skips submissions already graded with the same
content (``regrade=True`` grades everything again), so a crash in the middle of a class loses
nothing already graded.

Job folders are named by a hash of (student, assignment), so any folder name a student has
(odd characters, 250 bytes) is graded. What one job can do to another: nothing through the file
system, the network or the gradebook when bubblewrap isolates the kernels; they share the
machine's CPU, memory (each kernel capped) and GPU (each kernel's memory share capped; ``_cuda``
test cells take the GPU in turn).

The pieces: :mod:`grader.grading.options` (how), :mod:`grader.grading.job` (one submission),
:mod:`grader.grading.intake`, :mod:`grader.grading.isolation`, :mod:`grader.grading.report` (results and the report).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import multiprocessing
import multiprocessing.context
import multiprocessing.util
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
from nbgrader.api import Gradebook
from nbgrader.coursedir import CourseDirectory
from tqdm.auto import tqdm
from traitlets.config import Config

from grader.checks.common import GRADING_ENV
from grader.grading import kernel_view
from grader.grading.config import course_config
from grader.grading.job import (
    ALIAS,
    PARENT_ENV,
    PRIVATE_TMP_ENV,
    STARTED_ENV,
    is_alive,
    kill_tree,
    run_forked,
)
from grader.grading.options import GradingOptions
from grader.grading.release import generate
from grader.grading.report import Result, format_summary, write_report_csv

__all__ = [
    "MANIFEST",
    "Job",
    "LocalEngine",
    "load_manifest",
    "save_manifest",
    "shard_of",
    "write_result",
    "GradingOptions",
    "Result",
    "format_summary",
    "grade_class",
    "job_folder_name",
    "submission_digest",
    "write_report_csv",
]

MANIFEST = "grading-manifest.json"


# --------------------------------------------------------------------------- helpers
def submission_digest(folder: Path) -> str:
    """SHA-256 over the submission folder's files (names and contents; links by their target
    text, never followed)."""
    h = hashlib.sha256()
    folder = Path(folder)
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d != ".ipynb_checkpoints")
        for name in sorted(files):
            path = Path(root) / name
            h.update(str(path.relative_to(folder)).encode(errors="surrogateescape") + b"\0")
            try:
                if path.is_symlink():
                    h.update(b"link:" + os.readlink(path).encode(errors="surrogateescape"))
                elif path.is_file():
                    with path.open("rb") as f:
                        for chunk in iter(lambda: f.read(1 << 20), b""):
                            h.update(chunk)
            except OSError:
                h.update(b"unreadable")
    return h.hexdigest()


def shard_of(student: str, shards: int) -> int:
    """The shard (0 to ``shards`` - 1) a student's submissions are graded in: stable across
    runs, machines and Python versions (a SHA-256 of the student id), so every shard of a class
    can be computed independently and each student lands in exactly one."""
    digest = hashlib.sha256(student.encode(errors="surrogateescape")).digest()
    return int.from_bytes(digest[:8], "big") % shards


def job_folder_name(student: str, assignment: str) -> str:
    """A staging folder name for any student name: a readable prefix and a hash."""
    digest = hashlib.sha256(f"{student}\0{assignment}".encode(errors="surrogateescape")).hexdigest()
    readable = re.sub(r"[^A-Za-z0-9_-]", "_", student)[:32]
    return f"{readable}-{digest[:12]}__{assignment}"


# --------------------------------------------------------------------------- a class
def _seed_caches(aids: list[str], root: Path) -> Path | None:
    """Warm compiler caches once for the class, in a trusted process of its own: a chapter
    module may define ``warm_caches()`` (what its notebook and checks compile: 09's Inductor
    programs, 12's notebook kernels), and for those assignments the reference solution is
    then graded in that process (:func:`grader.grading.judge.run_test_cells`), so Inductor's
    and Triton's caches also hold what the checks compile of the reference: a submission that
    compiles the same kernel or graph reads it back instead of compiling it again (12's
    kernels for sm_90 and sm_80 take 5 to 15 s each on 2 cores when cold). Each job copies the
    result into its own kernel's folder, so no submission can alter what another one reads.
    Returns the seed's home folder, or None when no assignment needs one or warming failed
    (grading is then only slower)."""
    import importlib

    needed = [
        a for a in aids if hasattr(importlib.import_module(f"grader.checks.ch{a}"), "warm_caches")
    ]
    if not needed:
        return None
    home = root / "home"
    cache = home / ".cache"
    if (root / "done").is_file():
        return home
    shutil.rmtree(root, ignore_errors=True)
    cache.mkdir(parents=True)
    env = dict(
        os.environ,
        TORCHINDUCTOR_CACHE_DIR=str(cache / "torchinductor"),
        TRITON_CACHE_DIR=str(cache / "triton"),
    )
    code = "from grader.grading import judge; " + "; ".join(
        f"import grader.checks.ch{a} as m; m.warm_caches(); judge.run_test_cells({a!r}, None)"
        for a in needed
    )
    try:
        subprocess.run(
            [sys.executable, "-c", code], env=env, cwd=root, check=True, capture_output=True,
            timeout=600,
        )  # fmt: skip
    except (subprocess.SubprocessError, OSError):
        return None
    (root / "done").write_text("ok\n")
    return home


def _template_gradebooks(aids: list[str], root: Path) -> dict[str, Path]:
    """A gradebook per assignment holding only that assignment (copied into each job)."""
    out = {}
    for aid in aids:
        folder = root / aid
        folder.mkdir(parents=True, exist_ok=True)
        db = folder / "gradebook.db"
        if db.exists():
            db.unlink()
        c = course_config(work=folder)
        generate(aid, folder / "release", config=c, use_db=True)
        out[aid] = db
    return out


def write_result(result: Result, config: Config, autograded: Path | None) -> None:
    """Write one submission's scores into the gradebook of ``config`` under the student's real
    name (flagged ones marked as needing manual grading), and copy its autograded folder."""
    aid, student = result.assignment, result.student
    timestamp = _parse_timestamp(result.timestamp)
    with Gradebook(config.CourseDirectory.db_url, config.CourseDirectory.course_id) as gb:
        gb.update_or_create_student(student)
        kwargs = {"timestamp": timestamp} if timestamp else {}
        sub = gb.update_or_create_submission(aid, student, **kwargs)
        for nb in sub.notebooks:
            for grade in nb.grades:
                grade.auto_score = result.cells.get(grade.name, 0.0)
                grade.needs_manual_grade = result.flagged
        gb.db.commit()
    dest = Path(config.CourseDirectory.autograded_directory) / student / aid
    if autograded is not None and Path(autograded).is_dir():
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(autograded, dest, ignore=shutil.ignore_patterns("__pycache__"))


def _parse_timestamp(text: str):
    if not text:
        return None
    from nbgrader.utils import parse_utc

    try:
        return parse_utc(text)
    except Exception:  # noqa: BLE001 - a malformed timestamp is left out
        return None


def load_manifest(work: Path) -> dict:
    """The manifest of a working folder: ``student/assignment`` -> result dict."""
    path = work / MANIFEST
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}


def save_manifest(work: Path, manifest: dict) -> None:
    """Write the manifest atomically."""
    tmp = work / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, work / MANIFEST)  # atomic: a crash leaves the old or the new file


#: Grading processes running now (killed together if the command is stopped).
_LIVE: set[psutil.Process] = set()
#: Modules a grading process needs, imported once by the fork server that starts them (torch,
#: nbgrader, nbformat: about 4 s of CPU per process on a slow core). Each job is still a process
#: of its own, forked from the server's state after these imports, never from one that graded.
FORKSERVER_PRELOAD = [
    "grader.grading.job",
    "grader.grading.execute",
    "grader.grading.judge",
    "nbgrader.apps",
]
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()


def _stop_all_jobs() -> None:
    """Kill every running grading process and its kernels; start no new one."""
    with _LIVE_LOCK:
        _STOPPING.set()
        live = list(_LIVE)
    for proc in live:
        if is_alive(proc):
            kill_tree(proc.pid)


def _job_processes() -> multiprocessing.context.BaseContext:
    """Python's fork server (:mod:`multiprocessing`), preloaded with what a job imports."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(FORKSERVER_PRELOAD)
    return context


def run_job_process(job_file: Path, timeout_s: float) -> dict:
    """Grade one job in a process of its own (:func:`grader.grading.job.run_forked`, forked by the fork
    server; its own session; killed with its kernels after ``timeout_s`` s or when the command
    is stopped) and return its result dict (a *failed* result when it gave none). The process's
    output goes to ``job.log`` in the job folder.

    Raises:
        RuntimeError: the command is stopping (no new job starts).
    """
    job = json.loads(job_file.read_text())
    log_file = Path(job["job_dir"]) / "job.log"
    env = dict(
        os.environ,
        **{
            GRADING_ENV: "1",
            PARENT_ENV: str(os.getpid()),
            # this process's private temporary folder (mode 0700), where the fork server's
            # socket is: the job puts its kernel sockets there too and hides it from kernels
            PRIVATE_TMP_ENV: multiprocessing.util.get_temp_dir(),
            STARTED_ENV: repr(time.time()),
        },
    )
    if _STOPPING.is_set():
        raise RuntimeError("grading was stopped")
    proc = _job_processes().Process(
        target=run_forked, args=(str(job_file), env, str(log_file)), name="grader.grading.job"
    )
    # outside the lock: the first start waits for the fork server's imports (seconds), and a
    # stop must not wait for that
    proc.start()
    try:
        handle = psutil.Process(proc.pid)  # pid and start time: safe from a reused pid
    except psutil.Error:
        handle = None  # already ended
    with _LIVE_LOCK:
        if handle is not None:
            _LIVE.add(handle)
        stopping = _STOPPING.is_set()
    if stopping:
        kill_tree(proc.pid)
    started = time.monotonic()
    timed_out = False
    try:
        proc.join(timeout_s)
        if is_alive(handle):
            # past the time limit, or the fork server died (join returns then, while its
            # forked job still runs): either way the job and its kernels are killed
            timed_out = time.monotonic() - started >= timeout_s
            kill_tree(proc.pid)
            proc.join(10)
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(handle)
    try:
        log = log_file.read_text(errors="replace")[-3000:]
    except OSError:
        log = ""
    result_file = Path(job["result"])
    if not timed_out and result_file.is_file():
        return json.loads(result_file.read_text())
    why = (
        f"the grading process did not finish within {timeout_s:.0f} s"
        if timed_out
        else f"the grading process ended with status {proc.exitcode}: {log.strip()[-300:]}"
    )
    return asdict(
        Result(job["student"], job["assignment"], "failed", notes=[why], digest=job["digest"])
    )


@dataclass
class Job:
    """One submission to grade: where it is and where its job folder and job file are."""

    student: str
    assignment: str
    folder: Path
    job_dir: Path
    job_file: Path


class LocalEngine:
    """Grades jobs as processes on this machine, ``jobs`` at a time (the default engine)."""

    name = "local"

    def __init__(self, jobs: int) -> None:
        self.jobs = max(1, jobs)
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def describe(self) -> str:
        """For the progress bar."""
        return f"{self.jobs} at a time"

    def warm(self) -> None:
        """Start the fork server now: its imports (torch and nbgrader, about 3 s on 2 cores)
        then overlap the class's preparation (templates, compile caches, kernel view) instead
        of delaying the first job."""
        from multiprocessing import forkserver

        _job_processes()
        forkserver.ensure_running()

    def run(self, jobs: list[Job], timeout_s: float):
        """Yield ``(job, result dict)`` as jobs finish."""
        _STOPPING.clear()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.jobs)
        try:
            futures = {self._pool.submit(run_job_process, j.job_file, timeout_s): j for j in jobs}
            for future in concurrent.futures.as_completed(futures):
                yield futures[future], future.result()
        except BaseException:
            # Ctrl-C or SIGTERM while waiting here: kill the running jobs before waiting for
            # their threads (they return as soon as their processes are gone).
            self.stop()
            raise
        finally:
            self._pool.shutdown(wait=True)

    def stop(self) -> None:
        """Stop at once: cancel queued jobs, kill running ones with their kernels."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        _stop_all_jobs()


def grade_class(
    submitted: Path,
    work: Path,
    pairs: list[tuple[str, str]],
    options: GradingOptions,
    *,
    progress: bool = True,
    engine=None,
) -> list[Result]:
    """Grade every (student, assignment) pair of ``submitted`` into the gradebook of ``work``.

    Args:
        submitted: ``<student>/<assignment>/`` folders.
        work: Instructor working folder: ``gradebook.db`` (its assignments already
            registered), ``autograded/``, the manifest and ``staging/``.
        pairs: What to grade.
        options: See :class:`GradingOptions`.
        progress: Show a progress bar.
        engine: What runs the jobs: :class:`LocalEngine` (default, ``options.jobs`` at a
            time) or :class:`grader.grading.ray_engine.RayEngine` (a Ray cluster).

    Returns:
        One :class:`Result` per pair, in the order of ``pairs``.
    """
    work, submitted = Path(work).resolve(), Path(submitted).resolve()
    config = course_config(work, submitted)
    staging = work / "staging"
    engine = engine or LocalEngine(options.jobs)
    if hasattr(engine, "warm"):
        engine.warm()
    if getattr(engine, "resolves_gpu_here", True):
        options.gpu = options.has_gpu  # resolved here: the grading processes need not import torch
    manifest = {} if options.regrade else load_manifest(work)
    aids = sorted({a for _, a in pairs})
    templates = _template_gradebooks(aids, staging / "_templates")
    seed_home = _seed_caches(aids, staging / "_seed")
    views = staging / "_kernel_view"
    shutil.rmtree(views, ignore_errors=True)
    kernel_view.build(views)  # once for the class: the checks as every kernel sees them
    results: dict[tuple[str, str], Result] = {}
    todo = []
    for student, aid in pairs:
        folder = submitted / student / aid
        digest = submission_digest(folder)
        done = manifest.get(f"{student}/{aid}")
        if done and done.get("digest") == digest and done.get("status") in ("graded", "missing"):
            previous = Result(**done)
            if previous.status != "missing":
                previous.status = "unchanged"
            previous.notes = [*previous.notes, "graded earlier with the same content (kept)"]
            results[student, aid] = previous
            continue
        job_dir = staging / job_folder_name(student, aid)
        if job_dir.exists():
            shutil.rmtree(job_dir)
        job_dir.mkdir(parents=True)
        job_file = job_dir / "job.json"
        job_file.write_text(
            json.dumps(
                {
                    "student": student,
                    "assignment": aid,
                    "submission": str(folder),
                    "submitted_root": str(submitted),
                    "job_dir": str(job_dir),
                    "work": str(work),
                    "digest": digest,
                    "template_db": str(templates[aid]),
                    "seed_home": str(seed_home) if seed_home else None,
                    "kernel_view": str(views),
                    "result": str(job_dir / "result.json"),
                    "options": asdict(options),
                }
            )
        )
        todo.append(Job(student, aid, folder, job_dir, job_file))
    # the job's own limit: the notebook's, what it may wait for its turns on the GPU (shared by
    # the jobs of a machine; the wait moves the notebook's deadline), and time to start and end
    from grader.grading.execute import CourseExecute

    waits = CourseExecute.gpu_lock_timeout.default_value if options.gpu is not False else 0
    timeout = options.notebook_timeout + waits + 600
    bar = tqdm(total=len(todo), desc=f"autograde ({engine.describe()})", unit="notebook",
               disable=not progress or not todo)  # fmt: skip
    try:
        for job, payload in engine.run(todo, timeout):
            result = Result(**payload)
            if (job.student, job.assignment) in results:
                continue  # a retried job that finished twice: the first result counts
            if result.status in ("graded", "missing"):
                stamp = CourseDirectory(config=config).get_existing_timestamp(str(job.folder))
                result.timestamp = stamp.isoformat() if stamp else ""
                write_result(result, config, job.job_dir / "autograded" / ALIAS / job.assignment)
                manifest[f"{job.student}/{job.assignment}"] = asdict(result)
                save_manifest(work, manifest)
                with contextlib.suppress(OSError):
                    shutil.rmtree(job.job_dir / "sandbox" / "home")  # caches: large, not needed
            results[job.student, job.assignment] = result
            bar.update(1)
            bar.set_postfix_str(f"{job.student}/{job.assignment}: {result.status}", refresh=True)
    except BaseException:
        # Ctrl-C or SIGTERM (see grader.__main__): stop the running jobs and their kernels now
        # rather than grading the rest of the class; the manifest keeps what was merged.
        engine.stop()
        raise
    bar.close()
    return [results[p] for p in pairs]
