"""Grading beyond one machine: shards graded in separate processes and merged, CUDA cells routed
to other machines and merged back, and a real local Ray cluster (a head and a second node
process on this machine) that grades the same class, including when a node dies mid-class.
Each way must yield exactly the gradebook that single-machine grading yields. Slow (minutes)."""

from __future__ import annotations

import csv
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nbgrader.api import Gradebook

from grader.grading import grading
from grader.runtime import course
from grader.tools import samples

from .helpers import autograde_flags, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
A = "03_streams"  # the cheapest to grade of the assignments with _cuda cells
STUDENTS = ("reference", "blank", "mistakes_1", "alternative_1")


def _write_class(folder: Path) -> None:
    for student in samples.demo_class([A]):
        if student.name in STUDENTS:
            out = folder / student.name / A
            out.mkdir(parents=True)
            nbformat.write(student.notebooks[A], str(out / f"{A}.ipynb"))


def _grader(*args: str, timeout: int = 1200) -> subprocess.CompletedProcess:
    if args[0] == "autograde":
        args = (*args, *autograde_flags())
    proc = subprocess.run(
        [sys.executable, "-m", "grader", *args], capture_output=True, text=True,
        cwd=course.REPO, timeout=timeout,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _grades(work: Path) -> dict[tuple[str, str], float]:
    """(student, grade id) -> score, from the working folder's nbgrader gradebook."""
    out = {}
    with Gradebook(f"sqlite:///{work / 'gradebook.db'}") as gb:
        for sub in gb.assignment_submissions(A):
            for nb in sub.notebooks:
                for grade in nb.grades:
                    out[sub.student.id, grade.name] = float(grade.score or 0)
    return out


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """The class graded on this machine in one run: what every other way must reproduce."""
    root = tmp_path_factory.mktemp("scale")
    submitted = root / "submitted"
    _write_class(submitted)
    work = root / "single"
    _grader("autograde", str(submitted), "--work", str(work), "--cpu-ok", "--jobs", "2")
    return {"root": root, "submitted": submitted, "grades": _grades(work)}


@given(st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=60), st.integers(1, 9))
def test_every_student_lands_in_exactly_one_stable_shard(students, n):
    shards = [grading.shard_of(s, n) for s in students]
    assert all(0 <= k < n for k in shards)
    assert shards == [grading.shard_of(s, n) for s in students]


@pytest.mark.parametrize(
    "gpus, fraction", [(0, 1.0), (0.25, 0.225), (0.5, 0.45), (1, 0.9), (2, 0.9)]
)
def test_a_ray_task_kernel_gets_its_share_of_the_gpu_it_was_given(gpus, fraction):
    """Tasks that ask Ray for a fraction of a GPU share it: each kernel is capped at its part
    (before, at the driver's share, which was all of it when the driver had no GPU)."""
    from grader.grading.ray_engine import task_gpu_fraction

    assert task_gpu_fraction(gpus) == pytest.approx(fraction)


def test_the_deploy_recipes_call_the_command_as_it_is():
    """The Slurm script parses as bash and its grading line is accepted by the command's parser;
    the Kubernetes manifest is an Indexed Job whose pod runs the same command."""
    import os
    import tempfile

    import yaml

    from grader.__main__ import build_parser

    deploy = course.REPO / "grader" / "deploy"
    script = deploy / "slurm-autograde.sbatch"
    subprocess.run(["bash", "-n", str(script)], check=True)
    with tempfile.TemporaryDirectory() as fake:  # a course whose python prints its arguments
        python = Path(fake) / ".venv" / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
        python.chmod(0o755)
        env = {
            "PATH": os.environ["PATH"], "HOME": fake, "COURSE": fake, "SLURM_ARRAY_TASK_ID": "2",
            "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_CPUS_PER_TASK": "8",
        }  # fmt: skip
        out = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    argv = out.stdout.splitlines()
    assert argv[:2] == ["-m", "grader"], out.stderr
    parsed = build_parser().parse_args(argv[2:])
    assert parsed.command == "autograde" and parsed.shard == "2/4" and parsed.cells == "no-cuda"
    assert parsed.jobs == 4 and "shard-no-cuda-2-of-4" in str(parsed.work)
    job = yaml.safe_load((deploy / "k8s-autograde-job.yaml").read_text())
    assert job["kind"] == "Job" and job["spec"]["completionMode"] == "Indexed"
    command = " ".join(job["spec"]["template"]["spec"]["containers"][0]["args"])
    assert "grader autograde" in command and "--shard" in command


def test_shards_graded_apart_and_merged_equal_one_run(single):
    root, submitted = single["root"], single["submitted"]
    shards = [root / "shard-1", root / "shard-2"]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "grader",
                "autograde",
                str(submitted),
                "--work",
                str(w),
                "--cpu-ok",
                "--jobs",
                "1",
                "--shard",
                f"{k}/2",
            ],
            cwd=course.REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for k, w in enumerate(shards, start=1)
    ]
    for proc in procs:
        out, _ = proc.communicate(timeout=1200)
        assert proc.returncode == 0, out[-3000:]
    graded = [set(grading.load_manifest(w)) for w in shards]
    assert not graded[0] & graded[1] and len(graded[0] | graded[1]) == len(STUDENTS)
    merged = root / "merged"
    report = root / "merged.csv"
    _grader("merge", *map(str, shards), "--work", str(merged), "--report", str(report))
    assert _grades(merged) == single["grades"]
    assert {r["student"] for r in csv.DictReader(report.open())} == set(STUDENTS)
    first = (merged / "gradebook.db").read_bytes()
    _grader("merge", *map(str, shards), "--work", str(merged))  # again: nothing changes
    assert _grades(merged) == single["grades"]
    assert len((merged / "gradebook.db").read_bytes()) == len(first)
    for student in STUDENTS:
        assert (merged / "autograded" / student / A / f"{A}.ipynb").is_file()


def test_cuda_cells_graded_elsewhere_merge_back(single):
    """A CPU node grades everything but the _cuda cells, a (here: CPU, --cpu-ok) GPU node only
    those; merged, the gradebook equals grading all cells at once."""
    root, submitted = single["root"], single["submitted"]
    cpu, gpu = root / "cpu-node", root / "gpu-node"
    _grader("autograde", str(submitted), "--work", str(cpu), "--no-cuda", "--jobs", "2")
    _grader(
        "autograde", str(submitted), "--work", str(gpu), "--only-cuda", "--cpu-ok", "--jobs", "2"
    )
    manifest = grading.load_manifest(cpu)
    assert all(
        set(r["deferred"]) == {c for c in r["cells"] if c.endswith("_cuda")}
        for r in manifest.values()
        if r["status"] == "graded"
    )
    merged = root / "merged-cells"
    _grader("merge", str(cpu), str(gpu), "--work", str(merged))
    assert _grades(merged) == single["grades"]
    text = (merged / "autograded" / "reference" / A / f"{A}.ipynb").read_text()
    assert "Deferred" not in text


# --------------------------------------------------------------------------- Ray
try:
    import ray
except ImportError:  # the GPU machines have no Ray: the engine is optional
    ray = None

needs_ray = pytest.mark.skipif(ray is None, reason="Ray is not installed here")


@pytest.fixture
def cluster():
    """A head and a second node process on this machine, one CPU each."""
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    node = c.add_node(num_cpus=1)
    c.wait_for_nodes()
    try:
        yield c, node
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


@needs_ray
def test_a_ray_cluster_yields_the_same_gradebook(single, cluster):
    c, _ = cluster
    work = single["root"] / "ray"
    proc = _grader(
        "autograde", str(single["submitted"]), "--work", str(work), "--cpu-ok",
        "--engine", "ray", "--address", c.address,
    )  # fmt: skip
    assert _grades(work) == single["grades"]
    assert "Ray: 2 node(s)" in proc.stderr + proc.stdout


@needs_ray
def test_a_node_that_dies_mid_class_is_recovered(single, cluster):
    c, node = cluster
    work = single["root"] / "ray-killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "grader", "autograde", str(single["submitted"]), "--work",
         str(work), "--cpu-ok", "--engine", "ray", "--address", c.address, *autograde_flags()],
        cwd=course.REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    # wait until the second node is grading, then kill it (its raylet and workers)
    wait_for(lambda: _node_busy(node) or proc.poll() is not None, 300, "a task on the node")
    assert proc.poll() is None, "the class finished before the node could be killed"
    c.remove_node(node, allow_graceful=False)
    out, _ = proc.communicate(timeout=1500)
    assert proc.returncode == 0, out[-3000:]
    assert _grades(work) == single["grades"]
    manifest = grading.load_manifest(work)
    assert len(manifest) == len(STUDENTS)


def _node_busy(node) -> bool:
    import psutil

    try:
        raylet = psutil.Process(node.all_processes["raylet"][0].process.pid)
        # a kernel under the node's raylet: a job is grading there (the fork server that
        # starts jobs stays between them, so its command line says nothing)
        return any("ipykernel" in " ".join(p.cmdline()) for p in raylet.children(recursive=True))
    except (psutil.Error, KeyError, IndexError, AttributeError):
        time.sleep(0.2)
        return False
