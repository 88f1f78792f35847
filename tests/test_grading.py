"""Grading a class that contains broken and hostile submissions (tests/bad_submissions), with
the real nbgrader autograde through the course's command: each bad submission gets the
outcome its case declares, the good ones in the same batch keep their exact scores, nothing
outside the submissions changes, grading again is idempotent and a killed run resumes.
Slow (minutes)."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
import torch

from grader.grading import grading, quota, sandbox, scan
from grader.runtime import course
from grader.tools import samples

from .bad_submissions import CASES, DISK_GB, LINK, POINTS, PROCESSES, REFERENCE, SECRET
from .helpers import autograde_flags, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]  # the module fixture grades a class
A = "03_streams"
GPU = torch.cuda.is_available()
CELL_TIMEOUT = 20
GOOD = ("reference", "alternative", "mistake", "blank")


def _reference_code(grade_id: str) -> str:
    nb = course.read(course.source_path(A))
    cell = next(
        c for c in course.solution_cells(nb) if course.nbgrader_meta(c)["grade_id"] == grade_id
    )
    return course.strip_solution_markers(cell.source)


def build_case(case, folder: Path) -> None:
    """Write the case's submission as ``folder/<student>/03_streams/``."""
    out = folder / case.student / A
    out.mkdir(parents=True)
    if case.edit == "missing":
        (out / "notes.txt").write_text("I could not finish this one.\n")
        return
    for name, content in case.files.items():
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str) and content.startswith(LINK):
            link = content[len(LINK) :].format(solutions=course.SOLUTIONS, repo=course.REPO)
            target.symlink_to(link)
        elif isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    if case.raw is not None:
        (out / f"{A}.ipynb").write_bytes(case.raw)
        return
    if case.edit == "notebook_link":
        (out / f"{A}.ipynb").symlink_to(course.source_path(A))
        return
    if case.edit == "notebook_folder":
        (out / f"{A}.ipynb").mkdir()
        return
    code = {k: v.replace(REFERENCE, _reference_code(k)) for k, v in case.code.items()}
    nb = samples.build_submission(A, code)
    if case.edit in ("delete_tests", "edit_tests"):
        visible = {"test_prefetch_to_device", "test_run_on_streams"}
        if case.edit == "delete_tests":
            nb.cells = [
                c for c in nb.cells if course.nbgrader_meta(c).get("grade_id") not in visible
            ]
        else:
            for c in nb.cells:
                if course.nbgrader_meta(c).get("grade_id") == "test_run_on_streams":
                    c.source = "pass  # the test was in my way"
    if case.tamper is not None:
        case.tamper(nb)
    name = f"{A}-Copy1.ipynb" if case.edit == "rename" else f"{A}.ipynb"
    if case.edit == "invalid_notebook":
        raw = json.loads(nbformat.writes(nb))
        for cell in raw["cells"]:
            meta = cell["metadata"].get("nbgrader", {})
            if "points" in meta:
                meta["points"] = str(meta["points"])
            if meta.get("solution"):
                cell["source"] = {"lines": cell["source"]}
        (out / name).write_text(json.dumps(raw))
        return
    if case.edit == "invalid_schema":
        raw = json.loads(nbformat.writes(nb))
        raw["made_by"] = "my own editor"
        raw["nbformat_minor"] = 99
        for cell in raw["cells"]:
            cell.pop("id", None)
            if cell["cell_type"] == "code":
                cell.pop("outputs", None)
                cell["execution_count"] = "three"
        (out / name).write_text(json.dumps(raw))
        return
    nbformat.write(nb, str(out / name))


def build_class(folder: Path) -> dict[str, float]:
    """The bad cases plus four good students; returns the good students' expected scores."""
    for case in CASES:
        build_case(case, folder)
    mistake = next(
        s for s in samples.load_samples(A) if s.is_mistake and "run_on_streams" in s.cells
    )
    alternative = next(s for s in samples.load_samples(A) if not s.is_mistake)
    good = {
        "reference": samples.build_submission(A, None),
        "alternative": samples.build_submission(A, alternative.cells),
        "mistake": samples.build_submission(A, mistake.cells),
        "blank": samples.build_submission(A, None, blank=True),
    }
    for name, nb in good.items():
        (folder / name / A).mkdir(parents=True)
        nbformat.write(nb, str(folder / name / A / f"{A}.ipynb"))
    full = sum(p[1 if GPU else 0] for p in POINTS.values())
    lost = {t for t in mistake.expected_failures(gpu=GPU)}
    cells = {t.grade_id: t.points for t in course.test_cells(course.read(course.source_path(A)))}
    return {
        "reference": full,
        "alternative": full,
        "mistake": full - sum(cells[t] for t in lost if GPU or not t.endswith("_cuda")),
        "blank": 0,
    }


def autograde(submitted: Path, work: Path, *extra: str, timeout: int = 1200):
    report = work.parent / f"{work.name}-report.csv"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader",
            "autograde",
            str(submitted),
            "--work",
            str(work),
            "--assignment",
            A,
            "--cpu-ok",
            "--jobs",
            "2",
            "--cell-timeout",
            str(CELL_TIMEOUT),
            "--memory-gb",
            "6",
            "--disk-gb",
            str(DISK_GB),
            "--processes",
            str(PROCESSES),
            "--report",
            str(report),
            *autograde_flags(),
            *extra,
        ],  # fmt: skip
        capture_output=True,
        text=True,
        cwd=course.REPO,
        timeout=timeout,
        env=_env_with_secret(),
    )
    rows = {r["student"]: r for r in csv.DictReader(report.open())} if report.is_file() else {}
    return proc, rows


def _env_with_secret() -> dict:
    return {**os.environ, "GRADER_SECRET_TOKEN": SECRET, "AWS_SECRET_ACCESS_KEY": SECRET}


def _fingerprint() -> dict[str, str]:
    """Hashes of the course files a submission must not change."""
    files = [*course.REPO.glob("grader/*.py"), *course.SOLUTIONS.glob("*/*.ipynb")]
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def _plant_secrets() -> dict[str, Path]:
    """Secrets a kernel must not read, each in a world-readable file (so that only what the
    kernel sees, not file permissions, keeps them out): one in another user's home under
    /home (where this process may write there, e.g. as root) and one in the grader's own home.
    Returns the secret -> file."""
    token = os.urandom(6).hex()
    planted = {}
    targets = [
        (Path("/home") / f"grader-test-other-{token}" / "notes.txt", f"other-home-secret-{token}"),
        (Path.home() / f".grader-test-{token}.txt", f"grader-home-secret-{token}"),
    ]
    for path, secret in targets:
        try:
            path.parent.mkdir(mode=0o755, exist_ok=True)
            path.write_text(secret + "\n")
            path.chmod(0o644)
        except OSError:
            continue
        planted[secret] = path
    return planted


def _remove_secrets(planted: dict[str, Path]) -> None:
    for path in planted.values():
        path.unlink(missing_ok=True)
        if path.parent.name.startswith("grader-test-other-"):
            shutil.rmtree(path.parent, ignore_errors=True)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    submitted, work = root / "submitted", root / "work"
    expected = build_class(submitted)
    before = _fingerprint()
    planted = _plant_secrets()
    try:
        start = time.monotonic()
        proc, rows = autograde(submitted, work)
        first_s = time.monotonic() - start
    finally:
        _remove_secrets(planted)
    return {
        "proc": proc, "rows": rows, "expected": expected, "work": work, "submitted": submitted,
        "before": before, "after": _fingerprint(), "first_s": first_s, "planted": planted,
    }  # fmt: skip


def test_the_command_grades_the_whole_batch(graded):
    proc = graded["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert set(graded["rows"]) == {c.student for c in CASES} | set(GOOD)
    assert "flagged for review" in proc.stdout


@pytest.mark.parametrize("name", GOOD)
def test_good_submissions_keep_their_exact_scores(graded, name):
    row = graded["rows"][name]
    assert row["status"] == "graded"
    assert float(row["score"]) == graded["expected"][name], row
    assert row["review"] == "", f"{name} flagged: {row['review_reasons']}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_bad_submission_gets_its_declared_outcome(graded, case):
    row = graded["rows"][case.student]
    assert row["status"] == case.status, row
    want = sum(POINTS[e][1 if GPU else 0] for e in case.exercises)
    assert float(row["score"]) == want, f"{case.name}: {case.what}\n{row}"
    assert (row["review"] == "yes") == case.review, f"{case.name}: {row['review_reasons']}"
    words = (row["notes"] + " " + row["review_reasons"]).lower()
    for phrase in case.says:
        assert phrase.lower() in words, f"{case.name}: {phrase!r} not in {words!r}"


def test_no_submission_changed_the_course(graded):
    assert graded["after"] == graded["before"]
    assert not (course.REPO / "owned.txt").exists()
    for leftover in (course.REPO / "PWNED", Path("/tmp/pwned"), Path("/tmp/sitecustomize.py")):
        assert not leftover.exists(), leftover


def test_no_secret_reaches_a_kernel(graded):
    """The grading command's environment (tokens, keys) is not passed to kernels, so nothing a
    student prints can show it in the graded notebook or the feedback."""
    row = graded["rows"]["prints_environment"]
    assert row["status"] == "graded"
    nb = graded["work"] / "autograded" / "prints_environment" / A / f"{A}.ipynb"
    text = nb.read_text()
    assert "HOME" in text, "the environment was printed"
    for path in (graded["work"] / "autograded").rglob("*.ipynb"):
        assert SECRET not in path.read_text(errors="replace"), path


def test_odd_folder_names_are_graded_under_their_names(graded):
    from nbgrader.api import Gradebook

    odd = [c.student for c in CASES if c.folder]
    with Gradebook(f"sqlite:///{graded['work'] / 'gradebook.db'}") as gb:
        ids = {s.student.id for s in gb.assignment_submissions(A)}
    for name in odd:
        assert name in ids, name
        assert (graded["work"] / "autograded" / name / A / f"{A}.ipynb").is_file(), name


def test_enormous_output_is_cut_in_the_graded_notebook(graded):
    nb = graded["work"] / "autograded" / "enormous_output" / A / f"{A}.ipynb"
    assert nb.stat().st_size < 5 * 2**20
    assert "output truncated" in nb.read_text()


@pytest.mark.skipif(not sandbox.bwrap_available(), reason="bubblewrap is not available here")
def _staging(graded, student: str) -> Path:
    found = sorted((graded["work"] / "staging").glob(f"{student}-*__{A}"))
    assert found, f"no staging folder for {student}"
    return found[0]


def test_a_flood_of_the_kernel_s_own_descriptors_leaves_a_capped_log(graded):
    """64 MB written straight to the kernel's stdout and stderr descriptors reach the grading
    process's job.log: it keeps its first and last 512 KiB and says what it dropped."""
    log = _staging(graded, "floods_the_log") / "job.log"
    size = log.stat().st_size
    assert size < 1024 * 1024 + 4096, size
    assert b"bytes dropped by the grader's log cap" in log.read_bytes()


def test_a_disk_filler_leaves_nothing_behind(graded):
    """The kernel that wrote past its quota was stopped and what it wrote removed: neither its
    staging folder nor its autograded folder holds it."""
    staging = _staging(graded, "fills_the_disk")
    written = quota.disk_usage([staging, graded["work"] / "autograded" / "fills_the_disk"])
    assert written.bytes < DISK_GB * 1e9 / 10, written


def test_no_child_of_a_kernel_reads_the_instructor_s_paths(graded):
    """A kernel's child process reads the sandbox's command line and every JSON file of its
    home: the guard's settings are gone (read and deleted by the guard), and the command line
    names none of the hidden folders (bubblewrap's options went through a descriptor)."""
    nb = json.loads(
        (graded["work"] / "autograded" / "reads_instructor_paths" / A / f"{A}.ipynb").read_text()
    )
    printed = "".join(
        "".join(out.get("text", ""))
        for cell in nb["cells"]
        for out in cell.get("outputs", [])
        if out.get("output_type") == "stream"
    )
    assert "READ /proc/1/cmdline" in printed, "the submission did not run"
    for hidden in (course.SOLUTIONS, graded["submitted"], course.REPO / ".git"):
        assert str(hidden) not in printed
    assert "--tmpfs" not in printed and '"blocked"' not in printed and "audit_key" not in printed


def _printed(graded, student: str) -> str:
    nb = json.loads((graded["work"] / "autograded" / student / A / f"{A}.ipynb").read_text())
    return "".join(
        "".join(out.get("text", ""))
        for cell in nb["cells"]
        for out in cell.get("outputs", [])
        if out.get("output_type") == "stream"
    )


@pytest.mark.skipif(not sandbox.bwrap_available(), reason="bubblewrap is not available here")
def test_no_expected_value_is_in_a_kernel_s_reach(graded):
    """The kernel imports an expected-value helper of the checks, reads a checks module's
    source and its bytecode: the sandbox shows the kernel's view of the checks (probes only)
    and hides their bytecode, so none of it is found."""
    printed = _printed(graded, "seeks_the_oracle")
    assert "NO ORACLE" in printed and "ORACLE FOUND" not in printed, printed[-500:]


def test_kernels_ran_in_the_sandbox(graded):
    assert "bubblewrap sandbox" in graded["proc"].stdout


@pytest.mark.skipif(not sandbox.bwrap_available(), reason="bubblewrap is not available here")
def test_a_kernel_reads_no_system_file_or_home_folder(graded):
    """Graded as root (CI runs as root), a submission that prints /etc/shadow, every home folder
    and the grader's home gets none of it into its graded notebook, its feedback or the
    report: its kernel runs as an unprivileged user (never uid 0) and sees neither /home nor
    the grader's home, where the test planted world-readable secrets."""
    from grader.grading import pipeline

    name = "reads_system_secrets"
    row = graded["rows"][name]
    assert row["status"] == "graded" and row["review"] == "", row
    nb_path = graded["work"] / "autograded" / name / A / f"{A}.ipynb"
    config = pipeline.course_config(graded["work"], graded["submitted"])
    result = pipeline.api_for(config).generate_feedback(A, name, force=True)
    assert result["success"], result.get("log", "")[-2000:]
    feedback = sorted((graded["work"] / "feedback" / name / A).glob("*.html"))
    assert feedback, "no feedback written"
    texts = {
        "notebook": nb_path.read_text(),
        "feedback": feedback[0].read_text(errors="replace"),
        "report": json.dumps(row),
    }
    ids = sandbox.kernel_ids()
    printed = "".join(
        "".join(out.get("text", ""))
        for cell in json.loads(texts["notebook"])["cells"]
        for out in cell.get("outputs", [])
        if out.get("output_type") == "stream"
    )
    assert "uid 0 " not in printed and "uid " in printed, "the submission did not run"
    if ids is not None:  # the grader is root: the kernel runs as a user of the job's own
        uid, gid = (int(w) for w in printed.split("uid ", 1)[1].split()[:3:2])
        assert uid == gid and uid >= quota.UID_BASE, printed[:200]
        assert "refused /etc/shadow" in printed
        shadow = Path("/etc/shadow").read_text().splitlines()
        secrets = [line for line in shadow if line.split(":")[1:2] not in ([""], ["*"], ["!"])]
        secrets += [line.split(":")[0] + ":" + line.split(":")[1] for line in shadow[:1]]
    else:
        secrets = []
    secrets += list(graded["planted"])
    assert graded["planted"] or ids is None, "as root the test must plant its secrets"
    # of the home folders, only the Python environment may be seen (here it may live in
    # root's home, e.g. pyenv's), nothing else of /root, the grader's home or /home
    env = [Path(p) for p in sandbox.python_environment([sys.executable])]
    for line in printed.splitlines():
        words = line.split()
        if words[:1] == ["READ"]:
            read = Path(words[1])
            assert (
                read.parts[1] not in ("home", "root")
                and Path.home() not in read.parents
                or any(e == read or e in read.parents for e in env)
            ), line[:200]
    for where, text in texts.items():
        for secret in secrets:
            assert secret not in text, f"{secret[:20]}... reached the {where}"


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal is for a command run as root")
def test_autograde_as_root_without_the_sandbox_refuses_unless_told(tmp_path):
    """As root with no sandbox (here: --no-sandbox; the same holds without bubblewrap), every
    student's code would run as root: the command says so and refuses (exit 2) before it
    grades anything; --allow-root-unsandboxed goes on, with a warning."""
    missing = str(tmp_path / "missing")
    cmd = [sys.executable, "-m", "grader", "autograde", missing, "--cpu-ok", "--no-sandbox"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=course.REPO, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "REFUSED" in proc.stderr and "as root" in proc.stderr, proc.stderr
    assert "--allow-root-unsandboxed" in proc.stderr and "Grading" not in proc.stdout
    proc = subprocess.run(
        [*cmd, "--allow-root-unsandboxed"], capture_output=True, text=True, cwd=course.REPO,
        timeout=300,
    )  # fmt: skip
    assert "REFUSED" not in proc.stderr and "WARNING" in proc.stderr, proc.stderr
    assert "no submissions folder" in proc.stderr  # it went on, to the next problem


def test_a_sandboxed_kernel_never_runs_as_root_and_sees_only_the_allow_list(tmp_path):
    """The sandbox's own view, without grading: the kernel's user (nobody when this process
    is root), no capabilities, a user namespace of its own where the machine allows one, and a
    root file system holding only the system folders, the Python environment, the course and
    its own folders (no /home, no /root but what the Python environment needs)."""
    if not sandbox.bwrap_available():
        pytest.skip("bubblewrap is not available here")
    box = tmp_path / "box"
    box.mkdir()
    tmp_path.chmod(0o755)
    settings = sandbox.SandboxSettings(staging=str(box), cwd=str(box), no_network=True)
    code = (
        "import os, json; s = open('/proc/self/status').read();"
        "cap = s.split('CapEff:')[1].split()[0];"
        "print(json.dumps([os.getuid(), os.getgid(), cap, sorted(os.listdir('/')),"
        " os.path.exists('/home'), os.access('/etc/shadow', os.R_OK),"
        " open('/proc/self/uid_map').read().split(), os.access(os.getcwd(), os.W_OK)]))"
    )
    command = [sys.executable, "-c", code]
    sandbox.grant(settings, command)
    proc = subprocess.run(
        sandbox.bwrap_command(settings, command), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    uid, gid, caps, top, home, shadow, uid_map, writable = json.loads(proc.stdout)
    ids = sandbox.kernel_ids()
    assert uid != 0 and caps == "0000000000000000" and not shadow and writable
    assert (uid, gid) == (ids or (os.getuid(), os.getgid()))
    assert not home and "home" not in top
    assert set(top) <= {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "sys",
                        "dev", "proc", "tmp", *(Path(p).parts[1] for p in
                        sandbox.python_environment(command) + [str(box)])}  # fmt: skip
    if sandbox.features().user_namespace:
        assert uid_map[:2] == [str(uid), str(os.geteuid() if ids is None else uid)]


@pytest.mark.parametrize(
    "ename, evalue, says",
    [("MemoryError", "", "ran out of its memory limit (6 GB): MemoryError"),
     ("_ArrayMemoryError", "Unable to allocate 128. GiB", "(6 GB): _ArrayMemoryError"),
     ("RuntimeError", "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't "
      "allocate memory: you tried to allocate 1073741824 bytes. Error code 12 (Cannot allocate "
      "memory)", "ran out of its memory limit (6 GB): RuntimeError"),
     ("OSError", "[Errno 12] Cannot allocate memory", "(6 GB): OSError"),
     ("CheckFailed", "run_on_streams raised MemoryError: ", "(6 GB): MemoryError"),
     ("OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB", "GPU memory (its share"),
     ("RuntimeError", "shape mismatch", ""), ("ValueError", "not enough values to unpack", "")],
)  # fmt: skip
def test_an_error_the_memory_limit_caused_is_reported_as_such(ename, evalue, says):
    """Whatever an allocation refused by the kernel's memory limit raised (Python's or numpy's
    MemoryError, torch's RuntimeError, an ENOMEM OSError), the report names the limit."""
    from grader.grading import job

    options = grading.GradingOptions(memory_gb=6, gpu_fraction=0.45)
    note = job.memory_note({"output_type": "error", "ename": ename, "evalue": evalue}, options)
    assert (says in note) if says else note == "", note


def test_software_under_tmp_stays_visible_in_the_sandbox(tmp_path, monkeypatch):
    """A course or virtual environment cloned into /tmp (as on some CI runners) must still
    import inside the sandbox, whose /tmp is private; the protected folders stay hidden."""
    lib, secret, box = tmp_path / "site", tmp_path / "site" / "secret", tmp_path / "box"
    for d in (lib, secret, box):
        d.mkdir()
    (lib / "mod_in_tmp.py").write_text("X = 42\n")
    (secret / "answers.txt").write_text("no\n")
    (tmp_path / "elsewhere.txt").write_text("private\n")
    monkeypatch.syspath_prepend(str(lib))
    assert str(lib.resolve()) in sandbox.software_under_tmp()
    if not sandbox.bwrap_available():
        pytest.skip("bubblewrap is not available here")
    settings = sandbox.SandboxSettings(staging=str(box), cwd=str(box), hide=[str(secret)])
    elsewhere = str(tmp_path / "elsewhere.txt")
    code = f"import os, mod_in_tmp; print(mod_in_tmp.X, os.listdir({str(secret)!r}), os.path.exists({elsewhere!r}))"
    env = {**os.environ, "PYTHONPATH": str(lib)}
    command = [sys.executable, "-c", code]
    sandbox.grant(settings, command)
    proc = subprocess.run(
        sandbox.bwrap_command(settings, command),
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    # it imports, the hidden folder stays empty, the rest of /tmp is private
    assert proc.stdout.split() == ["42", "[]", "False"]


def test_grading_again_changes_nothing_and_is_quick(graded):
    start = time.monotonic()
    proc, rows = autograde(graded["submitted"], graded["work"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert time.monotonic() - start < graded["first_s"] / 2
    for name, row in rows.items():
        first = graded["rows"][name]
        assert row["score"] == first["score"] and row["review"] == first["review"], name
        assert row["status"] == ("missing" if first["status"] == "missing" else "unchanged")


def test_a_killed_class_resumes_and_regrading_gives_the_same_scores(tmp_path):
    submitted, work = tmp_path / "submitted", tmp_path / "work"
    expected = build_class(submitted)
    for extra in submitted.iterdir():
        if extra.name not in ("reference", "blank", "mistake", "os_exit"):
            shutil.rmtree(extra)
    report = tmp_path / "report.csv"
    cmd = [
        sys.executable, "-m", "grader", "autograde", str(submitted), "--work", str(work),
        "--assignment", A, "--cpu-ok", "--jobs", "1", "--report", str(report), *autograde_flags(),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=course.REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    manifest = work / grading.MANIFEST
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if manifest.is_file() and len(json.loads(manifest.read_text() or "{}")) >= 1:
            break
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)  # the instructor's machine crashes mid-class
    proc.wait()
    # The jobs run in their own sessions; they notice that their command died and end, kernels
    # too, as soon as they have started (imports take seconds), without finishing their work.
    wait_for(lambda: not _grading_processes(work), 20, "the killed command's jobs to end")
    done = json.loads(manifest.read_text())
    time.sleep(10)
    finished_after = [
        f"{d.name}/result.json"
        for d in (work / "staging").glob("*__*")
        if (d / "result.json").is_file() and _job_key(d) not in done
    ]
    assert not finished_after, f"a job went on grading after its command died: {finished_after}"
    assert 1 <= len(done) < 4
    cmd[cmd.index("--jobs") + 1] = "2"  # the kill needed one at a time; the rest need not
    resumed = subprocess.run(cmd, cwd=course.REPO, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    rows = {r["student"]: r for r in csv.DictReader(report.open())}
    assert sum(r["status"] == "unchanged" for r in rows.values()) == len(done)
    for name in ("reference", "blank", "mistake"):
        assert float(rows[name]["score"]) == expected[name]
    regraded = subprocess.run(
        [*cmd, "--regrade"], cwd=course.REPO, capture_output=True, text=True, timeout=900
    )
    assert regraded.returncode == 0, regraded.stderr[-2000:]
    again = {r["student"]: r for r in csv.DictReader(report.open())}
    assert all(r["status"] == "graded" for r in again.values())
    assert {k: r["score"] for k, r in again.items()} == {k: r["score"] for k, r in rows.items()}
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{work / 'gradebook.db'}") as gb:
        scores = {s.student.id: s.score for s in gb.assignment_submissions(A)}
    assert scores == {k: float(r["score"]) for k, r in again.items()}


def _job_key(job_dir: Path) -> str:
    job = json.loads((job_dir / "job.json").read_text())
    return f"{job['student']}/{job['assignment']}"


def _grading_processes(work: Path) -> list[str]:
    """The grading jobs of the working folder ``work`` (processes writing a ``job.log`` there:
    jobs are forked by a fork server, so their command lines do not name the job) and their
    kernels (whose command lines do)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline", "name"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if str(work) in cmdline and "kernel" in cmdline:
            found.append(f"{proc.pid}: kernel {cmdline[:200]}")
            continue
        if "python" not in (proc.info["name"] or ""):
            continue
        try:
            logs = [
                f.path
                for f in proc.open_files()
                if f.path.startswith(str(work)) and f.path.endswith("job.log")
            ]
        except psutil.Error:
            continue
        if logs:
            found.append(f"{proc.pid}: job writing {logs[0]}")
    return found


def test_sigterm_stops_the_command_and_its_running_jobs(tmp_path):
    """`kill` (SIGTERM) on the command stops it at once, with the submissions it was grading;
    the rest of the class is not graded in the background."""
    submitted, work = tmp_path / "submitted", tmp_path / "work"
    build_class(submitted)
    cmd = [
        sys.executable, "-m", "grader", "autograde", str(submitted), "--work", str(work),
        "--assignment", A, "--cpu-ok", "--jobs", "1", *autograde_flags(),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=course.REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_for(lambda: _grading_processes(work) or proc.poll() is not None, 300, "a job")
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        proc.terminate()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM
    wait_for(lambda: not _grading_processes(work), 30, "the stopped command's jobs to end")
    manifest = work / grading.MANIFEST
    graded = json.loads(manifest.read_text()) if manifest.is_file() else {}
    assert len(graded) < len(list(submitted.iterdir()))


# ----------------------------------------------------------------------------- the static scan
@pytest.mark.parametrize("aid", course.assignments())
def test_scan_finds_nothing_in_references_and_samples(aid):
    assert scan.scan_notebook(samples.build_submission(aid, None), aid) == []
    for sample in samples.load_samples(aid):
        nb = samples.build_submission(aid, sample.cells)
        assert scan.scan_notebook(nb, aid) == [], sample.name


#: Tampering found at run time (reads, writes, ctypes) by the guard and the sandbox, tested above.
RUN_TIME_ONLY = {
    "segfault",
    "reads_gradebook_and_hidden_tests",
    "writes_outside_its_folder",
    "rewrites_own_memory",
    "forges_the_audit_channel",  # unsigned records: found by the audit check
}


@pytest.mark.parametrize(
    "case",
    [
        c
        for c in CASES
        if c.review
        and c.code
        and c.name not in RUN_TIME_ONLY
        and not (c.files or c.tamper or c.edit or c.raw)
    ],
    ids=lambda c: c.name,
)
def test_the_scan_flags_tampering_by_assignment_or_dynamic_code(case):
    code = "\n".join(case.code.values())
    assert scan.scan_source(code.replace(REFERENCE, "")), case.name


def test_the_fork_server_preload_does_not_touch_cuda():
    """Jobs are forked from a process that imported ``grading.FORKSERVER_PRELOAD``: if an
    import there asked CUDA anything (even ``is_available``, which initialises the driver),
    a job's CUDA checks on a GPU machine would run in a process forked after CUDA started."""
    code = (
        "import torch\n"
        "def refuse(*a, **k):\n"
        "    raise AssertionError('CUDA was queried while importing the preload')\n"
        "for name in ('is_available', 'device_count', 'init', 'current_device'):\n"
        "    setattr(torch.cuda, name, refuse)\n"
        "import importlib\n"
        f"for m in {grading.FORKSERVER_PRELOAD!r}:\n"
        "    importlib.import_module(m)\n"
        "assert not torch.cuda.is_initialized()\n"
        "print('ok')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=course.REPO, timeout=120
    )
    assert proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_a_job_process_gives_a_clear_result_when_it_dies(tmp_path):
    """A grading process that dies before writing its result (here: its job file points at a
    result folder that does not exist) gives a *failed* result with its log, not an exception."""
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    job_file = job_dir / "job.json"
    job_file.write_text(
        json.dumps(
            {
                "job_dir": str(job_dir),
                "result": str(tmp_path / "missing" / "result.json"),
                "student": "s",
                "assignment": A,
                "digest": "x",
                "options": {},
            }
        )  # fmt: skip
    )
    result = grading.run_job_process(job_file, timeout_s=120)
    assert result["status"] == "failed"
    assert "the grading process ended with status" in result["notes"][0]
    assert (job_dir / "job.log").is_file()


def test_a_job_whose_fork_server_dies_is_killed_and_reported(tmp_path):
    """If the fork server dies (the OOM killer, a signal to the command's process group),
    ``join`` returns at once while its forked job still runs: the job and its kernel are
    killed, the submission gets a *failed* result, and the next class starts a new server."""
    import threading

    import psutil

    from grader.grading.pipeline import autograde as autograde_in_process

    submitted, work = tmp_path / "submitted", tmp_path / "work"
    nb = samples.build_submission(A, None)
    first = next(c for c in nb.cells if c.cell_type == "code")
    first.source = "import time\ntime.sleep(600)\n" + first.source
    (submitted / "sleeper" / A).mkdir(parents=True)
    nbformat.write(nb, str(submitted / "sleeper" / A / f"{A}.ipynb"))
    options = grading.GradingOptions.for_machine(1, cpu_ok=True)
    options.allow_root_unsandboxed = bool(autograde_flags())
    results = []
    thread = threading.Thread(
        target=lambda: results.extend(
            autograde_in_process(
                submitted, work=work, assignment_ids=[A], options=options, progress=False
            )
        ),
        daemon=True,
    )
    thread.start()
    wait_for(lambda: _grading_processes(work) and any("kernel" in p for p in _grading_processes(work)), 300, "a kernel")  # fmt: skip
    me = psutil.Process()
    servers = [p for p in me.children() if "multiprocessing.forkserver" in " ".join(p.cmdline())]
    assert len(servers) == 1, [p.cmdline() for p in me.children()]
    servers[0].kill()
    thread.join(60)
    assert not thread.is_alive(), "autograde did not return after its fork server died"
    assert [r.status for r in results] == ["failed"], results
    wait_for(lambda: not _grading_processes(work), 20, "the orphaned job and its kernel to end")


def test_the_command_private_folder_is_hidden_from_kernels_outside_tmp(tmp_path):
    """With ``TMPDIR`` on another disk, the command's private folder (the fork server's socket,
    every job's kernel sockets) is not under the sandbox's private /tmp: the policy hides it,
    and a kernel sees only its own socket folder inside it."""
    from grader.grading.isolation import IsolationPolicy

    if not sandbox.bwrap_available():
        pytest.skip("bubblewrap is not available here")
    outside = Path("/var/tmp") if Path("/var/tmp").is_dir() else None
    if outside is None or not os.access(outside, os.W_OK):
        pytest.skip("no writable folder outside /tmp")
    private = Path(tempfile.mkdtemp(prefix="pymp-test-", dir=outside))
    try:
        (private / "listener-1234").write_text("the fork server's socket\n")
        mine, other = private / "gk-mine", private / "gk-other"
        mine.mkdir()
        other.mkdir()
        (other / "k-1").write_text("a neighbour's kernel socket\n")
        job_dir = tmp_path / "work" / "job"
        policy = IsolationPolicy(
            work=tmp_path / "work", submitted_root=tmp_path / "submitted", job_dir=job_dir,
            notebook_dir=job_dir / "nb", box=job_dir / "box", sockets=mine,
            options=grading.GradingOptions.for_machine(1, cpu_ok=True), private_tmp=private,
        )  # fmt: skip
        assert str(private.resolve()) in policy.protected()
        policy.notebook_dir.mkdir(parents=True)
        guard_file, _ = policy.write()
        settings = policy.sandbox_settings(guard_file)  # what the job's kernel gets
        code = f"import os; print(sorted(os.listdir({str(private)!r})), os.access({str(mine)!r}, os.W_OK))"
        command = [sys.executable, "-c", code]
        sandbox.grant(settings, command)  # what the launcher does before the kernel starts
        proc = subprocess.run(
            sandbox.bwrap_command(settings, command),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.split() == ["['gk-mine']", "True"]
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _held_lock(path: Path, seconds: float, exclusive: bool = True):
    """Hold the GPU turn at ``path`` in another thread for ``seconds`` (another job's cell)."""
    import threading

    from grader.grading.execute import GpuTurn

    taken = threading.Event()

    def hold():
        with GpuTurn(str(path), exclusive=exclusive, timeout=30):
            taken.set()
            time.sleep(seconds)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert taken.wait(10)
    return thread


def _cell(grade_id: str | None = "test_x_cuda", source: str = '"""A CUDA check."""'):
    cell = nbformat.v4.new_code_cell(source)
    if grade_id:
        cell.metadata["nbgrader"] = {
            "grade": True,
            "solution": False,
            "grade_id": grade_id,
            "points": 1,
        }
    return cell


def _executor(tmp_path, **config):
    from grader.grading import execute

    ex = execute.CourseExecute(gpu_lock=str(tmp_path / "gpu.lock"), **config)
    ex.resources, ex._started, ex._waited = {}, time.monotonic(), 0.0
    return ex


def test_a_cuda_cell_time_limit_counts_from_when_it_holds_the_gpu(tmp_path, monkeypatch):
    """Waiting for other jobs' cells must not eat this cell's time limit (a correct answer
    would score 0 for a neighbour's slowness), nor the notebook's."""
    from grader.grading import execute

    limits = []
    real = execute.KernelChannel

    def channel(executor, cell, index, deadline):
        limits.append((time.monotonic(), deadline))
        return real(executor, cell, index, deadline)

    monkeypatch.setattr(execute, "KernelChannel", channel)
    ex = _executor(tmp_path, timeout=5, notebook_timeout=1)
    holder = _held_lock(tmp_path / "gpu.lock", 2.0, exclusive=False)  # another job's code cell
    ex._judge(_cell(), 0)
    holder.join()
    (got_it, limit) = limits[0]
    assert ex._waited >= 1.5 and got_it - ex._started >= 1.5
    assert limit >= got_it + 0.9  # the notebook's last second, moved by the wait
    assert ex._deadline() == ex._started + 1 + ex._waited
    holder = _held_lock(tmp_path / "gpu.lock", 2.0, exclusive=False)
    waited = ex._waited
    ex._judge(_cell("test_y"), 0)  # an ordinary test cell: a shared turn, no wait
    holder.join()
    assert ex._waited - waited < 0.5


def test_a_notebook_whose_gpu_turn_never_comes_stops_with_a_reason(tmp_path):
    """The wait is bounded per notebook: the cell that cannot get its turn scores 0 with a
    reason, the cells after it are not run, and non-code cells never wait."""
    ex = _executor(tmp_path, gpu_lock_timeout=1)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# a title"), _cell(None, "x = 1"), _cell()]
    ex.nb = nb
    holder = _held_lock(tmp_path / "gpu.lock", 3.0)
    with ex._gpu_turn(nb.cells[0]):  # a markdown cell takes no turn
        pass
    assert ex._waited == 0
    from grader.grading.execute import GpuBusy

    with pytest.raises(GpuBusy, match="stayed busy"):
        with ex._gpu_turn(nb.cells[1]):
            pass
    holder.join()
    assert 0.9 <= ex._waited < 2
    with pytest.raises(GpuBusy):  # the notebook's wait account is spent: no more waiting
        holder = _held_lock(tmp_path / "gpu.lock", 1.0)
        with ex._gpu_turn(nb.cells[2]):
            pass
    holder.join()


def test_a_forked_child_does_not_keep_the_gpu_turn(tmp_path):
    """A process forked during a turn (a DataLoader worker, a rank) must not hold the lock after
    the turn ends; the turn's files are closed in every case (no descriptor leak)."""
    from grader.grading.execute import _HELD_FDS, GpuTurn

    path = str(tmp_path / "gpu.lock")
    with GpuTurn(path, exclusive=True, timeout=5):
        pid = os.fork()
        if pid == 0:  # the child outlives the turn
            time.sleep(3)
            os._exit(0)
    try:
        with GpuTurn(path, exclusive=True, timeout=1) as turn:
            assert turn.waited < 0.5
    finally:
        os.waitpid(pid, 0)
    assert not _HELD_FDS
    before = len(os.listdir("/proc/self/fd"))
    (tmp_path / "dir.lock").mkdir()
    for _ in range(3):
        with pytest.raises(OSError):
            GpuTurn(str(tmp_path / "dir.lock"), exclusive=False, timeout=1).__enter__()
    assert len(os.listdir("/proc/self/fd")) == before and not _HELD_FDS


def test_cuda_cells_have_the_gpu_alone_and_never_starve(tmp_path):
    """Ordinary cells of different jobs share the GPU; a _cuda test cell waits for them and
    then runs alone; an ordinary cell that asks after a waiting _cuda cell queues behind it."""
    import threading

    from grader.grading.execute import GpuTurn

    path = str(tmp_path / "gpu.lock")
    events: list[tuple[str, str]] = []
    log = threading.Lock()

    def cell(name: str, exclusive: bool, seconds: float, delay: float):
        time.sleep(delay)
        with GpuTurn(path, exclusive=exclusive, timeout=30):
            with log:
                events.append(("start", name))
            time.sleep(seconds)
            with log:
                events.append(("end", name))

    plan = [("a", False, 1.0, 0.0), ("b", False, 1.0, 0.1), ("cuda", True, 0.5, 0.3),
            ("c", False, 0.2, 0.6)]  # fmt: skip
    threads = [threading.Thread(target=cell, args=p) for p in plan]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    order = [f"{kind}:{name}" for kind, name in events]
    assert order.index("start:b") < order.index("end:a")  # shared holds run side by side
    start = order.index("start:cuda")
    assert order[start + 1] == "end:cuda"  # alone on the GPU
    assert order.index("end:a") < start and order.index("end:b") < start
    assert order.index("start:c") > start  # queued behind the waiting _cuda cell


def test_without_a_gpu_lock_cells_never_wait():
    from grader.grading import execute

    ex = execute.CourseExecute()
    ex._waited = 0.0
    with ex._gpu_turn(_cell()):
        pass
    assert ex._waited == 0


def test_a_real_notebook_stops_cleanly_when_the_gpu_never_frees(tmp_path):
    """End to end, with a kernel: markdown cells pass, the first code cell waits out the
    notebook's GPU wait and gets GpuBusy, the rest are not run; nothing crashes."""
    from grader.grading import execute

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_markdown_cell("# title"), _cell(None, "x = 1"), _cell()]
    ex = execute.CourseExecute(gpu_lock=str(tmp_path / "gpu.lock"), gpu_lock_timeout=1)
    holder = _held_lock(tmp_path / "gpu.lock", 4.0)
    ex.preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    holder.join()
    assert [o.ename for o in nb.cells[1].outputs] == ["GpuBusy"]
    assert [o.ename for o in nb.cells[2].outputs] == ["NotRun"]


def test_the_gpu_lock_folder_is_hidden_from_kernels_and_blocked_by_the_guard(tmp_path):
    """A kernel that could take the machine's GPU lock itself would keep every other student's
    cells off the GPU: the lock's folder (the node folder of a Ray worker, or the command's work
    folder) is protected, in the sandbox and by the guard."""
    from grader.grading import ray_engine
    from grader.grading.isolation import IsolationPolicy

    lock = ray_engine._node_lock_dir() / "gpu.lock"
    job_dir = tmp_path / "work" / "job"
    policy = IsolationPolicy(
        work=tmp_path / "work", submitted_root=tmp_path / "submitted", job_dir=job_dir,
        notebook_dir=job_dir / "nb", box=job_dir / "box", sockets=tmp_path / "s",
        options=grading.GradingOptions.for_machine(1, cpu_ok=True), gpu_lock=lock,
    )  # fmt: skip
    assert str(lock.parent.resolve()) in policy.protected()
    assert str(lock.parent.resolve()) in policy.guard_settings().blocked
    assert oct(lock.parent.stat().st_mode & 0o777) == "0o700"


@pytest.mark.timeout(600)
def test_jobs_that_share_a_gpu_lock_grade_as_before(tmp_path):
    """Grading as on a GPU machine (gpu=True: the memory watchdog on, every cell taking its turn
    on the machine's GPU lock) with two jobs at once: no job waits forever, every score is as
    without the lock, and the lock lives in the (protected) working folder."""
    from grader.tools import demo

    options = grading.GradingOptions.for_machine(2, gpu=True)
    results = demo.run_demo(["01_devices"], keep=tmp_path / "work", feedback=False,
                            progress=False, options=options, kind="core")  # fmt: skip
    assert results and all(r.ok for r in results), demo.explain_mismatches(results)
    assert (tmp_path / "work" / "gpu.lock").is_file()
    assert (tmp_path / "work" / "gpu.lock.gate").is_file()
