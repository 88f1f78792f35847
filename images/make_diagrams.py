"""Draw the course's explanatory diagrams (not measurements) into images/<notebook>/.

Run from the repository root: ``python images/make_diagrams.py``. The PNGs are committed;
rerun after changing a drawing.
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402

HERE = Path(__file__).resolve().parent


def async_queue(path: Path) -> None:
    """Frontend launches kernels into a stream; the GPU runs them later, in order."""
    fig, ax = plt.subplots(figsize=(9, 3.2), dpi=120)
    launches = [(0.2 + 0.55 * i, f"launch {i + 1}") for i in range(5)]
    kernels = [(0.9 + 1.2 * i, f"kernel {i + 1}") for i in range(5)]
    for x, label in launches:
        ax.add_patch(Rectangle((x, 2.0), 0.45, 0.6, color="tab:orange"))
        ax.text(x + 0.225, 2.3, label, ha="center", va="center", fontsize=7)
    ax.add_patch(Rectangle((3.1, 2.0), 2.7, 0.6, color="tab:red", alpha=0.25))
    ax.text(
        4.45,
        2.3,
        "CPU free: prepares the next batch\n(or blocks at .item())",
        ha="center",
        va="center",
        fontsize=7,
    )
    for (x, label), (lx, _) in zip(kernels, launches):
        ax.add_patch(Rectangle((x, 0.5), 1.1, 0.6, color="tab:green"))
        ax.text(x + 0.55, 0.8, label, ha="center", va="center", fontsize=7)
        ax.add_artist(
            FancyArrowPatch(
                (lx + 0.225, 2.0), (x + 0.2, 1.1), arrowstyle="->", mutation_scale=8, color="grey"
            )
        )
    ax.text(
        0.0,
        2.95,
        "frontend (CPU: Python + dispatcher) enqueues kernel launches and returns at once",
        fontsize=8,
    )
    ax.text(0.0, 1.35, "backend (GPU stream) runs kernels in launch order, later", fontsize=8)
    ax.set(xlim=(0, 7.2), ylim=(0.2, 3.3), xlabel="time")
    ax.set_yticks([0.8, 2.3], ["GPU", "CPU"])
    ax.set_xticks([])
    ax.set_title("Asynchronous execution: the CPU runs ahead of the GPU")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def cpu_vs_gpu(path: Path) -> None:
    """A few big cores against many small lanes (counts from vendors' data sheets)."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), dpi=120)
    ax = axes[0]
    for i in range(8):
        ax.add_patch(
            Rectangle(((i % 4) * 1.0 + 0.1, (i // 4) * 1.0 + 0.1), 0.8, 0.8, color="tab:blue")
        )
    ax.set(
        xlim=(0, 4),
        ylim=(0, 2),
        title="CPU: few large cores\n(caches, branch prediction; low latency)",
    )
    ax.axis("off")
    ax = axes[1]
    for i in range(32 * 8):
        ax.add_patch(
            Rectangle(
                ((i % 32) * 0.125 + 0.01, (i // 32) * 0.25 + 0.01), 0.1, 0.22, color="tab:green"
            )
        )
    ax.set(
        xlim=(0, 4),
        ylim=(0, 2),
        title="GPU: many simple lanes in warps of 32\n(H100 SXM: 132 SMs, 16,896 FP32 lanes)",
    )
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def dp_vs_ddp(path: Path) -> None:
    """nn.DataParallel (one process, scatter/replicate/gather through GPU 0) against
    DistributedDataParallel (one process per GPU, gradients all-reduced)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), dpi=120)

    def box(ax, x, y, w, h, text, color, fs=7.5):
        ax.add_patch(Rectangle((x, y), w, h, color=color, alpha=0.85))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fs)

    def arrow(ax, a, b, color="0.3", style="-|>"):
        ax.add_patch(FancyArrowPatch(a, b, arrowstyle=style, mutation_scale=10, color=color))

    ax = axes[0]
    box(ax, 0.3, 3.3, 3.4, 0.55, "1 Python process (GIL): whole batch", "tab:orange")
    box(ax, 0.2, 1.6, 1.5, 1.1, "GPU 0\nreplica + scatter\n+ gather + loss\n+ optimizer", "tab:red")
    box(ax, 2.3, 1.6, 1.5, 1.1, "GPU 1\nreplica\n(copied every step)", "tab:green")
    arrow(ax, (1.2, 3.3), (0.95, 2.7))
    arrow(ax, (0.95, 1.6), (3.05, 1.6), style="<|-|>")
    ax.text(
        2.0,
        1.35,
        "scatter inputs, replicate weights,\ngather outputs: all through GPU 0",
        ha="center",
        va="top",
        fontsize=7.5,
    )
    ax.text(
        2.0,
        0.35,
        "GPU 0 does extra work and holds extra memory;\nthreads share one GIL",
        ha="center",
        fontsize=7.5,
        color="tab:red",
    )
    ax.set(xlim=(0, 4), ylim=(0, 4.1), title="nn.DataParallel (single process)")
    ax.axis("off")

    ax = axes[1]
    for i, x in enumerate((0.2, 2.3)):
        box(
            ax,
            x,
            3.2,
            1.5,
            0.65,
            f"process rank {i}\nits shard of the data\n(DistributedSampler)",
            "tab:orange",
        )
        box(
            ax,
            x,
            1.6,
            1.5,
            1.1,
            f"GPU {i}\nfull replica\nforward + backward\n+ optimizer step",
            "tab:green",
        )
        arrow(ax, (x + 0.75, 3.2), (x + 0.75, 2.7))
    arrow(ax, (1.7, 2.15), (2.3, 2.15), color="tab:blue", style="<|-|>")
    ax.text(
        2.0,
        1.35,
        "all-reduce of gradient buckets (NCCL),\noverlapped with backward",
        ha="center",
        va="top",
        fontsize=7.5,
        color="tab:blue",
    )
    ax.text(
        2.0,
        0.35,
        "every rank identical after each step;\nno main GPU, no GIL contention",
        ha="center",
        fontsize=7.5,
        color="tab:green",
    )
    ax.set(xlim=(0, 4), ylim=(0, 4.1), title="DistributedDataParallel (one process per GPU)")
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def cores_processes_threads(path: Path) -> None:
    """Cores run threads; processes own memory (and, in CPython, a GIL each); threads of a
    process share its memory and its GIL; coroutines take turns inside one thread."""
    fig, ax = plt.subplots(figsize=(10, 4.6), dpi=120)

    def box(x, y, w, h, text, color, alpha=0.85, fs=7.5, va="center", y_text=None):
        ax.add_patch(Rectangle((x, y), w, h, color=color, alpha=alpha))
        ax.text(
            x + w / 2,
            y_text if y_text is not None else y + h / 2,
            text,
            ha="center",
            va=va,
            fontsize=fs,
        )

    box(0.1, 3.9, 9.8, 0.6, "", "0.85", alpha=1)
    ax.text(0.2, 4.2, "machine:", fontsize=8, va="center")
    for i in range(4):
        box(1.2 + 2.2 * i, 3.98, 1.9, 0.44, f"core {i}", "tab:blue", fs=8)

    # process A: three threads sharing one GIL
    box(0.1, 0.3, 5.1, 3.3, "", "tab:orange", alpha=0.18)
    ax.text(0.25, 3.4, "process A (own memory, own GIL): threads share both", fontsize=8)
    box(
        0.35,
        2.55,
        4.6,
        0.55,
        "GIL: one thread at a time runs Python bytecode",
        "tab:red",
        alpha=0.35,
        fs=7.5,
    )
    for i, label in enumerate(
        [
            "thread 1\nPython code",
            "thread 2\ntorch op\n(GIL released)",
            "thread 3\nwaits on I/O\n(GIL released)",
        ]
    ):
        box(0.35 + 1.58 * i, 0.55, 1.45, 1.7, label, "tab:orange", fs=7.5)

    # process B: one thread with an event loop of coroutines
    box(5.5, 0.3, 4.4, 3.3, "", "tab:green", alpha=0.18)
    ax.text(5.65, 3.4, "process B: its own memory and GIL", fontsize=8)
    box(5.75, 0.55, 3.9, 2.55, "", "tab:green", alpha=0.45)
    ax.text(7.7, 2.85, "one thread, an asyncio event loop", fontsize=7.5, ha="center")
    for i in range(3):
        box(
            6.0 + 1.22 * i,
            1.2,
            1.05,
            1.2,
            f"coroutine {i + 1}\nruns until\nit awaits",
            "white",
            alpha=0.9,
            fs=7,
        )
    ax.text(7.7, 0.75, "they take turns: concurrency, not parallelism", fontsize=7.5, ha="center")
    ax.text(
        5.0,
        3.72,
        "the operating system schedules every thread of every process onto the cores",
        fontsize=7.5,
        ha="center",
        va="center",
    )
    ax.set(xlim=(0, 10), ylim=(0, 4.6))
    ax.set_title("Cores, processes, threads and coroutines")
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def eager_vs_compiled(path: Path) -> None:
    """Eager: Python dispatches every op, one kernel each. Compiled: a captured graph, fused
    kernels. CUDA graph: the whole recorded sequence replayed by one launch."""
    fig, axes = plt.subplots(3, 1, figsize=(9, 4.6), dpi=120, sharex=True)
    rows = [
        (
            "eager (imperative)",
            [("Python + dispatch", "tab:orange", 0.45), ("kernel", "tab:green", 0.3)] * 4,
        ),
        ("torch.compile", [("guards", "tab:orange", 0.25), ("fused kernel", "tab:green", 0.75)]),
        (
            "CUDA graph replay",
            [
                ("launch", "tab:orange", 0.2),
                ("k1", "tab:green", 0.3),
                ("k2", "tab:green", 0.3),
                ("k3", "tab:green", 0.3),
                ("k4", "tab:green", 0.3),
            ],
        ),
    ]
    for ax, (title, spans) in zip(axes, rows):
        x = 0.0
        for label, color, width in spans:
            ax.add_patch(Rectangle((x, 0.2), width, 0.6, color=color, alpha=0.85))
            ax.text(x + width / 2, 0.5, label, ha="center", va="center", fontsize=7)
            x += width + 0.03
        ax.set_ylim(0, 1)
        ax.set_yticks([])
        ax.set_ylabel(title, rotation=0, ha="right", va="center", fontsize=8, labelpad=6)
    axes[-1].set_xlim(0, 3.3)
    axes[-1].set_xlabel("time, schematic (orange: host work; green: device work)")
    axes[0].set_title(
        "Four small launch-bound ops: eager, compiled (fused), CUDA graph (one launch)"
    )
    fig.tight_layout()
    fig.subplots_adjust(left=0.2)
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    async_queue(HERE / "02_async" / "async_queue.png")
    cpu_vs_gpu(HERE / "01_devices" / "cpu_vs_gpu.png")
    (HERE / "07_multi_gpu").mkdir(exist_ok=True)
    dp_vs_ddp(HERE / "07_multi_gpu" / "dp_vs_ddp.png")
    (HERE / "08_cpu_parallelism").mkdir(exist_ok=True)
    cores_processes_threads(HERE / "08_cpu_parallelism" / "cores_processes_threads.png")
    (HERE / "09_compilation").mkdir(exist_ok=True)
    eager_vs_compiled(HERE / "09_compilation" / "eager_vs_compiled.png")
    print("diagrams written under", HERE)
