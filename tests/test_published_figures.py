"""Published GPU figures (``images/published_figures.json``): every figure a notebook names has a
measured or a published entry, every published entry names its source, and ``describe`` labels
a published figure as published and lets a measured one win."""

import json
import re

import pytest

from grader.runtime import course, recorded
from grader.tools import measure


def _named_by_notebooks() -> set[str]:
    """Every figure key a notebook passes to ``describe`` (instructor sources, all notebooks)."""
    keys = set()
    for aid in course.assignments():
        for cell in course.read(course.source_path(aid)).cells:
            keys |= set(re.findall(r'describe\(\s*"([A-Za-z0-9_]+)"', cell.source))
    return keys


@pytest.fixture
def nothing_measured(monkeypatch, tmp_path):
    """The course as it ships today: no recorded figures."""
    monkeypatch.setattr(recorded, "RECORDED_FILE", tmp_path / "none.json")


def test_every_figure_a_notebook_names_has_a_measured_or_published_entry():
    named = _named_by_notebooks()
    assert len(named) >= 15, sorted(named)  # the 15 places of 01-10 at least
    measured = {r["figure"] for r in recorded.load()}
    published = {e["figure"] for e in recorded.load_published()}
    assert named <= measured | published, sorted(named - measured - published)


def test_every_published_entry_is_for_a_figure_a_notebook_names():
    orphans = {e["figure"] for e in recorded.load_published()} - _named_by_notebooks()
    assert not orphans, f"published entries no notebook shows: {sorted(orphans)}"


def test_every_published_entry_names_its_source_and_a_number_only_with_its_unit():
    entries = recorded.load_published()  # raises on a malformed entry
    assert entries
    for e in entries:
        assert e["source"].strip() and e["url"].startswith("https://"), e
        assert e["stated"].strip(), f"{e['figure']}: what the source says, in its words"
        if e["kind"] == "statement":
            assert "value" not in e, f"{e['figure']}: a statement carries no number"
        else:
            assert e["unit"] and e["device"] and recorded._is_value(e["value"]), e
            # a number the source does not print is derived, and says how
            value = e["value"] if isinstance(e["value"], list) else [e["value"]]
            for v in value:
                shown = f"{v:g}".rstrip("0").rstrip(".")
                assert shown in e["stated"].replace(",", "") or e.get("derived"), (
                    f"{e['figure']}: {v} is neither in the quoted text nor derived from it"
                )


@pytest.mark.parametrize(
    "entry, problem",
    [
        ({"kind": "peak", "value": 1.0, "device": "X"}, "needs a unit"),
        ({"kind": "measurement", "unit": "x", "device": "X"}, "needs a value"),
        ({"kind": "statement", "value": 2.0}, "no value"),
        ({"kind": "peak", "value": 1.0, "unit": "x", "device": "X", "url": "no"}, "https"),
        ({"kind": "peak", "value": [2, 1], "unit": "x", "device": "X"}, "range"),
        ({"kind": "rumour"}, "kind"),
        ({"kind": "statement", "source": ""}, "lacks source"),
    ],
)
def test_a_published_entry_without_its_source_unit_or_value_is_refused(
    monkeypatch, tmp_path, entry, problem
):
    base = {"figure": "f", "what": "w", "source": "S", "url": "https://s", "stated": "says"}
    path = tmp_path / "published.json"
    path.write_text(json.dumps([{**base, **entry}]))
    monkeypatch.setattr(recorded, "PUBLISHED_FILE", path)
    with pytest.raises(ValueError, match=problem):
        recorded.load_published()


def test_a_published_figure_is_labelled_published_with_its_source(nothing_measured):
    text = recorded.describe("matmul_bf16_8192", "an 8192^3 bf16 matmul")
    assert text.startswith("Published, not measured by this course")
    assert "Recorded on a real GPU" not in text
    assert "989 TFLOP/s on NVIDIA H100 SXM" in text and "the vendor's peak" in text
    assert "https://www.nvidia.com/" in text and "1,979" in text and "sparsity" in text
    tf32 = recorded.describe("matmul_tf32_vs_fp32_8192", "TF32 vs fp32")
    assert "about 7x on NVIDIA A100" in tf32 and "measured by the source" in tf32


def test_a_statement_says_that_no_source_gives_a_number(nothing_measured):
    text = recorded.describe("timing_naive_vs_synchronized", "naive vs synchronized timing")
    text = " ".join(text.split())  # unwrapped
    assert text.startswith("No figure for naive vs synchronized timing is recorded")
    assert "no public source gives a number" in text and "docs.pytorch.org" in text
    assert not re.search(r"\d+(\.\d+)?x\b", text.split("it says")[0])


def test_a_measured_figure_wins_over_the_published_one(monkeypatch, tmp_path):
    path = tmp_path / "recorded.json"
    record = {"figure": "matmul_bf16_8192", "value": 801.0, "unit": "TFLOP/s",
              "device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "date": "2026-11-30"}  # fmt: skip
    path.write_text(json.dumps([record]))
    monkeypatch.setattr(recorded, "RECORDED_FILE", path)
    assert recorded.published("matmul_bf16_8192") is not None
    text = recorded.describe("matmul_bf16_8192", "bf16 matmul")
    assert text == (
        "Recorded on a real GPU: bf16 matmul = 801.0 TFLOP/s "
        "(NVIDIA H100 80GB HBM3, torch 2.11.0, 2026-11-30)."
    )


def test_without_either_it_says_none_is_recorded(monkeypatch, tmp_path):
    monkeypatch.setattr(recorded, "RECORDED_FILE", tmp_path / "none.json")
    monkeypatch.setattr(recorded, "PUBLISHED_FILE", tmp_path / "none either.json")
    assert recorded.describe("f", "x").startswith("No reference figure for x has been recorded")


def test_the_datasheet_peaks_agree_with_the_measure_commands_table():
    """The H100 SXM figures quoted here and the peaks `measure` compares with are one source."""
    h100 = measure.find_peak("NVIDIA H100 80GB HBM3")
    expected = {
        "matmul_bf16_8192": h100.tflops["bf16"],
        "matmul_fp32_512": h100.tflops["fp32"],
        "d2d_copy_bandwidth": h100.memory_gb_s,
        "h2d_bandwidth_pinned_256MB": h100.host_link_gb_s,
    }
    for figure, peak in expected.items():
        entry = recorded.published(figure)
        assert entry["kind"] == "peak" and "H100 SXM" in entry["device"]
        assert entry["value"] == pytest.approx(peak, rel=0.02), figure


def test_format_value():
    assert recorded.format_value({"value": 989, "unit": "TFLOP/s"}) == "989 TFLOP/s"
    assert recorded.format_value({"value": [1.5, 2], "unit": "x"}) == "1.5-2x"
    assert recorded.format_value({"value": 3, "unit": "x", "qualifier": "nearly"}) == "nearly 3x"


def test_12_triton_ceilings_are_the_peaks_the_measure_command_divides_by():
    """The triton group's figures are shown against the same H100 SXM peaks `measure` uses for
    their ratio to peak: HBM bandwidth for the softmax, dense fp16 Tensor Cores for the matmul."""
    h100 = measure.find_peak("NVIDIA H100 80GB HBM3")
    for figure, key in (("triton_softmax_bandwidth", "memory"),
                        ("triton_matmul_tflops", "tflops:fp16")):  # fmt: skip
        entry = recorded.published(figure)
        assert entry["kind"] == "peak" and "H100 SXM" in entry["device"]
        assert entry["value"] == pytest.approx(measure.peak_value(h100, key), rel=0.02), figure
    fused = recorded.published("triton_bias_gelu_vs_torch")
    assert fused["kind"] == "statement" and "separate kernel for each operation" in fused["stated"]
