"""What notebooks and checks run on: the bottom layer of :mod:`grader`.

Lives here: the course's facts (:mod:`~grader.runtime.course`: lessons, folders, grade ids, the
reference loader), the CPU stand-ins for GPU behaviour (:mod:`~grader.runtime.simulate` and the
``simulated_site/`` start-up hook of a simulated multi-GPU process), the profiler-trace reader
(:mod:`~grader.runtime.trace`) and per-rank timelines (:mod:`~grader.runtime.timeline`), CPU
process groups (:mod:`~grader.runtime.distributed`), the collectives a rank calls, recorded at the
dispatcher (:mod:`~grader.runtime.collectives`), per-rank timelines of a pipeline's stages
(:mod:`~grader.runtime.pipeline_timeline`), data sets (:mod:`~grader.runtime.datasets`),
figures measured on a GPU or published for one (:mod:`~grader.runtime.recorded`), the text of
CUDA errors that the CPU stand-ins word differently (:mod:`~grader.runtime.cuda_messages`), Triton
kernels on the CPU under Triton's interpreter with the bytes they load and store
(:mod:`~grader.runtime.triton_cpu`), the same kernels compiled for sm_90 and sm_80 without a GPU,
with their registers, shared memory and occupancy (:mod:`~grader.runtime.triton_compile`), what
torch, its profiler and child processes write to stderr kept out of a test cell's outputs
(:mod:`~grader.runtime.quiet`), and the probe protocol between a student's kernel and the
grading process (:mod:`~grader.runtime.remote`, :mod:`~grader.runtime.handover`).

May import: the standard library, third-party packages, and other modules of this package. Never
:mod:`grader.checks`, :mod:`grader.grading` or :mod:`grader.tools` (``tests/test_layout.py``).
"""

from grader.runtime.quiet import drop_torch_notices

drop_torch_notices()  # torch's log lines no student asked for stay out of notebooks
