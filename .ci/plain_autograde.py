"""Grade one assignment's whole sample class with plain ``nbgrader autograde`` (the course's
configuration from ``JUPYTER_CONFIG_PATH=grader``, no course command) and compare every score
with what its samples must score: the reference full marks (less CUDA cells without a GPU), the
blank copy zero, each mistake exactly its cells, each alternative full marks. Exit status 1 if
any score differs. Not part of CI (minutes per assignment; ``tests/test_nbgrader_flow.py`` runs
plain nbgrader on one assignment there); run it after adding or changing an assignment:

    .venv/bin/python .ci/plain_autograde.py 13_parallelism
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from nbgrader.api import Gradebook

from grader.grading.config import COURSE_ID
from grader.runtime import course
from grader.tools import samples

aid = sys.argv[1]
NBGRADER = str(Path(sys.executable).parent / "nbgrader")
root = Path(tempfile.mkdtemp(prefix="plain-"))
work, release = root / "work", root / "release"
env = {
    **os.environ,
    "JUPYTER_CONFIG_PATH": str(course.REPO / "grader"),
    "GPU_COURSE_WORK": str(work),
}
rel = f"--CourseDirectory.release_directory={release}"


def nb(*args):
    p = subprocess.run([NBGRADER, *args], cwd=course.REPO, env=env, capture_output=True, text=True)
    if p.returncode:
        print(p.stdout[-3000:], p.stderr[-3000:])
        raise SystemExit(f"nbgrader {args} failed")
    return p


nb("generate_assignment", aid, "--force", rel)
students = samples.demo_class([aid])
samples.write_class(students, work / "submitted")
t0 = time.time()
nb("autograde", aid, "--force", rel)
print(f"autograde of {len(students)} notebooks: {time.time() - t0:.0f} s")
gpu = torch.cuda.is_available()
nbk = course.read(course.source_path(aid))
points = {t.grade_id: t.points for t in course.test_cells(nbk)}
cuda = {t.grade_id for t in course.test_cells(nbk) if t.needs_cuda}
bad = 0
with Gradebook(f"sqlite:///{work / 'gradebook.db'}", COURSE_ID) as gb:
    for st in students:
        sub = gb.find_submission_notebook(aid, aid, st.name)
        failed = {g.name for g in sub.grades if g.score < g.max_score and g.name in points}
        exp = st.expected[aid]["gpu" if gpu else "cpu"] | (set() if gpu else cuda)
        may = st.expected[aid].get("gpu_may", set()) if gpu else set()
        ok = exp <= failed <= exp | may
        bad += not ok
        print(
            f"{st.name:16} {sub.score:5.1f}/{sub.max_score:5.1f} {'ok' if ok else 'NO'}"
            + ("" if ok else f"  failed {sorted(failed)} expected {sorted(exp)}")
        )
print("ALL AS EXPECTED" if not bad else f"{bad} DIFFER")
print(root)
sys.exit(1 if bad else 0)
