"""Grade a whole class with nbgrader: in parallel, isolated, resumable, and with a clear result
for every submission, however broken or hostile.

The instructor's command (``python -m grader autograde``) calls :func:`grade_class`. For each
(student, assignment) it starts a **job**: a separate Python process
(``python -m grader.grading JOB.json``) that grades that one submission with nbgrader's own
``autograde`` in a private course folder:

``<work>/staging/<student>__<assignment>/``
    ``gradebook.db``      a private gradebook holding only this assignment (and its hidden
                          tests); the main gradebook is never opened by a job
    ``submitted/...``     a copy of the submission (a renamed notebook gets the expected name)
    ``autograded/...``    nbgrader's output; the kernel runs here
    ``sandbox/``          the kernel's home, caches and the guard's audit log

The kernel is started in the sandbox of :mod:`grader.sandbox` with the guard of
:mod:`grader.guard`, and executed by :class:`grader.execute.CourseExecute` (per-cell timeout,
a deadline per notebook, recovery from a dead or stuck kernel, a memory limit). Before grading,
:mod:`grader.scan` reads the student's own cells for code that could reach the grading
machinery. The job writes a JSON result; the parent process then, one job at a time, copies the
scores into the main gradebook with nbgrader's ``Gradebook`` API (flagged submissions get
``needs_manual_grade``, so nbgrader's formgrader lists them), copies the autograded notebook for
feedback, and records the submission's SHA-256 in ``<work>/grading-manifest.json``. A rerun skips
submissions already graded with the same content (``regrade=True`` grades everything again),
so a crash in the middle of a class loses nothing already graded.

What one job can do to another: nothing through the file system or the gradebook when
bubblewrap isolates the kernels; they share the machine's CPU, memory (each kernel capped) and
GPU memory (each kernel's share capped).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
import psutil
from nbgrader.api import Gradebook
from nbgrader.coursedir import CourseDirectory
from tqdm.auto import tqdm
from traitlets.config import Config

from . import course, guard, sandbox, scan
from .common import GRADING_ENV
from .execute import CourseExecute, kill_processes

MANIFEST = "grading-manifest.json"
#: Environment variable holding the pid of the command that started a grading process.
_PARENT_ENV = "GRADER_COMMAND_PID"
#: Error names a CourseExecute writes into a cell (see grader.execute).
_COURSE_ERRORS = {"KernelDied", "NotRun"}


@dataclass
class GradingOptions:
    """How to grade a class.

    Attributes:
        jobs: Submissions graded at the same time (separate processes and kernels).
        cell_timeout: Seconds one cell may run before it is interrupted (scores 0).
        notebook_timeout: Seconds for a whole notebook; cells not reached score 0.
        memory_gb: Memory limit of each kernel, GB (address space on a CPU-only machine,
            resident memory on a GPU machine).
        gpu_fraction: Share of each GPU's memory one kernel may use.
        output_kib: Printed output kept per cell, KiB.
        isolate: Run kernels in the bubblewrap sandbox when it is available.
        regrade: Grade again submissions already graded with the same content.
        cpu_ok: Without a GPU, accept that CUDA-only cells score 0.
        rerun_demos: Re-run unchanged ``demo``-tagged teaching cells too (slower; the scores
            are the same, as those cells define nothing the checks read).
    """

    jobs: int = 1
    cell_timeout: int = 600
    notebook_timeout: int = 3600
    memory_gb: float = 8.0
    gpu_fraction: float = 1.0
    output_kib: int = 512
    isolate: bool = True
    regrade: bool = False
    cpu_ok: bool = False
    rerun_demos: bool = False
    gpu: bool | None = None

    @property
    def has_gpu(self) -> bool:
        """Whether this machine grades with a CUDA GPU (``gpu``, else asked of torch once)."""
        if self.gpu is None:
            import torch

            self.gpu = torch.cuda.is_available()
        return self.gpu

    @classmethod
    def for_machine(cls, jobs: int | None = None, **overrides) -> GradingOptions:
        """Defaults for this machine: one job per two cores (at most 8; at most 4 on a GPU,
        which the jobs share), memory split between the jobs (at most 16 GB each), GPU memory
        split between the jobs."""
        cores = os.cpu_count() or 1
        import torch

        gpu = torch.cuda.is_available()
        if jobs is None:
            jobs = max(1, min(8 if not gpu else 4, cores // 2 or 1))
        total_gb = psutil.virtual_memory().total / 1e9
        memory = min(16.0, max(2.0, 0.8 * total_gb / jobs))
        options = cls(
            jobs=jobs, memory_gb=round(memory, 1), gpu_fraction=0.9 / jobs if gpu else 1, gpu=gpu
        )
        for key, value in overrides.items():
            if value is not None:
                setattr(options, key, value)
        return options


@dataclass
class Result:
    """What happened to one submission.

    ``status`` is ``"graded"``, ``"missing"`` (no notebook), ``"unchanged"`` (graded earlier
    with the same content; scores from then) or ``"failed"`` (the grading itself failed: not
    written to the gradebook, retried on the next run).
    """

    student: str
    assignment: str
    status: str
    score: float = 0.0
    max_score: float = 0.0
    cells: dict[str, float] = field(default_factory=dict)  # grade id -> score
    failed_cells: list[str] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    review: list[str] = field(default_factory=list)
    seconds: float = 0.0
    digest: str = ""
    isolation: str = ""

    @property
    def flagged(self) -> bool:
        """True when a person should look at the submission before trusting its score."""
        return bool(self.review)


# --------------------------------------------------------------------------- helpers
def submission_digest(folder: Path) -> str:
    """SHA-256 over the submission folder's files (names and contents)."""
    h = hashlib.sha256()
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        if ".ipynb_checkpoints" in path.parts:
            continue
        h.update(str(path.relative_to(folder)).encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def find_notebook(folder: Path, assignment: str) -> tuple[Path | None, str]:
    """The submission's notebook, and a note when it is not ``<assignment>.ipynb``."""
    expected = folder / f"{assignment}.ipynb"
    if expected.is_file():
        return expected, ""
    others = sorted(p for p in folder.glob("*.ipynb") if p.is_file() and not p.name.startswith("."))
    if len(others) == 1:
        return others[0], f"renamed notebook: graded {others[0].name} as {expected.name}"
    if others:
        names = ", ".join(p.name for p in others)
        return None, f"no {expected.name}; several other notebooks ({names}): not graded"
    return None, f"no notebook in the submission (expected {expected.name})"


def _job_config(
    job_dir: Path, aid: str, options: GradingOptions, sandbox_file: Path, guard_file: Path
):
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.preprocessors import (
        AssignLatePenalties,
        CheckCellMetadata,
        IgnorePattern,
        LimitOutput,
        SaveAutoGrades,
    )

    from .pipeline import course_config

    c = course_config(work=job_dir, submitted=job_dir / "submitted")
    c.CourseDirectory.root = str(job_dir)
    c.CourseDirectory.source_directory = "source"
    c.CourseDirectory.release_directory = "release"
    # nbgrader's list, with CourseExecute in place of Execute
    c.Autograde.autograde_preprocessors = [
        CourseExecute,
        IgnorePattern,
        ClearMetadataPreprocessor,
        LimitOutput,
        SaveAutoGrades,
        AssignLatePenalties,
        CheckCellMetadata,
    ]
    c.Execute.timeout = options.cell_timeout
    c.CourseExecute.notebook_timeout = options.notebook_timeout
    c.CourseExecute.memory_bytes = 0 if not options.has_gpu else int(options.memory_gb * 1e9)
    c.CourseExecute.extra_arguments = [
        "--HistoryManager.hist_file=:memory:",
        f"--IPKernelApp.exec_lines=import grader.guard; grader.guard.install({str(guard_file)!r})",
    ]
    if not options.rerun_demos:
        c.CourseExecute.skip_sources = course.demo_sources(course.read(course.source_path(aid)))
    c.SandboxKernelManager.sandbox_settings = str(sandbox_file)
    return c


def _protected_paths(work: Path, submitted: Path) -> list[str]:
    """What a kernel must not see: the course's answers and the instructor's data."""
    package = Path(course.__file__).resolve().parent
    return [
        str(course.SOLUTIONS),
        str(course.REPO / ".git"),
        str(package / "samples"),
        str(Path(work).resolve()),
        str(Path(submitted).resolve()),
        str(course.WORK.resolve()),
    ]


# --------------------------------------------------------------------------- one job
def run_job(job_file: str | Path) -> dict:
    """Grade one submission as described by a job file; write and return the result dict.

    Runs in its own process (``python -m grader.grading JOB.json``).
    """
    _end_with_parent()
    job = json.loads(Path(job_file).read_text())
    options = GradingOptions(**job["options"])
    student, aid = job["student"], job["assignment"]
    job_dir, work = Path(job["job_dir"]), Path(job["work"])
    source_folder = Path(job["submission"])
    result = Result(student, aid, "graded", digest=job["digest"])
    result.isolation = sandbox.isolation_label(options.isolate)
    start = time.monotonic()
    try:
        _grade_job(job, options, result, job_dir, work, source_folder)
    except Exception as exc:  # noqa: BLE001 - any failure is this submission's result
        result.status = "failed"
        result.notes.append(f"grading failed: {type(exc).__name__}: {exc}"[:500])
    result.seconds = round(time.monotonic() - start, 1)
    payload = asdict(result)
    Path(job["result"]).write_text(json.dumps(payload, indent=1))
    return payload


def _kill_tree(pid: int, *, include_root: bool = True) -> None:
    """Kill every process ``pid`` started (kernels, sandboxes), and ``pid`` itself unless
    ``include_root`` is false; children first."""
    try:
        root = psutil.Process(pid)
        procs = root.children(recursive=True)[::-1]
    except psutil.Error:
        return
    kill_processes([*procs, root] if include_root else procs, wait_s=10)


def _end_with_parent(poll_s: float = 1.0) -> None:
    """Stop this grading process, and the kernels it started, when the command that started it
    dies (killed, or its machine's session ended).

    The job runs in its own session so that an interrupt aimed at the command's terminal does
    not reach the kernels half-way through a cell; without this watch a killed command would
    leave its jobs grading on, and a resumed run would grade the same submission in the same
    staging folder beside them.
    """
    # The command passes its pid: by the time this process has imported what it needs, the
    # command may already be dead and this process adopted by init.
    parent = int(os.environ.get(_PARENT_ENV) or os.getppid())

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        _kill_tree(os.getpid(), include_root=False)
        os._exit(1)

    threading.Thread(target=watch, name="end-with-parent", daemon=True).start()


def _grade_job(job, options, result, job_dir: Path, work: Path, source_folder: Path) -> None:
    student, aid = result.student, result.assignment
    notebook, note = find_notebook(source_folder, aid)
    if note:
        result.notes.append(note)
    if notebook is None:
        result.status = "missing"
        return
    try:
        submitted_nb = nbformat.read(str(notebook), as_version=4)
    except Exception as exc:  # noqa: BLE001
        result.status = "missing"
        result.notes.append(f"not a readable notebook ({type(exc).__name__})")
        return
    result.review += [f"code: {f}" for f in scan.scan_notebook(submitted_nb, aid)]
    result.notes += _test_cell_changes(submitted_nb, aid)

    sub_dir = job_dir / "submitted" / student / aid
    shutil.copytree(source_folder, sub_dir, ignore=shutil.ignore_patterns("*.ipynb", ".*"))
    nbformat.write(submitted_nb, str(sub_dir / f"{aid}.ipynb"))
    (job_dir / "source" / aid).mkdir(parents=True, exist_ok=True)
    shutil.copy(job["template_db"], job_dir / "gradebook.db")
    autograded = job_dir / "autograded" / student / aid
    box = job_dir / "sandbox"
    box.mkdir(parents=True, exist_ok=True)
    if job.get("seed_home"):  # warm compiler caches, a private copy
        shutil.copytree(job["seed_home"], box / "home", dirs_exist_ok=True)
    audit = box / "audit.jsonl"
    gpu = options.has_gpu
    settings = sandbox.SandboxSettings(
        staging=str(box),
        cwd=str(autograded),
        writable=[str(autograded)],
        hide=_protected_paths(work, Path(job["submitted_root"])),
        expose_read_only=[str(course.source_path(aid)), str(job_dir / "guard.json")],
        memory_bytes=0 if gpu else int(options.memory_gb * 1e9),
        isolate=options.isolate,
    ).write(job_dir / "sandbox.json")
    guard_file = guard.GuardSettings(
        assignment=aid,
        audit_log=str(audit),
        blocked=_protected_paths(work, Path(job["submitted_root"])),
        writable=[str(autograded), str(box), "/tmp", "/dev/shm"],
        protected_writes=[str(course.REPO), str(work.resolve())],
        student_dirs=[str(autograded)],
        own_dirs=[str(box)],
        gpu_fraction=options.gpu_fraction,
        output_bytes=options.output_kib * 1024,
    ).write(job_dir / "guard.json")

    from nbgrader.apps import NbGraderAPI

    from .pipeline import _scripts_on_path

    _scripts_on_path()
    config = _job_config(job_dir, aid, options, settings, guard_file)
    os.environ[GRADING_ENV] = "1"
    api = NbGraderAPI(CourseDirectory(config=config), config=config)
    outcome = api.autograde(aid, student, force=True, create=True)
    if not outcome.get("success"):
        lines = (outcome.get("error") or outcome.get("log") or "").strip().splitlines()
        raise RuntimeError("nbgrader autograde failed: " + " | ".join(lines[-4:]))
    _read_scores(job_dir / "gradebook.db", aid, student, result)
    graded_nb = autograded / f"{aid}.ipynb"
    if graded_nb.is_file():
        _read_outputs(course.read(graded_nb), result)
    records = guard.read_log(audit)
    if not any(r.get("kind") == "installed" for r in records):
        result.review.append("guard: not confirmed (no start-up record in the audit log)")
    result.review += [
        f"run: {r['kind']}: {r['detail']} ({r['where']})".replace(" ()", "")
        for r in records
        if r.get("kind") != "installed"
    ]


def _test_cell_changes(nb, aid: str) -> list[str]:
    released = {
        t.grade_id: t.source for t in course.test_cells(course.read(course.release_path(aid)))
    }
    submitted = {t.grade_id: t.source for t in course.test_cells(nb)}
    notes = []
    missing = sorted(set(released) - set(submitted))
    edited = sorted(g for g in released if g in submitted and submitted[g] != released[g])
    if missing:
        notes.append(f"deleted test cells restored from the gradebook: {', '.join(missing)}")
    if edited:
        notes.append(f"edited test cells restored from the gradebook: {', '.join(edited)}")
    return notes


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


def _read_outputs(nb, result: Result) -> None:
    from .pipeline import not_checked_cells

    result.not_checked = not_checked_cells(nb)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        label = course.nbgrader_meta(cell).get("grade_id") or cell.get("id")
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error" and out.get("ename") in _COURSE_ERRORS:
                result.notes.append(f"{label}: {out.get('evalue')}")
            elif out.get("output_type") == "error" and out.get("ename") == "CellTimeoutError":
                result.notes.append(f"{label}: timed out and was interrupted")
            elif out.get("output_type") == "error" and (
                out.get("ename") == "MemoryError" or "raised MemoryError" in out.get("evalue", "")
            ):
                result.notes.append(f"{label}: ran out of memory (MemoryError)")
            elif out.get("output_type") == "error" and course.nbgrader_meta(cell).get("solution"):
                result.notes.append(f"{label}: {out.get('ename')} when the cell ran")
            elif out.get("output_type") == "stream" and "[output truncated by" in out.get(
                "text", ""
            ):
                result.notes.append(f"{label}: printed output truncated")


# --------------------------------------------------------------------------- a class
def _seed_caches(aids: list[str], root: Path) -> Path | None:
    """Warm compiler caches once for the class: a chapter module may define ``warm_caches()``
    (09's compiles what its checks compile). Each job copies the result into its own kernel's
    folder, so no submission can alter what another one reads. Returns the seed's home folder,
    or None when no assignment needs one or warming failed (grading is then only slower)."""
    import importlib

    needed = [a for a in aids if hasattr(importlib.import_module(f"grader.ch{a}"), "warm_caches")]
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
    code = "; ".join(f"import grader.ch{a} as m; m.warm_caches()" for a in needed)
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
    from .pipeline import course_config, generate

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


def _merge(result: Result, config: Config, job_dir: Path, timestamp) -> None:
    """Write one job's scores into the main gradebook; copy its autograded folder."""
    aid, student = result.assignment, result.student
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
    if dest.exists():
        shutil.rmtree(dest)
    src = job_dir / "autograded" / student / aid
    if src.is_dir():
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__"))


def _load_manifest(work: Path) -> dict:
    path = work / MANIFEST
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}


def _save_manifest(work: Path, manifest: dict) -> None:
    tmp = work / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, work / MANIFEST)  # atomic: a crash leaves the old or the new file


#: Grading processes running now (killed together if the command is stopped).
_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()


def _stop_all_jobs() -> None:
    """Kill every running grading process and its kernels; start no new one."""
    with _LIVE_LOCK:
        _STOPPING.set()
        live = list(_LIVE)
    for proc in live:
        _kill_tree(proc.pid)


def _run_job_process(job_file: Path, timeout_s: float) -> dict:
    job = json.loads(job_file.read_text())
    env = dict(os.environ, **{GRADING_ENV: "1", _PARENT_ENV: str(os.getpid())})
    with _LIVE_LOCK:
        if _STOPPING.is_set():
            raise RuntimeError("grading was stopped")
        proc = subprocess.Popen(
            [sys.executable, "-m", "grader.grading", str(job_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        _LIVE.add(proc)
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_tree(proc.pid)  # the job and its kernels, not only the job
        stdout, stderr = proc.communicate()
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(proc)
    (Path(job["job_dir"]) / "job.log").write_text(stdout + stderr)
    log = (stdout + stderr)[-3000:]
    result_file = Path(job["result"])
    if not timed_out and result_file.is_file():
        return json.loads(result_file.read_text())
    why = (
        f"the grading process did not finish within {timeout_s:.0f} s"
        if timed_out
        else f"the grading process ended with status {proc.returncode}: {log.strip()[-300:]}"
    )
    return asdict(
        Result(job["student"], job["assignment"], "failed", notes=[why], digest=job["digest"])
    )


def grade_class(
    submitted: Path,
    work: Path,
    pairs: list[tuple[str, str]],
    options: GradingOptions,
    *,
    progress: bool = True,
) -> list[Result]:
    """Grade every (student, assignment) pair of ``submitted`` into the gradebook of ``work``.

    Args:
        submitted: ``<student>/<assignment>/`` folders.
        work: Instructor working folder: ``gradebook.db`` (its assignments already
            registered), ``autograded/``, the manifest and ``staging/``.
        pairs: What to grade.
        options: See :class:`GradingOptions`.
        progress: Show a progress bar.

    Returns:
        One :class:`Result` per pair, in the order of ``pairs``.
    """
    from .pipeline import course_config

    work, submitted = Path(work).resolve(), Path(submitted).resolve()
    config = course_config(work, submitted)
    staging = work / "staging"
    options.gpu = options.has_gpu  # resolved here: the grading processes need not import torch
    manifest = {} if options.regrade else _load_manifest(work)
    aids = sorted({a for _, a in pairs})
    templates = _template_gradebooks(aids, staging / "_templates")
    seed_home = _seed_caches(aids, staging / "_seed")
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
        job_dir = staging / f"{student}__{aid}"
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
                    "result": str(job_dir / "result.json"),
                    "options": asdict(options),
                }
            )
        )
        todo.append((student, aid, folder, job_dir, job_file))
    timeout = options.notebook_timeout + 600
    bar = tqdm(total=len(todo), desc=f"autograde ({options.jobs} at a time)", unit="notebook",
               disable=not progress or not todo)  # fmt: skip
    _STOPPING.clear()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, options.jobs))
    try:
        futures = {
            pool.submit(_run_job_process, job_file, timeout): (student, aid, folder, job_dir)
            for student, aid, folder, job_dir, job_file in todo
        }
        for future in concurrent.futures.as_completed(futures):
            student, aid, folder, job_dir = futures[future]
            result = Result(**future.result())
            if result.status in ("graded", "missing"):
                timestamp = CourseDirectory(config=config).get_existing_timestamp(str(folder))
                _merge(result, config, job_dir, timestamp)
                manifest[f"{student}/{aid}"] = asdict(result)
                _save_manifest(work, manifest)
                with contextlib.suppress(OSError):
                    shutil.rmtree(job_dir / "sandbox" / "home")  # caches: large, not needed
            results[student, aid] = result
            bar.update(1)
            bar.set_postfix_str(f"{student}/{aid}: {result.status}", refresh=True)
    except BaseException:
        # Ctrl-C or SIGTERM (see grader.__main__): stop the running jobs and their kernels now
        # rather than grading the rest of the class; the manifest keeps what was merged.
        pool.shutdown(wait=False, cancel_futures=True)
        _stop_all_jobs()
        raise
    finally:
        pool.shutdown(wait=True)
    bar.close()
    return [results[p] for p in pairs]


# --------------------------------------------------------------------------- reports
def format_summary(results: list[Result]) -> str:
    """One line per submission: score, status, what happened, and why to review."""
    lines = [f"{'student':<18} {'assignment':<18} {'score':>9}  {'status':<10} notes"]
    for r in results:
        score = (
            f"{r.score:g}/{r.max_score:g}"
            if r.status in ("graded", "unchanged", "missing")
            else "-"
        )
        notes = list(r.notes)
        if r.not_checked:
            notes.append(f"not checked (needs a GPU): {', '.join(r.not_checked)}")
        status = r.status + (" REVIEW" if r.flagged else "")
        lines.append(
            f"{r.student:<18} {r.assignment:<18} {score:>9}  {status:<10} {'; '.join(notes)}"
        )
        for reason in r.review:
            lines.append(f"{'':<48} review: {reason}")
    flagged = sum(r.flagged for r in results)
    failed = sum(r.status == "failed" for r in results)
    lines.append(
        f"\n{len(results)} submissions: {sum(r.status in ('graded', 'unchanged') for r in results)} "
        f"graded, {sum(r.status == 'missing' for r in results)} missing, {failed} could not be "
        f"graded (rerun to retry), {flagged} flagged for review (their scores are in the "
        "gradebook, marked as needing manual grading)."
    )
    if results:
        lines.append(f"Kernels: {results[0].isolation or sandbox.isolation_label()}.")
    return "\n".join(lines)


def write_report_csv(results: list[Result], path: Path) -> Path:
    """The grading report as CSV: one row per submission (status, score, notes, review)."""
    import csv

    path = Path(path)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            [
                "student",
                "assignment",
                "status",
                "score",
                "max_score",
                "review",
                "failed_cells",
                "notes",
                "review_reasons",
                "seconds",
            ]  # fmt: skip
        )
        for r in results:
            writer.writerow(
                [
                    r.student,
                    r.assignment,
                    r.status,
                    r.score,
                    r.max_score,
                    "yes" if r.flagged else "",
                    " ".join(r.failed_cells),
                    " | ".join(r.notes),
                    " | ".join(r.review),
                    r.seconds,
                ]  # fmt: skip
            )
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m grader.grading JOB.json", file=sys.stderr)
        sys.exit(2)
    run_job(sys.argv[1])
