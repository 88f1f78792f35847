"""A hostile class costs no one else anything (issue 39): the static scan flags every import of
the course's package a notebook does not make itself, kernels get quotas of their own (disk,
processes, CPU share), the grading side's logs are capped, the audit channel is verified, and
nothing a kernel's children can read holds the instructor's paths. Fast unit tests; the class
round with a disk filler, a fork bomb, a CPU hog and a log flooder is in tests/test_grading.py."""

from __future__ import annotations

import pytest

from grader.grading import scan
from grader.runtime import course


# ----------------------------------------------------------------------------- the static scan
def test_the_course_modules_are_found_by_walking_the_package():
    modules = scan.course_modules()
    for name in ("grader.checks.ch01_devices", "grader.runtime.course", "grader.grading.judge",
                 "grader.checks.ch13_parallelism.tensor", "grader.grading.guard"):  # fmt: skip
        assert name in modules
    assert all(m == "grader" or m.startswith("grader.") for m in modules)


@pytest.mark.parametrize("aid", course.assignments())
def test_every_course_module_a_notebook_does_not_import_is_flagged(aid):
    """A student's cell importing any module of the package (an oracle in the checks, the
    grading modules), or a name the notebook itself does not import, is a finding; what the
    notebook imports in its own cells is not."""
    allowed = scan.course_imports(aid)
    allowed_modules = {m for m, _ in allowed}
    for module in scan.course_modules():
        found = scan.scan_source(f"import {module}\n", assignment=aid)
        assert bool(found) == (module not in allowed_modules), (aid, module)
        found = scan.scan_source(f"from {module} import _expected_value\n", assignment=aid)
        assert found, (aid, module)
    for module, name in allowed:
        source = f"from {module} import {name}\n" if name else f"import {module}\n"
        assert scan.scan_source(source, assignment=aid) == [], (aid, module, name)


def test_an_oracle_import_is_flagged_however_it_is_written():
    sources = [
        "from grader.checks.ch01_devices import _expected_simulated",
        "import grader.checks.ch01_devices as c",
        "from grader.checks import ch01_devices",
        "from grader import checks",
        "from grader.runtime.course import reference",
        "from grader.grading import judge",
    ]
    for source in sources:
        assert scan.scan_source(source, assignment="01_devices"), source


# ----------------------------------------------------------------------------- logs
def test_a_capped_log_keeps_its_head_and_tail_and_states_what_it_dropped(tmp_path):
    import os

    from grader.grading import quota

    log = quota.CappedLog(tmp_path / "job.log", head=1000, tail=500)
    payload = b"".join(f"{i:07d}\n".encode() for i in range(400_000))  # 3.2 MB
    view = memoryview(payload)
    while view:
        view = view[os.write(log.fd, view[:65536]) :]
    log.close()
    kept = (tmp_path / "job.log").read_bytes()
    assert kept.startswith(payload[:1000]) and kept.endswith(payload[-500:])
    dropped = len(payload) - 1500
    assert log.dropped == dropped
    assert f"{dropped} bytes dropped".encode() in kept
    assert len(kept) < 1500 + 200


def test_a_small_log_is_kept_whole(tmp_path):
    import os

    from grader.grading import quota

    log = quota.CappedLog(tmp_path / "job.log", head=1000, tail=500)
    os.write(log.fd, b"x" * 1200)  # past the head, within the tail: nothing dropped
    log.close()
    assert (tmp_path / "job.log").read_bytes() == b"x" * 1200 and log.dropped == 0


def test_the_audit_reader_keeps_at_most_its_cap(tmp_path):
    import json
    import os

    from grader.grading import guard
    from grader.grading.job import AuditReader

    reader = AuditReader(tmp_path / "audit.fifo", tmp_path / "audit.jsonl", max_bytes=10_000)
    fd = os.open(tmp_path / "audit.fifo", os.O_WRONLY)
    for i in range(2000):
        os.write(fd, (json.dumps({"kind": "x", "detail": "y" * 50, "seq": i}) + "\n").encode())
    os.close(fd)
    reader.close()
    assert (tmp_path / "audit.jsonl").stat().st_size < 10_000 + 200
    records = guard.read_log(tmp_path / "audit.jsonl")
    assert records[-1]["kind"] == "flood" and "records dropped" in records[-1]["detail"]
    assert reader.dropped == 2000 - (len(records) - 1)


# ----------------------------------------------------------------------------- the audit channel
def _signed(key: str, kinds_details: list[tuple[str, str]]) -> list[dict]:
    from grader.grading import guard

    out = []
    for seq, (kind, detail) in enumerate(kinds_details):
        record = {"kind": kind, "detail": detail, "where": "", "seq": seq}
        record["mac"] = guard.sign(bytes.fromhex(key), record)
        out.append(record)
    return out


KEY = "00112233445566778899aabbccddeeff"


def test_an_intact_audit_channel_has_nothing_to_say():
    from grader.grading import guard

    first = _signed(KEY, [("installed", ""), ("cell", "a"), ("cell", "b")])
    second = _signed(KEY, [("installed", ""), ("cell", "c"), ("tampering", "t"), ("cell", "d")])
    assert guard.verify_log(first + second, KEY, ["a", "b", "c", "d"]) == []


def test_a_cut_channel_a_forged_record_and_a_lost_record_are_each_named():
    from grader.grading import guard

    records = _signed(KEY, [("installed", ""), ("cell", "a"), ("cell", "b"), ("cell", "c")])
    cut = guard.verify_log(records[:2], KEY, ["a", "b", "c"])
    assert len(cut) == 1 and "went silent" in cut[0] and "2 of the 3" in cut[0]
    assert "from execution 2 on" in cut[0]
    forged = [*records, {"kind": "cell", "detail": "d", "where": "", "seq": 4}]
    assert any("not signed" in p for p in guard.verify_log(forged, KEY, ["a", "b", "c"]))
    wrong_key = _signed("ff" * 16, [("cell", "d")])
    assert any("not signed" in p for p in guard.verify_log(records + wrong_key, KEY, []))
    altered = [dict(r) for r in records]
    altered[1]["detail"] = "z"  # the signature no longer matches
    assert any("not signed" in p for p in guard.verify_log(altered, KEY, []))
    lost = [records[0], records[2], records[3]]
    assert any("out of sequence" in p for p in guard.verify_log(lost, KEY, ["b", "c"]))


# ----------------------------------------------------------------------------- disk
def test_disk_usage_counts_allocated_bytes_each_inode_once_and_stops_at_its_limit(tmp_path):
    import os

    from grader.grading import quota

    (tmp_path / "a").write_bytes(b"x" * 1_000_000)
    os.link(tmp_path / "a", tmp_path / "hardlink")
    with open(tmp_path / "sparse", "wb") as f:
        f.truncate(10**9)  # a 1 GB sparse file holds nothing
    (tmp_path / "sub").mkdir()
    for i in range(50):
        (tmp_path / "sub" / str(i)).write_bytes(b"y")
    used = quota.disk_usage([tmp_path])
    assert 1_000_000 <= used.bytes < 1_500_000 and used.entries == 54 and used.complete
    assert not quota.disk_usage([tmp_path], entries_limit=10).complete


# ----------------------------------------------------------------------------- users and groups
def test_each_job_gets_a_user_of_its_own_while_it_lives(tmp_path, monkeypatch):
    import os

    from grader.grading import quota

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    first = quota.job_user("the same seed", locks=tmp_path)
    second = quota.job_user("the same seed", locks=tmp_path)
    assert first.uid != second.uid and quota.UID_BASE <= min(first.uid, second.uid)
    taken = first.uid
    first.release()
    again = quota.job_user("the same seed", locks=tmp_path)
    assert again.uid == taken  # freed, so found again from the same slot
    second.release()
    again.release()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert quota.job_user("x", locks=tmp_path) is None


def test_control_groups_v1_a_cpu_group_for_the_job_and_a_pids_group_for_its_kernel(tmp_path):
    import os

    from grader.grading import quota

    for controller in ("cpu,cpuacct", "pids", "memory"):
        (tmp_path / controller / "class").mkdir(parents=True)
    own = "6:memory:/class\n4:cpu,cpuacct:/class\n3:pids:/class\n0::/\n"
    group = quota.JobGroup.create("job-1", 77, root=tmp_path, proc_cgroup=own)
    assert group is not None
    assert (tmp_path / "pids" / "class" / "job-1" / "pids.max").read_text() == "77"
    assert group.kernel_procs() == [str(tmp_path / "pids/class/job-1/cgroup.procs")]
    group.join(os.getpid())  # a fake tree: nothing moves
    assert (tmp_path / "cpu,cpuacct/class/job-1/cgroup.procs").read_text() == str(os.getpid())
    (tmp_path / "pids/class/job-1/pids.events").write_text("max 5\n")
    assert group.refused_forks() == 5
    for f in ("cpu,cpuacct/class/job-1/cgroup.procs", "pids/class/job-1/pids.events",
              "pids/class/job-1/pids.max"):  # fmt: skip
        (tmp_path / f).unlink()
    group.remove()
    assert not (tmp_path / "pids/class/job-1").exists()
    assert (tmp_path / "cpu,cpuacct/class/cgroup.procs").is_file()  # the process moved back
    assert quota.JobGroup.create("job-2", 5, root=tmp_path, proc_cgroup="0::/\n") is None


def test_control_groups_v2_a_job_group_with_a_grading_and_a_kernel_child(tmp_path):
    from grader.grading import quota

    (tmp_path / "cgroup.controllers").write_text("cpu io memory pids")
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "cgroup.subtree_control").write_text("cpu memory pids")
    group = quota.JobGroup.create("job-1", 33, root=tmp_path, proc_cgroup="0::/user\n")
    assert group is not None
    job = tmp_path / "user" / "job-1"
    assert (job / "cgroup.subtree_control").read_text() == "+cpu +pids"
    assert (job / "kernel" / "pids.max").read_text() == "33"
    assert group.kernel_procs() == [str(job / "kernel" / "cgroup.procs")]
    group.join(99)
    assert (job / "grading" / "cgroup.procs").read_text() == "99"
    (tmp_path / "user" / "cgroup.subtree_control").write_text("memory")
    assert quota.JobGroup.create("job-2", 5, root=tmp_path, proc_cgroup="0::/user\n") is None


def _real_groups_or_skip(name: str, processes: int = 100):
    from grader.grading import quota

    group = quota.JobGroup.create(name, processes)
    if group is None:
        pytest.skip("no writable control groups here (not root, or /sys/fs/cgroup read-only)")
    return group


def test_a_job_with_many_spinning_processes_gets_the_cpu_share_of_one_job():
    """Six spinning processes in one job's group and one in another's: the scheduler shares
    the CPU between the groups, so the lone spinner gets several times the CPU of each of the
    six (without the groups, all seven would get the same)."""
    import subprocess
    import sys
    import time

    import psutil

    hog, honest = _real_groups_or_skip("gpu-course-test-hog"), None
    spin = [sys.executable, "-c", "while True: pass"]
    procs = []
    try:
        honest = _real_groups_or_skip("gpu-course-test-honest")
        for _ in range(6):
            procs.append(subprocess.Popen(spin))
            hog.join(procs[-1].pid)
        procs.append(subprocess.Popen(spin))
        honest.join(procs[-1].pid)
        time.sleep(0.5)
        start = [sum(psutil.Process(p.pid).cpu_times()[:2]) for p in procs]
        time.sleep(3)
        used = [sum(psutil.Process(p.pid).cpu_times()[:2]) - s for p, s in zip(procs, start)]
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for group in (hog, honest):
            if group is not None:
                group.remove()
    each_hog = sum(used[:6]) / 6
    assert used[6] > 3 * each_hog, used


def test_the_launcher_applies_the_job_s_quotas_in_the_sandbox(tmp_path):
    """Through the real launcher (``python -m grader.grading.sandbox``), as root with a job user
    of its own: forks stop at the process limit (counted by the job's pids group), ``/tmp`` is
    a tmpfs of the quota's size, ``/proc/1/cmdline`` names no hidden folder, and the guard's
    settings wait in the kernel's folder, readable by its user only."""
    import json
    import os
    import stat
    import subprocess
    import sys

    from grader.grading import quota, sandbox

    if not sandbox.bwrap_available() or os.geteuid() != 0:
        pytest.skip("needs bubblewrap and root (a job user of its own)")
    group = _real_groups_or_skip(f"gpu-course-test-{os.getpid()}", processes=60)
    user = quota.job_user(str(tmp_path))
    tmp_path.chmod(0o755)
    box, hidden = tmp_path / "box", tmp_path / "instructor-secret-folder"
    box.mkdir()
    hidden.mkdir()
    guard_file = tmp_path / "guard-settings.json"
    guard_file.write_text('{"blocked": ["/the/instructor/folder"]}')
    settings = sandbox.SandboxSettings(
        staging=str(box), cwd=str(box), hide=[str(hidden)], no_network=True, uid=user.uid,
        processes=60, tmpfs_bytes=2 * 2**20, cgroup_procs=group.kernel_procs(),
        guard_settings=str(guard_file),
    )  # fmt: skip
    settings_file = settings.write(tmp_path / "sandbox.json")
    code = """
import json, os, time
out = {"uid": os.getuid(), "cmdline": open("/proc/1/cmdline", "rb").read().decode()}
try:
    with open("/tmp/f", "wb") as f:
        f.write(b"x" * 4_000_000)
    out["tmp"] = "written"
except OSError as e:
    out["tmp"] = e.errno
pids = []
try:
    for _ in range(500):
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        pids.append(pid)
except OSError as e:
    out["refused"] = e.errno
out["forks"] = len(pids)
for pid in pids:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
print(json.dumps(out))
"""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "grader.grading.sandbox", str(settings_file), "--",
             sys.executable, "-c", code],
            capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
        )  # fmt: skip
        refused = group.refused_forks()
    finally:
        user.release()
        group.remove()
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    import errno

    assert out["uid"] == user.uid
    assert out["tmp"] == errno.ENOSPC
    assert out.get("refused") == errno.EAGAIN and out["forks"] < 60, out
    assert refused >= 1 or out["forks"] < 60
    assert str(hidden) not in out["cmdline"] and "--tmpfs" not in out["cmdline"]
    copy = settings.guard_copy
    assert copy.read_text() == guard_file.read_text()
    st = copy.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == user.uid


# ----------------------------------------------------------------------------- the checks' kernel view
def test_the_kernel_view_holds_the_probes_and_no_expected_value():
    """01's ``_expected_simulated`` (the expected answer of visible_gpu_count's check) and every
    check function are missing from the kernel's view of its module; every probe is there."""
    import ast

    from grader.grading import kernel_view

    views = kernel_view.views()
    assert set(views) == set(kernel_view.checks_folder().rglob("*.py"))
    view = views[kernel_view.checks_folder() / "ch01_devices.py"]
    assert "_expected_simulated" not in view and "def check_" not in view
    for path, source in views.items():
        real = ast.parse(path.read_text())
        probes = {
            n.name for n in real.body
            if isinstance(n, ast.FunctionDef) and n.name.startswith("_probe")
        }  # fmt: skip
        kept = {n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
        assert probes <= kept, (path, probes - kept)
        assert not any(name.startswith(("check_", "_expected")) for name in kept), (path, kept)
    assert kernel_view.hidden_files()  # 13's recorded timelines


def test_a_probe_of_a_checks_module_must_be_named_so():
    from grader.checks import ch01_devices
    from grader.runtime import remote

    with pytest.raises(TypeError, match="_probe"):
        remote._require_probe(ch01_devices._expected_simulated)


def test_a_function_of_the_checks_in_a_request_must_be_a_probe_or_marked():
    """A request whose arguments hold a function of a checks module that the kernel's view
    would leave out is refused where it is made (a test that sends it fails at once)."""
    from grader.checks import ch01_devices, ch08_cpu_parallelism
    from grader.runtime import remote

    with pytest.raises(TypeError, match="kernel_side"):
        remote.request_code(remote.call, "f", (ch01_devices._expected_simulated,), {})
    remote.request_code(remote.call, "f", (ch08_cpu_parallelism.square, [1, 2]), {})


def _view_modules():
    import importlib
    import types

    from grader.grading import kernel_view

    modules = {}
    for path, source in kernel_view.views().items():
        name = kernel_view._module_name(path)
        importlib.import_module(name)  # dataclasses look their module up in sys.modules
        module = types.ModuleType(name)
        module.__file__ = str(path)
        exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102
        modules[name] = module
    return modules


class _FromView(__import__("pickle").Unpickler):
    """Unpickles a request's arguments as the kernel does: a function or class of a checks
    module is looked up in the kernel's view of it."""

    def __init__(self, file, views):
        super().__init__(file)
        self.views = views

    def find_class(self, module, name):
        if module in self.views:
            assert hasattr(self.views[module], name), f"{module}.{name} is not in the kernel view"
            return getattr(self.views[module], name)
        return super().find_class(module, name)


@pytest.mark.parametrize("aid", course.assignments())
def test_every_quick_check_passes_the_reference_with_probes_from_the_kernel_view(aid, monkeypatch):
    """Each probe a check sends runs as the kernel's view defines it (the module the sandbox
    shows a grading kernel), so the view holds everything the probes use: the reference
    still passes every quick test cell (the slow ones are graded through the sandbox by
    ``python -m grader demo`` and tests/test_pipeline.py)."""
    import io
    import sys

    from grader.runtime import remote
    from grader.tools import samples

    from .helpers import SLOW_EXERCISES

    views = _view_modules()
    sent = []

    def request(self, fn, target, args, kwargs):
        remote._require_probe(fn)
        if fn.__module__.startswith("grader.checks"):
            view = views[fn.__module__]
            assert hasattr(view, fn.__qualname__), f"{fn.__module__}.{fn.__qualname__} not in view"
            fn = getattr(view, fn.__qualname__)
            sent.append(fn.__qualname__)
        args, kwargs = _FromView(io.BytesIO(remote._dumps_request((args, kwargs))), views).load()
        if target is not None and target.obj is remote._MISSING:
            raise NameError(f"name {target.__name__!r} is not defined")
        obj = target.obj if target is not None else None
        saved = {name: sys.modules[name] for name in views}
        sys.modules.update(views)  # as in the kernel, where the views are the modules
        try:
            data = remote.execute(fn, obj, target is not None, args, kwargs)
        finally:
            sys.modules.update(saved)
        return remote._unpack(remote.handover.loads(data))

    monkeypatch.setattr(remote.LocalChannel, "request", request)
    nb = course.read(course.source_path(aid))
    quick = {
        course.nbgrader_meta(c)["grade_id"] for c in course.solution_cells(nb)
    } - SLOW_EXERCISES.get(aid, set())
    results = samples.run_test_cells(aid, None, only_for=quick)
    failing = {k: v for k, v in results.items() if v and not k.endswith("_cuda")}
    assert not failing, failing
    assert sent or aid in WITHOUT_QUICK_PROBES, aid


#: Assignments whose quick checks send only the runtime's own probes (a call, attempt_all).
WITHOUT_QUICK_PROBES = {"11_scaling", "13_parallelism"}


def test_the_kernel_side_of_the_course_runs_on_the_kernel_view(tmp_path):
    """A copy of the package whose checks are their kernel views, as a sandboxed kernel sees
    it: every checks module and every runtime module imports, and the guard installs and
    writes its first record (it takes ``grading_mode`` from the checks' common module)."""
    import json
    import shutil
    import subprocess
    import sys

    from grader.grading import kernel_view

    copy = tmp_path / "course"
    shutil.copytree(
        course.PACKAGE, copy / "grader",
        ignore=shutil.ignore_patterns("__pycache__", "samples", "work"),
    )  # fmt: skip
    for real, source in kernel_view.views().items():
        (copy / "grader" / "checks" / real.relative_to(kernel_view.checks_folder())).write_text(
            source
        )
    log = tmp_path / "audit.jsonl"
    settings = tmp_path / "guard.json"
    settings.write_text(json.dumps({"assignment": "03_streams", "audit_log": str(log)}))
    modules = [kernel_view._module_name(p) for p in kernel_view.views()] + [
        f"grader.runtime.{p.stem}" for p in (course.PACKAGE / "runtime").glob("*.py")
    ]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "import grader.grading.guard as guard\n"
        f"guard.install({str(settings)!r}, consume=True)\n"
        "assert guard.__file__.startswith(sys.argv[1]), guard.__file__\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(copy)], cwd=copy, capture_output=True, text=True,
        timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(copy)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not settings.exists()  # consumed
    from grader.grading import guard

    assert guard.read_log(log)[0]["kind"] == "installed"
