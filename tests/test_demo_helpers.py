"""Helpers the notebooks' demos use: recorded GPU figures and profiler timelines."""

import json

import matplotlib
import pytest
import torch

from grader.runtime import recorded
from grader.runtime.timeline import LANE_CPU_OPS, LANE_GPU, SYNC_OPS, plot_timeline, profile_spans

matplotlib.use("Agg")


def test_missing_figure_is_said_plainly(monkeypatch, tmp_path):
    monkeypatch.setattr(recorded, "RECORDED_FILE", tmp_path / "none.json")
    monkeypatch.setattr(recorded, "PUBLISHED_FILE", tmp_path / "none published.json")
    assert recorded.load() == [] and recorded.load_published() == []
    text = recorded.describe("matmul_bf16_8192", "bf16 matmul at 8192")
    assert text.startswith(
        "No reference figure for bf16 matmul at 8192 has been recorded on a real GPU yet"
    )


def test_recorded_figure_carries_its_provenance(monkeypatch, tmp_path):
    path = tmp_path / "recorded.json"
    rows = [
        {
            "figure": "f",
            "value": 1.0,
            "unit": "ms",
            "device": "old",
            "torch": "2.10",
            "date": "2026-01-01",
        },
        {
            "figure": "f",
            "value": 2.0,
            "unit": "ms",
            "device": "NVIDIA H100",
            "torch": "2.11.0",
            "date": "2026-11-13",
        },
    ]
    path.write_text(json.dumps(rows))
    monkeypatch.setattr(recorded, "RECORDED_FILE", path)
    assert (
        recorded.describe("f", "x")
        == "Recorded on a real GPU: x = 2.0 ms (NVIDIA H100, torch 2.11.0, 2026-11-13)."
    )


def test_incomplete_record_is_refused(monkeypatch, tmp_path):
    path = tmp_path / "recorded.json"
    path.write_text(json.dumps([{"figure": "f", "value": 1.0}]))
    monkeypatch.setattr(recorded, "RECORDED_FILE", path)
    with pytest.raises(ValueError, match="lacks"):
        recorded.load()


def test_timeline_marks_item_calls_and_plots():
    x = torch.randn(64, 64)

    def loop():
        for _ in range(3):
            (x @ x).sum().item()

    spans = profile_spans(loop)
    assert any(s.lane == LANE_CPU_OPS for s in spans)
    assert any(s.name in SYNC_OPS for s in spans)
    assert all(s.start_ms >= 0 and s.duration_ms >= 0 for s in spans)
    if not torch.cuda.is_available():
        assert not any(s.lane == LANE_GPU for s in spans)
    ax = plot_timeline(spans, "test", no_gpu_note="no GPU")
    assert "red" in ax.get_xlabel()


def test_timeline_draws_true_widths_when_asked():
    """By default a bar is at least 0.4 % of the time shown (sub-µs ops stay visible), which would
    overstate how busy a lane of many short kernels is; min_width_ms=0 keeps every width (11's
    real DDP trace)."""
    import matplotlib

    from grader.runtime.timeline import Span

    matplotlib.use("Agg")
    spans = [Span("s", "k", 0.0, 0.001), Span("s", "k", 99.0, 1.0)]
    widths = {}
    for minimum in (None, 0):
        ax = plot_timeline(spans, "test", lanes=["s"], min_width_ms=minimum)
        widths[minimum] = [p.get_paths()[0].get_extents().width for p in ax.collections]
    assert widths[None][0] == pytest.approx(0.4, rel=0.01)  # 0.4 % of 100 ms
    assert widths[0][0] == pytest.approx(0.001, rel=0.05)
