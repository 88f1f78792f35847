"""The whole sample class (every sample of every assignment, 171 notebooks) autograded by the
real nbgrader: what `tests/test_pipeline.py` proves for the core class, for every sample.

Marked ``whole_class``: the README's test command leaves it out (about 35 minutes on 2 cores);
``python -m grader verify-gpu`` and ``pytest -m whole_class`` run it."""

import pytest
import torch

from grader.runtime import course
from grader.tools import samples

from .helpers import run_demo

pytestmark = [pytest.mark.slow, pytest.mark.whole_class, pytest.mark.timeout(5400)]
GPU = torch.cuda.is_available()


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """`python -m grader demo` (the full class), two submissions at a time."""
    return run_demo(tmp_path_factory.mktemp("whole"), "full")


def test_the_whole_class_scores_as_every_sample_declares(demo):
    proc = demo["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Every score is as expected." in proc.stdout
    bad = [r for r in demo["cells"].values() if not r["ok"]]
    assert not bad, bad


def test_every_sample_was_graded_by_nbgrader(demo):
    graded = {name for st in samples.demo_class() for name in st.samples}
    expected = {
        f"{aid}/{s.name}" for aid in course.assignments() for s in samples.load_samples(aid)
    }
    assert graded == expected
    assert {(r[0], r[1]) for r in demo["cells"]} == {
        (st.name, aid) for st in samples.demo_class() for aid in st.notebooks
    }
