"""Where the course's files are, and how to read its notebooks' nbgrader cells.

Assignment ids are folder names (``01_devices``); each assignment folder holds one
notebook named after it: ``solutions/01_devices/01_devices.ipynb`` is the instructor
source, ``notebooks/01_devices/01_devices.ipynb`` the generated student copy.
"""

from __future__ import annotations

import functools
import json
import linecache
import sys
import types
from dataclasses import dataclass
from pathlib import Path

#: The ``grader`` package folder and the repository that holds it.
PACKAGE = Path(__file__).resolve().parents[1]
REPO = PACKAGE.parent
SOLUTIONS = REPO / "solutions"
NOTEBOOKS = REPO / "notebooks"
IMAGES = REPO / "images"
#: Real GPU profiler traces recorded by others (Kineto JSON, gzipped), with their licence.
TRACES = REPO / "traces"
WORK = REPO / "grader" / "work"

#: Files and folders the notebooks write into their own folder when run (07's ``%%writefile``
#: cell, 10's simulated traces for Perfetto): git-ignored, and never copied by nbgrader into a
#: release or an autograded folder.
WRITTEN_FILES = ["ddp_script.py", "perfetto_traces"]

#: Grade ids of test cells that need a CUDA GPU end with this suffix.
CUDA_SUFFIX = "_cuda"

_WRITEFILE = "%%writefile"


@dataclass(frozen=True)
class Lesson:
    """One row of the course index."""

    id: str
    title: str
    topics: str
    hardware: str
    hours: float


#: The course index: every notebook, in order, with what it needs and roughly how long it
#: takes. ``python -m grader release`` writes it to ``notebooks/README.md``; the same table
#: is in the top-level README (tests keep both in sync with this list).
LESSONS = [
    Lesson(
        "01_devices",
        "Devices and data placement",
        "CPU vs GPU, `torch.device`, `.to`, `CUDA_VISIBLE_DEVICES`, reproducibility, monitoring",
        "CPU (GPU optional)",
        1,
    ),
    Lesson(
        "02_async",
        "Asynchronous execution and timing",
        "asynchronous execution, synchronization points, correct timing, profiler timelines",
        "CPU (GPU optional)",
        1.5,
    ),
    Lesson(
        "03_streams",
        "CUDA streams and overlap",
        "CUDA streams, `wait_stream` and events, `record_stream`, overlapping copies with "
        "compute, CPU and GPU at once",
        "CPU (simulated GPU; GPU optional)",
        1.5,
    ),
    Lesson(
        "04_memory",
        "GPU memory",
        "caching allocator, memory of a training step, snapshots and memory_viz, NVML and "
        "OOM, leaks, pinned bandwidth",
        "CPU (simulated allocator; GPU optional)",
        1.5,
    ),
    Lesson(
        "05_tensor_cores",
        "Tensor Cores: shapes, dtypes, layouts",
        "Tensor Core alignment rules, TF32, channels_last, tile and wave quantization, "
        "vocabulary padding, three cases",
        "CPU (speed needs a GPU)",
        1.5,
    ),
    Lesson(
        "06_amp",
        "Automatic mixed precision",
        "float16 vs bfloat16, `torch.autocast` policies on CUDA and CPU, `GradScaler` and a "
        "loss-scale trace, ResNet-18 on CIFAR-10 with AMP",
        "CPU (speed needs a GPU)",
        1.5,
    ),
    Lesson(
        "07_multi_gpu",
        "Data parallel, DDP, model parallel",
        "data/model/channel parallelism, DataParallel vs DDP, process groups and collectives "
        "(gloo, NCCL), `DistributedSampler`, `mp.spawn` and `torchrun`, model parallelism, "
        "automatic parallelism",
        "CPU (2 gloo processes; several GPUs optional)",
        2,
    ),
    Lesson(
        "08_cpu_parallelism",
        "Processes, threads, the GIL and data loading",
        "cores, processes, threads and coroutines, the GIL measured, `torch.set_num_threads`, "
        "a parallel map, `DataLoader` workers and their traps, throughput against `num_workers`",
        "CPU (several cores help)",
        1.5,
    ),
    Lesson(
        "09_compilation",
        "Imperative vs symbolic: compile, export, CUDA graphs",
        "eager vs graphs, TorchScript (superseded), `torch.compile` and graph breaks, "
        "`torch.export`, CUDA graphs",
        "CPU (C++ compiler; CUDA graphs need a GPU)",
        1.5,
    ),
    Lesson(
        "10_profiling",
        "Profiling: rooflines and traces",
        "arithmetic intensity and rooflines, `FlopCounterMode`, measured ceilings, "
        "`torch.profiler` traces, hidden syncs, launch-bound steps and fusion, copy/compute "
        "overlap graded from traces, a GPU's idle and exposed time graded on real A100 traces",
        "CPU (simulated GPU traces; GPU optional)",
        1.5,
    ),
    Lesson(
        "11_scaling",
        "Scaling: DDP internals and memory at scale",
        "gradient hooks, buckets and overlapped all-reduce (a per-rank timeline), `no_sync`, "
        "mixed-precision memory, ZeRO-1 by hand, FSDP2 `fully_shard`, activation "
        "checkpointing, all-reduce volume and NVLink/PCIe/InfiniBand bandwidth, a real DDP "
        "trace read by the course and by Holistic Trace Analysis",
        "CPU (2 gloo processes; several GPUs optional)",
        2,
    ),
    Lesson(
        "12_triton",
        "Writing GPU kernels with Triton",
        "CUDA's model in Triton's terms (grid, program instances, blocks, masks), a fused "
        "bias + GELU, a row softmax read once, a tiled autotuned matmul with `tl.dot`, online-"
        "softmax attention and its backward, bytes and races counted in Triton's interpreter, "
        "registers, shared memory and occupancy from Triton's compiler for an H100 without one, "
        "`torch.compile`, `triton_op` and Inductor's generated kernels",
        "CPU (Triton interpreter; speed needs a GPU)",
        2,
    ),
    Lesson(
        "13_parallelism",
        "Tensor, sequence and pipeline parallelism, measured",
        "Megatron's column/row split by hand and with `DTensor` and `parallelize_module`, "
        "attention heads across ranks, sequence parallelism and the activations it saves, "
        "GPipe and 1F1B with `torch.distributed.pipelining` and the bubble measured, a 2-D mesh "
        "(FSDP2 × TP), collectives benchmarked (algbw, busbw, latency and bandwidth fitted), "
        "MFU and HFU from a measured throughput, resharding checkpoints with "
        "`torch.distributed.checkpoint`",
        "CPU (2–4 gloo processes; several GPUs optional)",
        2,
    ),
]


def index_table(link_prefix: str = "") -> str:
    """The course index as a Markdown table (one row per lesson of :data:`LESSONS`).

    Args:
        link_prefix: Path from the Markdown file to ``notebooks/`` (``""`` inside it,
            ``"notebooks/"`` from the repository root), for the links to each notebook.
    """
    rows = [
        "| # | notebook | topics | hardware | time |",
        "|---|---|---|---|---|",
    ]
    for lesson in LESSONS:
        number = lesson.id.split("_", 1)[0]
        rows.append(
            f"| {number} | [`{lesson.id}`]({link_prefix}{lesson.id}/{lesson.id}.ipynb) | "
            f"{lesson.topics} | {lesson.hardware} | "
            f"~{lesson.hours:g} h |"
        )
    return "\n".join(rows) + "\n"


def index_markdown() -> str:
    """``notebooks/README.md``: the generated course index."""
    total = sum(lesson.hours for lesson in LESSONS)
    return (
        "<!-- Generated by `python -m grader release` from grader/runtime/course.py (LESSONS); "
        "do not edit. -->\n"
        "# GPU & Parallel PyTorch: the notebooks\n\n"
        f"{len(LESSONS)} lessons, about {total:g} hours in all, to take in order. Open each folder's "
        "notebook in JupyterLab. **CPU** means the notebook runs completely without a GPU "
        "(cells that need one say so and show a figure recorded on a real GPU instead); "
        "checks marked *CUDA* are graded on a GPU by your instructor.\n\n" + index_table()
    )


def assignments() -> list[str]:
    """Assignment ids in course order: the folders of ``solutions/`` holding a notebook."""
    if not SOLUTIONS.is_dir():
        raise FileNotFoundError(
            f"no solutions/ folder at {SOLUTIONS}: run from a full course checkout"
        )
    return sorted(p.name for p in SOLUTIONS.iterdir() if (p / f"{p.name}.ipynb").is_file())


def check_assignment(assignment_id: str) -> str:
    """Return ``assignment_id`` if it exists, else raise naming the ones that do.

    Raises:
        ValueError: unknown assignment id.
    """
    known = assignments()
    if assignment_id not in known:
        raise ValueError(
            f"unknown assignment {assignment_id!r}; the course has: {', '.join(known)}"
        )
    return assignment_id


def source_path(assignment_id: str) -> Path:
    """Path of the instructor source notebook of an assignment."""
    return SOLUTIONS / assignment_id / f"{assignment_id}.ipynb"


def release_path(assignment_id: str) -> Path:
    """Path of the committed student copy of an assignment."""
    return NOTEBOOKS / assignment_id / f"{assignment_id}.ipynb"


def read(path: Path):
    """Read a notebook as nbformat 4 (an ``nbformat.NotebookNode``)."""
    import nbformat  # here, not at the top: grading kernels import this module, not nbformat

    return nbformat.read(str(path), as_version=4)


def _solution_sources(path: Path) -> list[tuple[str, str]]:
    """(grade id, source) of the solution cells, read as plain JSON.

    The kernels that run checks only need these; plain JSON spares each of them nbformat's
    import (about 2 s: jsonschema's format checkers compile a grammar when imported)."""
    cells = json.loads(Path(path).read_text())["cells"]
    out = []
    for cell in cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") == "code" and meta.get("solution"):
            source = cell["source"]
            out.append((meta["grade_id"], "".join(source) if isinstance(source, list) else source))
    return out


def nbgrader_meta(cell) -> dict:
    """The cell's ``nbgrader`` metadata, or an empty dict."""
    return cell.get("metadata", {}).get("nbgrader", {})


def solution_cells(nb) -> list:
    """Code cells the student writes (``solution: true``), in notebook order."""
    return [c for c in nb.cells if c.cell_type == "code" and nbgrader_meta(c).get("solution")]


@dataclass(frozen=True)
class TestCell:
    """A graded test cell: its grade id, points and source."""

    grade_id: str
    points: float
    source: str

    @property
    def needs_cuda(self) -> bool:
        """Whether this cell checks something only a CUDA GPU can show."""
        return self.grade_id.endswith(CUDA_SUFFIX)


def test_cells(nb) -> list[TestCell]:
    """Autograded test cells (``grade: true`` code cells without a solution)."""
    out = []
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            out.append(TestCell(meta["grade_id"], float(meta.get("points", 0)), cell.source))
    return out


#: Tag of a teaching demo cell: it defines nothing that a later cell reads, so the course's
#: autograde command does not re-run it when it is unchanged (tests/test_release.py checks it).
DEMO_TAG = "demo"


def demo_sources(nb) -> list[str]:
    """Sources of the ``demo``-tagged code cells that are not nbgrader cells, in order."""
    return [
        c.source
        for c in nb.cells
        if c.cell_type == "code"
        and DEMO_TAG in c.get("metadata", {}).get("tags", [])
        and not nbgrader_meta(c).get("grade")
        and not nbgrader_meta(c).get("solution")
    ]


def strip_solution_markers(source: str) -> str:
    """Drop the ``### BEGIN SOLUTION`` / ``### END SOLUTION`` lines of a source cell."""
    keep = [
        line
        for line in source.splitlines()
        if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")
    ]
    return "\n".join(keep)


def split_writefile(source: str) -> tuple[str | None, str]:
    """Split a ``%%writefile <path>`` cell into its path and the file's text.

    Returns:
        ``(path, body)`` for a ``%%writefile`` cell, ``(None, source)`` for any other cell.
    """
    first, _, body = source.partition("\n")
    if first.startswith(_WRITEFILE + " "):
        return first[len(_WRITEFILE) :].strip(), body
    return None, source


def writefile_line(source: str) -> str | None:
    """The ``%%writefile <path>`` line a cell starts with, or None."""
    path, _ = split_writefile(source)
    return f"{_WRITEFILE} {path}" if path else None


@functools.cache
def reference(assignment_id: str) -> types.ModuleType:
    """The reference solution of an assignment, loaded from its source notebook.

    The solution cells of ``solutions/<id>/<id>.ipynb`` are executed, in order, in a fresh
    module named ``reference_<id>`` (each solution cell imports what it uses), so the
    reference exists once, in ``solutions/``, and hidden tests compare against it. The module
    is registered in ``sys.modules``, as an imported module would be: tracers such as
    ``torch._dynamo`` import a function's module by name (on torch 2.11 a namespace that is not
    a real module makes ``torch.compile`` of a reference function fail). A ``%%writefile``
    cell (a script) is executed as a module body: its functions are defined, its
    ``if __name__ == "__main__":`` block does not run.

    Only the grading side calls this (checks, hidden tests, the course's tests); the
    student's kernel never needs it.

    Returns:
        A module with the reference's functions and constants as attributes.

    Raises:
        ValueError: unknown assignment id.
        FileNotFoundError: the source notebook is missing.
    """
    check_assignment(assignment_id)
    name = f"reference_{assignment_id}"
    module = types.ModuleType(name, f"Reference solution of {assignment_id} (solutions/)")
    module.__file__ = str(source_path(assignment_id))
    sys.modules[name] = module
    try:
        for grade_id, source in _solution_sources(source_path(assignment_id)):
            _, body = split_writefile(source)
            text = strip_solution_markers(body)
            filename = f"<reference {assignment_id}:{grade_id}>"
            # In the line cache, as IPython registers a notebook's cells: `inspect.getsource`
            # finds the reference's functions and classes, so they can be rebuilt in a spawned
            # rank (grader.runtime.distributed), and tracebacks show the reference's lines.
            linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
            code = compile(
                text,
                filename,
                "exec",
                dont_inherit=True,  # no `from __future__ import annotations` from this module
            )
            exec(code, vars(module))  # noqa: S102 - the course's own reference solutions
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
