"""The record of what the GPU runs proved (``images/gpu_verification.json``): read from a lease's
files, kept whole, and shown in the README as the file says."""

import json

import pytest

from grader.runtime import course
from grader.tools import gpu_record

MACHINE = """\
| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     |
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:00:06.0 Off |                    0 |
|   1  NVIDIA H100 80GB HBM3          On  |   00000000:00:07.0 Off |                    0 |
torch                     2.11.0
torch 2.11.0+cu130 cuda 13.0 triton 3.6.0
2026-12-01T10:00:00Z
"""
MEASURE = (
    "measuring:   0%|  | 0/1 [00:00<?, ?group/s]   triton_bias_gelu_vs_torch: 2.35 x  [note]\n"
    "triton_softmax_bandwidth: 3.73e+03 GB/s = 78% of peak (4800 GB/s)  [note]\n"
    "Wrote 2 figures to images/recorded_figures.json\nmeasure rc 0 after 43 s\n"
)
PART1_LOG = """\
[gw0] [ 10%] PASSED tests/test_cuda.py::test_reference_passes_every_cell_on_the_gpu[01_devices]
[gw1] [ 20%] FAILED tests/test_cuda.py::test_reference_passes_every_cell_on_the_gpu[12_triton]
tests/test_cuda.py::test_timeline_has_gpu_kernels PASSED
"""


def _demo_rows(ok_flags):
    return {"gpu": True, "results": [
        {"student": f"s{i}", "assignment": "13_parallelism", "score": 16.0 if ok else 3.0,
         "max_score": 16.0, "ok": ok} for i, ok in enumerate(ok_flags)]}  # fmt: skip


@pytest.fixture
def lease(tmp_path):
    (tmp_path / "machine.txt").write_text(MACHINE)
    (tmp_path / "measure.log").write_text(MEASURE)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "part1.log").write_text(PART1_LOG)
    step = {"name": "pytest-cuda", "ok": False,
            "summary": {"summary": "2 passed, 1 failed in 9.1s", "failed": ["x[12_triton]"]}}  # fmt: skip
    (tmp_path / "tests" / "part1.json").write_text(json.dumps({"steps": [step]}))
    (tmp_path / "demo-13_parallelism.json").write_text(json.dumps(_demo_rows([True, True])))
    (tmp_path / "demo-01_devices.json").write_text(json.dumps(_demo_rows([True, False])))
    return tmp_path


def test_a_lease_folder_becomes_a_run_record(lease):
    run = gpu_record.record_from_lease(lease, "abc1234", "a note")
    assert (run["device"], run["gpus"], run["driver"]) == ("NVIDIA H100 80GB HBM3", 2, "580.159.04")
    assert (run["torch"], run["cuda"], run["triton"]) == ("2.11.0+cu130", "13.0", "3.6.0")
    assert run["date"] == "2026-12-01" and run["commit"] == "abc1234" and run["note"] == "a note"
    assert run["parts"]["measure"]["figures"] == [
        "triton_bias_gelu_vs_torch", "triton_softmax_bandwidth"]  # fmt: skip
    assert run["parts"]["measure"]["recorded"] == 2
    tests = run["parts"]["cuda_tests"]
    assert (tests["passed"], tests["failed"], tests["result"]) == (2, 1, "failed")
    assert tests["reference_every_cell"] == {"01_devices": "passed", "12_triton": "failed"}
    assert run["assignments"]["13_parallelism"]["demo"]["result"] == "passed"
    bad = run["assignments"]["01_devices"]["demo"]
    assert bad["result"] == "failed" and bad["not_as_declared"] == ["s1: 3/16"]


def test_status_says_what_is_proved_and_what_is_open(lease, tmp_path):
    record = tmp_path / "record.json"
    gpu_record.add_run(gpu_record.record_from_lease(lease, "abc1234"), record)
    status = gpu_record.status(gpu_record.load(record))
    assert set(status) == set(course.assignments())
    assert status["13_parallelism"] == {"reference": None, "samples": "demo 2026-12-01",
                                        "open": ["the reference on CUDA"]}  # fmt: skip
    assert status["01_devices"]["reference"] == "2026-12-01"
    assert "1 of 2 as declared" in status["01_devices"]["open"][0]
    assert status["12_triton"]["open"][0] == "the reference on CUDA"
    with pytest.raises(FileNotFoundError):
        gpu_record.record_from_lease(tmp_path / "nothing", "abc1234")


def test_the_record_file_holds_whole_runs():
    runs = gpu_record.load()
    assert runs, "images/gpu_verification.json holds no run"
    for run in runs:
        assert {"date", "device", "gpus", "driver", "cuda", "torch", "triton", "commit", "parts",
                "assignments"} <= set(run)  # fmt: skip
        assert set(run["assignments"]) <= set(course.assignments())
        for part in run["parts"].values():
            assert part["result"] in ("passed", "failed")


def test_the_readme_shows_the_record_as_it_is():
    readme = (course.REPO / "README.md").read_text()
    assert gpu_record.readme_block(readme) == gpu_record.table(), (
        "README.md's block differs from images/gpu_verification.json: paste "
        "`python -m grader gpu-record --table` between its markers"
    )
