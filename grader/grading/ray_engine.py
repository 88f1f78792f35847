"""Grade a class on a Ray cluster: ``python -m grader autograde --engine ray [--address ...]``.

`Ray <https://docs.ray.io>`_ schedules one task per submission on the cluster's nodes. A task
receives what it needs as data (the submission folder's entries, the assignment's template
gradebook), grades the submission on its node exactly as a local job does (a
:mod:`grader.grading.job` process: intake, the bubblewrap sandbox and limits of :mod:`grader.grading.isolation`, the checks
judged in the job process), and returns the result and the autograded notebook. This process,
the driver, writes them into the one nbgrader gradebook and the manifest as the local engine
does, so reports, resuming and regrading are the same.

* **Resources per task**: ``cpus_per_task`` CPUs; submissions whose CUDA cells are graded also
  ask for ``gpus_per_task`` of a GPU (a fraction shares a GPU between tasks; their ``_cuda``
  test cells still take it in turn through a node-wide lock).
* **Lost workers**: a task whose worker or node dies is run again on another (Ray's
  ``max_retries``); a submission is written once, whichever attempt finishes first.
* **Every node** needs the course's environment (the same checkout and virtual environment as
  the grading machine, bubblewrap for the sandbox); no shared file system is needed.

Ray is imported only when this engine is used: a machine without it grades with the local
engine.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from grader.grading.job import ALIAS
from grader.grading.report import Result

#: Content sent for a file beside the notebook that grading does not read (names only matter).
_UNREAD = b""
#: The largest notebook sent (one byte over the intake's limit, so the limit is still reported).
_NOTEBOOK_LIMIT = 64 * 2**20 + 1


def pack(folder: Path, *, contents: str = "notebooks") -> list[tuple[str, str, object]]:
    """A folder as entries ``(relative path, "dir" | "file" | "link", data)``, links not
    followed. ``contents="notebooks"`` sends file contents for ``.ipynb`` files only (the rest
    by name: grading reads only the notebook); ``"all"`` for every file."""
    folder = Path(folder)
    entries: list[tuple[str, str, object]] = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        rel_root = Path(root).relative_to(folder)
        for name in sorted(dirs):
            path = Path(root) / name
            rel = str(rel_root / name)
            if path.is_symlink():
                entries.append((rel, "link", os.readlink(path)))
            else:
                entries.append((rel, "dir", None))
        dirs[:] = sorted(d for d in dirs if not (Path(root) / d).is_symlink())
        for name in sorted(files):
            path = Path(root) / name
            rel = str(rel_root / name)
            if path.is_symlink():
                entries.append((rel, "link", os.readlink(path)))
            elif contents == "all" or name.endswith(".ipynb"):
                with path.open("rb") as f:
                    entries.append((rel, "file", f.read(_NOTEBOOK_LIMIT)))
            else:
                entries.append((rel, "file", _UNREAD))
    return entries


def unpack(entries: list[tuple[str, str, object]], dest: Path) -> Path:
    """Recreate what :func:`pack` made under ``dest`` (never writing outside it); return it.

    Raises:
        ValueError: an entry's path is absolute or leaves ``dest``.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for rel, kind, data in entries:
        parts = Path(rel).parts
        if Path(rel).is_absolute() or ".." in parts:
            raise ValueError(f"entry {rel!r} leaves the folder")
        path = dest.joinpath(*parts)
        parent = path.parent
        if parent != dest and (parent.is_symlink() or not parent.is_dir()):
            raise ValueError(f"entry {rel!r} is under a link or a missing folder")
        if kind == "dir":
            path.mkdir()
        elif kind == "link":
            os.symlink(str(data), path)
        else:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd, "wb") as f:
                f.write(bytes(data))
    return dest


def _node_lock_dir() -> Path:
    """A folder of its own for the node's GPU lock (shared by the node's tasks), which the
    grading kernels cannot see (grader.grading.isolation hides the lock's folder)."""
    folder = Path(tempfile.gettempdir()) / f"gpu-course-{os.getuid()}-locks"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def _node_seed(assignment: str) -> str | None:
    """Warm compiler caches for ``assignment`` on this node (made once per node, under a lock)."""
    import importlib

    from filelock import FileLock

    if not hasattr(importlib.import_module(f"grader.checks.ch{assignment}"), "warm_caches"):
        return None
    from grader.grading.grading import _seed_caches

    root = Path(tempfile.gettempdir()) / f"gpu-course-seed-{os.getuid()}" / assignment
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root) + ".lock", timeout=1200):
        home = _seed_caches([assignment], root)
    return str(home) if home else None


def grade_task(spec: dict, submission: list, template_db: bytes, timeout_s: float) -> dict:
    """Grade one submission on this node (the body of a Ray task).

    Args:
        spec: The job as the driver wrote it (student, assignment, digest, options).
        submission: :func:`pack` of the submission folder.
        template_db: The assignment's template gradebook (bytes).
        timeout_s: The job's time limit, seconds.

    Returns:
        ``{"result": result dict, "autograded": pack of the autograded folder or None,
        "node": this node's hostname}``.
    """
    import socket

    from grader.grading.grading import run_job_process

    root = Path(tempfile.mkdtemp(prefix="grader-ray-"))
    try:
        submitted_root = root / "submitted"
        folder = unpack(submission, submitted_root / "student" / spec["assignment"])
        (root / "template.db").write_bytes(template_db)
        job_dir = root / "job"
        job_dir.mkdir()
        job = dict(
            spec,
            submission=str(folder),
            submitted_root=str(submitted_root),
            job_dir=str(job_dir),
            work=str(root),
            template_db=str(root / "template.db"),
            seed_home=_node_seed(spec["assignment"]),
            result=str(job_dir / "result.json"),
            gpu_lock=str(_node_lock_dir() / "gpu.lock"),
        )
        job_file = job_dir / "job.json"
        job_file.write_text(json.dumps(job))
        result = run_job_process(job_file, timeout_s)
        graded = job_dir / "autograded" / ALIAS / spec["assignment"]
        return {
            "result": result,
            "autograded": pack(graded, contents="all") if graded.is_dir() else None,
            "node": socket.gethostname(),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def task_gpu_fraction(gpus: float) -> float:
    """The share of each visible GPU's memory a task's kernel may use, for a task that asked Ray
    for ``gpus`` GPUs: 90% of what it was given (a fraction shares the GPU with other tasks;
    the rest is for the grading process's own CUDA context and the reference solution), 1 for
    a task given no GPU (Ray hides every GPU from it). The driver's own share, worked out for
    its local jobs, says nothing about a node's."""
    return 1.0 if gpus <= 0 else 0.9 * min(gpus, 1.0)


class RayEngine:
    """Runs the jobs of :func:`grader.grading.grading.grade_class` as Ray tasks.

    Args:
        address: The cluster to join (``"auto"``: the one ``ray start`` made on this machine;
            ``"HOST:PORT"``), or None to start a local one with this machine's cores.
        cpus_per_task: CPUs each task asks for.
        gpus_per_task: GPUs (or a fraction of one) a task grading CUDA cells asks for.
        max_retries: Times a task whose worker dies is run again.
    """

    name = "ray"
    resolves_gpu_here = False  # each task asks its own node

    def __init__(
        self,
        address: str | None = None,
        *,
        cpus_per_task: float = 1,
        gpus_per_task: float = 1,
        max_retries: int = 3,
    ) -> None:
        import ray

        self.ray = ray
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        self.cpus_per_task = cpus_per_task
        self.gpus_per_task = gpus_per_task
        self.max_retries = max_retries
        self._refs: list = []
        self._task = ray.remote(grade_task)

    @property
    def has_gpu(self) -> bool:
        """Whether the cluster has GPUs."""
        return self.ray.cluster_resources().get("GPU", 0) > 0

    def describe(self) -> str:
        """For the progress bar."""
        cpus = self.ray.cluster_resources().get("CPU", 0)
        nodes = len([n for n in self.ray.nodes() if n.get("Alive")])
        return f"Ray: {nodes} node(s), {cpus:g} CPU(s)"

    def _gpus_for(self, job_spec: dict) -> float:
        from grader.grading.pipeline import cuda_cells

        options = job_spec["options"]
        if not self.has_gpu or options.get("cells") == "no-cuda":
            return 0
        return self.gpus_per_task if job_spec["assignment"] in cuda_cells() else 0

    def run(self, jobs: list, timeout_s: float):
        """Yield ``(job, result dict)`` as tasks finish."""
        ray = self.ray
        pending = {}
        for job in jobs:
            spec = json.loads(Path(job.job_file).read_text())
            spec["options"]["gpu"] = None  # each node answers for itself
            gpus = self._gpus_for(spec)
            spec["options"]["gpu_fraction"] = task_gpu_fraction(gpus)
            db = Path(spec["template_db"]).read_bytes()
            submission = pack(Path(spec["submission"]))
            ref = self._task.options(
                num_cpus=self.cpus_per_task,
                num_gpus=gpus,
                max_retries=self.max_retries,
            ).remote(spec, submission, db, timeout_s)
            pending[ref] = (job, spec)
        self._refs = list(pending)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            ref = done[0]
            job, spec = pending.pop(ref)
            try:
                payload = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - a task that failed after its retries
                yield job, self._failed(spec, f"the Ray task failed: {type(exc).__name__}: {exc}")
                continue
            job_dir = Path(job.job_dir)
            if payload.get("autograded"):
                target = job_dir / "autograded" / ALIAS / spec["assignment"]
                if target.exists():
                    shutil.rmtree(target)
                unpack(payload["autograded"], target)
            result = payload["result"]
            result.setdefault("notes", []).append(f"graded on {payload.get('node', '?')}")
            (job_dir / "result.json").write_text(json.dumps(result, indent=1))
            yield job, result

    @staticmethod
    def _failed(spec: dict, why: str) -> dict:
        from dataclasses import asdict

        return asdict(
            Result(
                spec["student"], spec["assignment"], "failed", notes=[why], digest=spec["digest"]
            )
        )

    def stop(self) -> None:
        """Cancel every task not yet finished (their grading processes end with them)."""
        for ref in self._refs:
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - already finished
                pass
        time.sleep(0.5)
