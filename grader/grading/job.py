"""Grade one submission: the work of one grading process.

:func:`grader.grading.grading.run_job_process` starts one such process per (student, assignment),
forked by Python's fork server (:mod:`multiprocessing`) after it has imported torch and nbgrader
once (:func:`run_forked`; ``python -m grader.grading.job JOB.json`` does the same by hand). It

1. takes the submission in (:mod:`grader.grading.intake`: only the notebook, rebuilt and matched to the
   release) and reads the student's own code for ways to reach the grading machinery
   (:mod:`grader.grading.scan`);
2. sets up a private nbgrader course in the job folder, where the student is called
   ``student`` whatever their folder is named (names with odd characters, or 250 bytes long,
   never reach nbgrader's paths or globs; the class run puts the real name back):

   ``gradebook.db``      a private gradebook holding only this assignment (and its hidden
                         tests); the main gradebook is never opened by a job
   ``submitted/student/<assignment>/``   the taken-in notebook
   ``autograded/student/<assignment>/``  nbgrader's output; the kernel works here
   ``sandbox/``          the kernel's home and caches (made anew at every kernel start)
   ``start/``            the empty folder the kernel starts in
   ``audit.fifo``        the pipe the guard writes to; ``audit.jsonl`` keeps what came through
   ``executed.json``     the ids of the executions that completed (checked against the audit)
   ``guard.json``        the guard's settings (a copy goes into ``sandbox/``, deleted once read)
   ``job.log``           the job's stdout and stderr, its kernels' too, capped

3. runs nbgrader's own ``autograde`` with :class:`grader.grading.execute.CourseExecute`, the kernel in
   the sandbox of :mod:`grader.grading.sandbox` under the policy of :mod:`grader.grading.isolation`, connected
   over Unix sockets, test cells judged in this process (:mod:`grader.grading.judge`), within
   the job's quotas (:mod:`grader.grading.quota`: a user and control groups of its own, a disk
   quota), the checks shown to the kernel as their kernel view (:mod:`grader.grading.kernel_view`);
4. writes a JSON :class:`grader.grading.report.Result`: scores per cell, notes, reasons for review
   (the audit channel verified: :func:`grader.grading.guard.verify_log`).

The process ends, with the kernels it started, when the command that started it dies.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

import nbformat
import psutil
from nbgrader.api import Gradebook
from nbgrader.coursedir import CourseDirectory

from grader.checks.common import GRADING_ENV
from grader.grading import guard, intake, kernel_view, quota, report, sandbox, scan
from grader.grading.config import course_config, scripts_on_path
from grader.grading.execute import DISK_NOTE, kill_processes
from grader.grading.isolation import IsolationPolicy
from grader.grading.options import GradingOptions
from grader.grading.report import Result, not_checked_cells
from grader.runtime import course

#: Environment variable holding the pid of the command that started a grading process.
PARENT_ENV = "GRADER_COMMAND_PID"
#: Environment variable naming the command's private temporary folder (the fork server's socket
#: is there): the job makes its kernel's socket folder inside it, and kernels never see it.
PRIVATE_TMP_ENV = "GRADER_PRIVATE_TMP"
#: Environment variable holding the time (``time.time()``) the command started a grading process.
STARTED_ENV = "GRADER_JOB_STARTED"
#: The student id inside a job's private course (the real one is put back by the class run).
ALIAS = "student"
#: The phases CourseExecute times inside nbgrader's autograde (see report.PHASES).
_IN_KERNELS = ("kernel start", "cells", "checks")
#: Error names a CourseExecute writes into a cell (see grader.grading.execute).
_COURSE_ERRORS = {"KernelDied", "NotRun"}
#: How an allocation refused by the kernel's memory limit (an address-space limit on a CPU
#: machine) reads in an error's message, besides a ``MemoryError``: torch's CPU allocator
#: ("DefaultCPUAllocator: can't allocate memory"), a failed ``mmap`` or ``fork`` (ENOMEM).
_REFUSED_ALLOCATION = ("can't allocate memory", "cannot allocate memory", "[errno 12]")


def kill_tree(pid: int, *, include_root: bool = True, wait_s: float = 10) -> None:
    """Kill every process ``pid`` started (kernels, sandboxes), and ``pid`` itself unless
    ``include_root`` is false; children first; then wait up to ``wait_s`` s for them to end."""
    try:
        root = psutil.Process(pid)
        procs = root.children(recursive=True)[::-1]
    except psutil.Error:
        return
    kill_processes([*procs, root] if include_root else procs, wait_s=wait_s)


def is_alive(proc: psutil.Process | None) -> bool:
    """Whether ``proc`` (pid and start time, so not a reused pid) still runs; a zombie (ended,
    not yet reaped by its parent) does not."""
    try:
        return proc is not None and proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _end_with_parent(poll_s: float = 1.0) -> None:
    """Stop this grading process, and the kernels it started, when the command that started it
    dies (killed, or its machine's session ended).

    The job runs in its own session so that an interrupt aimed at the command's terminal does
    not reach the kernels half-way through a cell; without this watch a killed command would
    leave its jobs grading on, and a resumed run would grade the same submission in the same
    staging folder beside them.
    """
    # The command passes its pid (this process may be forked by a fork server, not by the
    # command): watch that process itself, by pid and start time, so a reused pid does not
    # keep a job alive.
    try:
        parent = psutil.Process(int(os.environ.get(PARENT_ENV) or os.getppid()))
    except (psutil.Error, ValueError):
        parent = None

    def watch() -> None:
        while is_alive(parent):  # a killed command nobody has reaped yet is dead all the same
            time.sleep(poll_s)
        # no wait between the kill and the exit: while this thread waited, the grading would
        # notice its dead kernel, start a new one and could finish the submission
        kill_tree(os.getpid(), include_root=False, wait_s=0)
        os._exit(1)

    threading.Thread(target=watch, name="end-with-parent", daemon=True).start()


class AuditReader:
    """Reads the guard's records from the pipe into the audit log, across kernel restarts:
    at most ``max_bytes`` of records (each line at most 2,000 characters); past that, records
    are counted, not kept, and one last record says how many were dropped."""

    def __init__(self, fifo: Path, log: Path, max_bytes: int = 4 * 1024**2) -> None:
        self.fifo, self.log = Path(fifo), Path(log)
        self.max_bytes, self.dropped = max_bytes, 0
        if self.fifo.exists():
            self.fifo.unlink()
        os.mkfifo(self.fifo, 0o622)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="audit-reader", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        kept = 0
        with self.log.open("a") as out:
            while not self._stop.is_set():
                try:
                    with open(self.fifo, errors="replace") as pipe:  # blocks until a writer
                        for line in pipe:
                            line = line[:2000].rstrip("\n") + "\n"
                            if kept + len(line) > self.max_bytes:
                                self.dropped += 1
                                continue
                            kept += len(line)
                            out.write(line)
                            out.flush()
                except OSError:
                    time.sleep(0.1)
            if self.dropped:
                detail = f"{self.dropped} records dropped past the {self.max_bytes} byte cap"
                out.write(json.dumps({"kind": "flood", "detail": detail, "where": ""}) + "\n")

    def close(self) -> None:
        """Stop reading (unblocks a reader waiting for a writer)."""
        self._stop.set()
        try:
            fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        except OSError:
            pass
        self._thread.join(timeout=5)


def _job_config(job: dict, aid: str, options: GradingOptions, policy, sandbox_file):
    job_dir = Path(job["job_dir"])
    c = course_config(work=job_dir, submitted=job_dir / "submitted")
    c.CourseDirectory.root = str(job_dir)
    c.CourseDirectory.source_directory = "source"
    c.CourseDirectory.release_directory = "release"
    c.Execute.timeout = options.cell_timeout
    c.CourseExecute.notebook_timeout = options.notebook_timeout
    c.CourseExecute.memory_bytes = 0 if not options.has_gpu else int(options.memory_gb * 1e9)
    c.CourseExecute.output_bytes = options.output_kib * 1024
    c.CourseExecute.extra_arguments = [
        "--HistoryManager.hist_file=:memory:",
        "--IPKernelApp.exec_lines=import grader.grading.guard; "
        f"grader.grading.guard.install({str(policy.guard_path)!r}, consume=True)",
    ]
    c.CourseExecute.disk_bytes = policy.disk_bytes
    c.CourseExecute.disk_paths = policy.disk_paths()
    if options.cells in ("cuda", "no-cuda"):
        c.CourseExecute.judge_only = options.cells
    if policy.gpu_lock is not None:  # one lock per machine: jobs of a node take the GPU in turn
        c.CourseExecute.gpu_lock = str(policy.gpu_lock)
    if not options.rerun_demos:
        c.CourseExecute.skip_sources = course.demo_sources(course.read(course.source_path(aid)))
    c.SandboxKernelManager.sandbox_settings = str(sandbox_file)
    # Unix sockets: the kernel has no network of its own, and no other process can connect.
    c.SandboxKernelManager.transport = "ipc"
    c.SandboxKernelManager.ip = str(policy.sockets / "k")
    return c


def run_job(job_file: str | Path) -> dict:
    """Grade one submission as described by a job file; write and return the result dict."""
    _end_with_parent()
    job = json.loads(Path(job_file).read_text())
    options = GradingOptions(**job["options"])
    student, aid = job["student"], job["assignment"]
    result = Result(student, aid, "graded", digest=job["digest"])
    result.isolation = sandbox.isolation_label(options.isolate)
    start = time.monotonic()
    report.STOPWATCH = watch = report.Stopwatch()
    try:
        watch.add("start", time.time() - float(os.environ.get(STARTED_ENV) or time.time()))
    except ValueError:
        pass
    try:
        _grade_job(job, options, result)
    except Exception as exc:  # noqa: BLE001 - any failure is this submission's result
        result.status = "failed"
        result.notes.append(f"grading failed: {type(exc).__name__}: {exc}"[:500])
    result.seconds = round(time.monotonic() - start, 1)
    result.phases, result.check_seconds = watch.rounded(), dict(watch.checks)
    payload = asdict(result)
    Path(job["result"]).write_text(json.dumps(payload, indent=1))
    return payload


def run_forked(job_file: str, env: dict[str, str], log: str) -> None:
    """Entry point of a grading process forked by :func:`grader.grading.grading.run_job_process`: become
    a session of its own, send stdout and stderr (the kernels' too) to ``log``, take the
    command's environment ``env`` whole, and grade the job."""
    os.setsid()
    # multiprocessing made the fork server this process's default start method: put back the
    # platform's default, as in a fresh Python, or every DataLoader worker a check starts here
    # (08's reference timings) would go through a fork server of its own and start slowly
    multiprocessing.set_start_method(None, force=True)
    _open_capped_log(log, job_file)
    os.environ.clear()
    os.environ.update(env)
    try:
        run_job(job_file)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        _close_log()


#: The capped log this process writes to (set by :func:`_open_capped_log`).
_LOG: quota.CappedLog | None = None


def _open_capped_log(path: str, job_file: str) -> None:
    """Send this process's stdout and stderr (and so its kernels') to a :class:`quota.CappedLog`
    at ``path``: a flood keeps its first and last ``log_kib / 2`` KiB, and says how much it
    dropped between them."""
    global _LOG
    try:
        kib = int(json.loads(Path(job_file).read_text())["options"].get("log_kib") or 1024)
    except (OSError, ValueError, KeyError, TypeError):
        kib = 1024
    _LOG = quota.CappedLog(path, head=kib * 512, tail=kib * 512)
    os.dup2(_LOG.fd, 1)
    os.dup2(_LOG.fd, 2)


def _close_log() -> None:
    """Write the capped log's tail: this process's ends of the pipe are closed first (its
    kernels have ended with the grading)."""
    if _LOG is None:
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
    _LOG.close()


def _grade_job(job: dict, options: GradingOptions, result: Result) -> None:
    aid = result.assignment
    job_dir = Path(job["job_dir"])
    # the student copy the class run generated beside this assignment's template gradebook
    release = Path(job["template_db"]).parent / "release" / aid / f"{aid}.ipynb"
    release = release if release.is_file() else None  # else generated here from solutions/
    with report.STOPWATCH.timing("intake"):
        taken = intake.take_in(Path(job["submission"]), aid, release)
        result.notes += taken.notes
        result.review += taken.review
        if taken.notebook is None:
            result.status = "missing"
            return
        result.review += [f"code: {f}" for f in scan.scan_notebook(taken.notebook, aid, release)]
    began = time.monotonic()

    sub_dir = job_dir / "submitted" / ALIAS / aid
    sub_dir.mkdir(parents=True, exist_ok=True)
    nbformat.write(taken.notebook, str(sub_dir / f"{aid}.ipynb"))
    (job_dir / "source" / aid).mkdir(parents=True, exist_ok=True)
    shutil.copy(job["template_db"], job_dir / "gradebook.db")
    private = os.environ.get(PRIVATE_TMP_ENV) or None
    if private and not Path(private).is_dir():
        private = None
    isolated = options.isolate and sandbox.bwrap_available()
    user = quota.job_user(str(job_dir)) if isolated else None
    group = quota.JobGroup.create(f"gpu-course-{os.getpid()}", options.processes)
    if group is not None:
        group.join()
    report.STOPWATCH.add("setup", time.monotonic() - began)
    try:
        _grade_in_quota(job, options, result, private, user, group)
    finally:
        if group is not None:
            refused = group.refused_forks()
            if refused:
                result.notes.append(
                    f"started more than {options.processes} processes and threads at once (the "
                    f"limit per kernel): {refused} refused"
                )
            group.remove()
        if user is not None:
            user.release()


def _kernel_view(job: dict, job_dir: Path) -> dict[str, str]:
    """The kernel's view of the checks (:mod:`grader.grading.kernel_view`): the class's, made
    once by the class run (``job["kernel_view"]``), else made here for this job."""
    folder = Path(job.get("kernel_view") or "")
    index = folder / kernel_view.INDEX
    if job.get("kernel_view") and index.is_file():
        return json.loads(index.read_text())
    return kernel_view.build(job_dir / "kernel_view")


def _grade_in_quota(job, options, result, private, user, group) -> None:
    """Grade the taken-in notebook with the job's user and control groups (see
    :mod:`grader.grading.quota`)."""
    watch, began = report.STOPWATCH, time.monotonic()
    aid = result.assignment
    job_dir, work = Path(job["job_dir"]), Path(job["work"])
    autograded = job_dir / "autograded" / ALIAS / aid
    # short: a socket path has 107 bytes at most
    sockets = Path(tempfile.mkdtemp(prefix="gk-", dir=private))
    policy = IsolationPolicy(
        work=work,
        submitted_root=Path(job["submitted_root"]),
        job_dir=job_dir,
        notebook_dir=autograded,
        box=job_dir / "sandbox",
        sockets=sockets,
        options=options,
        seed_home=Path(job["seed_home"]) if job.get("seed_home") else None,
        private_tmp=Path(private) if private else None,
        gpu_lock=Path(job.get("gpu_lock") or Path(work) / "gpu.lock") if options.has_gpu else None,
        uid=user.uid if user is not None else 0,
        cgroup_procs=group.kernel_procs() if group is not None else [],
        kernel_view=_kernel_view(job, job_dir),
    )
    autograded.mkdir(parents=True, exist_ok=True)  # bound into the sandbox before nbgrader writes
    guard_file, sandbox_file = policy.write()
    settings = json.loads(guard_file.read_text())
    settings["assignment"] = aid
    settings["audit_key"] = audit_key = secrets.token_hex(16)
    guard_file.write_text(json.dumps(settings, indent=1))
    executed_log = job_dir / "executed.json"
    executed_log.unlink(missing_ok=True)
    audit = AuditReader(policy.audit_fifo, policy.audit_log)

    from nbgrader.apps import NbGraderAPI

    scripts_on_path()
    config = _job_config(job, aid, options, policy, sandbox_file)
    config.CourseExecute.executed_log = str(executed_log)
    os.environ[GRADING_ENV] = "1"
    watch.add("setup", time.monotonic() - began)
    in_kernels = watch.total(*_IN_KERNELS)
    began = time.monotonic()
    try:
        api = NbGraderAPI(CourseDirectory(config=config), config=config)
        outcome = api.autograde(aid, ALIAS, force=True, create=True)
    finally:
        audit.close()
        shutil.rmtree(sockets, ignore_errors=True)
        # nbgrader's own share: what autograde took beyond the kernels' phases it timed
        watch.add("nbgrader", time.monotonic() - began - (watch.total(*_IN_KERNELS) - in_kernels))
    began = time.monotonic()
    if not outcome.get("success"):
        lines = (outcome.get("error") or outcome.get("log") or "").strip().splitlines()
        raise RuntimeError("nbgrader autograde failed: " + " | ".join(lines[-4:]))
    _read_scores(job_dir / "gradebook.db", aid, ALIAS, result)
    graded_nb = autograded / f"{aid}.ipynb"
    if graded_nb.is_file():
        _read_outputs(course.read(graded_nb), result, options)
    records = guard.read_log(policy.audit_log)
    if not any(r.get("kind") == "installed" for r in records):
        result.review.append("guard: not confirmed (no start-up record in the audit log)")
    executed = json.loads(executed_log.read_text()) if executed_log.is_file() else []
    result.review += [f"guard: {p}" for p in guard.verify_log(records, audit_key, executed)]
    result.review += [
        f"run: {r.get('kind')}: {r.get('detail')} ({r.get('where')})".replace(" ()", "")
        for r in records
        if r.get("kind") not in ("installed", "cell")
    ]
    watch.add("report", time.monotonic() - began)


def _read_scores(db: Path, aid: str, student: str, result: Result) -> None:
    with Gradebook(f"sqlite:///{db}") as gb:
        sub = gb.find_submission(aid, student)
        for nb in sub.notebooks:
            for grade in nb.grades:
                score = float(grade.score or 0)
                result.cells[grade.name] = score
                if grade.max_score and score < grade.max_score:
                    result.failed_cells.append(grade.name)
        result.score, result.max_score = float(sub.score), float(sub.max_score)
    result.failed_cells.sort()


def memory_note(out: dict, options: GradingOptions) -> str:
    """What the report says about an error output that the memory limits caused, or ""."""
    ename, evalue = out.get("ename") or "", out.get("evalue") or ""
    text = evalue.lower()
    if "cuda out of memory" in text:
        return f"ran out of its GPU memory (its share of the GPU: {options.gpu_fraction:.0%})"
    if ename.endswith("MemoryError"):  # numpy's _ArrayMemoryError too
        raised = ename
    elif "raised memoryerror" in text:  # a check says what the student's function raised
        raised = "MemoryError"
    elif any(s in text for s in _REFUSED_ALLOCATION):
        raised = ename or "an error"
    else:
        return ""
    return f"ran out of its memory limit ({options.memory_gb:g} GB): {raised}"


#: How a fork or a new thread refused by the process limit reads in an error: Python's
#: ``BlockingIOError`` (EAGAIN) from ``fork``/``posix_spawn``, ``threading``'s and torch's.
_REFUSED_PROCESS = ("can't start new thread", "resource temporarily unavailable", "[errno 11]")


def process_note(out: dict, options: GradingOptions) -> str:
    """What the report says about an error output that the process limit caused, or ""."""
    text = f"{out.get('ename') or ''}: {out.get('evalue') or ''}".lower()
    if any(s in text for s in _REFUSED_PROCESS):
        return (
            f"hit its limit of {options.processes} processes and threads at once: "
            f"{out.get('ename') or 'an error'}"
        )
    return ""


def _read_outputs(nb, result: Result, options: GradingOptions | None = None) -> None:
    options = options or GradingOptions()
    if nb.metadata.get(DISK_NOTE):
        result.notes.append(str(nb.metadata[DISK_NOTE])[:300])
    result.not_checked = not_checked_cells(nb)
    result.deferred = [
        course.nbgrader_meta(c)["grade_id"]
        for c in nb.cells
        if course.nbgrader_meta(c).get("grade")
        and any(o.get("ename") == "Deferred" for o in c.get("outputs", []))
    ]
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        label = course.nbgrader_meta(cell).get("grade_id") or cell.get("id")
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error" and out.get("ename") in _COURSE_ERRORS:
                result.notes.append(f"{label}: {out.get('evalue')}")
            elif out.get("output_type") == "error" and out.get("ename") == "CellTimeoutError":
                result.notes.append(f"{label}: timed out and was interrupted")
            elif out.get("output_type") == "error" and memory_note(out, options):
                result.notes.append(f"{label}: {memory_note(out, options)}")
            elif out.get("output_type") == "error" and process_note(out, options):
                result.notes.append(f"{label}: {process_note(out, options)}")
            elif out.get("output_type") == "error" and course.nbgrader_meta(cell).get("solution"):
                result.notes.append(f"{label}: {out.get('ename')} when the cell ran")
            elif out.get("output_type") == "stream" and "[output truncated by" in out.get(
                "text", ""
            ):
                result.notes.append(f"{label}: output truncated")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m grader.grading.job JOB.json", file=sys.stderr)
        sys.exit(2)
    run_job(sys.argv[1])
    # The result is written and every kernel is shut down: skip the interpreter's teardown of
    # torch, nbgrader and the rest (about 1 s of CPU per submission on a slow core).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
