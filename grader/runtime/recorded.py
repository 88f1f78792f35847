"""Figures measured on a real GPU, shown by demos that run without one.

The figures live in ``images/recorded_figures.json``, a list of records::

    {"figure": "matmul_bf16_8192", "value": 797.0, "unit": "TFLOP/s",
     "device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "cuda": "13.0",
     "date": "2026-11-13"}

Only figures actually measured are written there (by a run on a GPU machine). When a
figure has not been recorded yet, demos say so plainly instead of showing a number.
"""

from __future__ import annotations

import json

from grader.runtime.course import IMAGES

RECORDED_FILE = IMAGES / "recorded_figures.json"
_REQUIRED = ("figure", "value", "unit", "device", "torch", "date")


def load() -> list[dict]:
    """All recorded figures (an empty list when none has been recorded).

    Raises:
        ValueError: the file exists but a record lacks a required field.
    """
    if not RECORDED_FILE.is_file():
        return []
    records = json.loads(RECORDED_FILE.read_text())
    for rec in records:
        missing = [k for k in _REQUIRED if k not in rec]
        if missing:
            raise ValueError(f"{RECORDED_FILE}: record {rec!r} lacks {missing}")
    return records


def lookup(figure: str) -> dict | None:
    """The most recent record of ``figure``, or None when it was never measured."""
    matches = [r for r in load() if r["figure"] == figure]
    return max(matches, key=lambda r: r["date"]) if matches else None


def describe(figure: str, what: str) -> str:
    """A sentence for a demo without a GPU: the recorded figure with its provenance,
    or a plain statement that none has been recorded yet.

    Args:
        figure: Record key, e.g. ``"timing_naive_vs_synchronized"``.
        what: Human description of the figure, e.g. ``"naive vs synchronized timing"``.
    """
    rec = lookup(figure)
    if rec is None:
        return (
            f"No reference figure for {what} has been recorded on a real GPU yet "
            "(`python -m grader measure` on a CUDA machine records it); on a GPU, this cell "
            "measures it live."
        )
    return (
        f"Recorded on a real GPU: {what} = {rec['value']} {rec['unit']} "
        f"({rec['device']}, torch {rec['torch']}, {rec['date']})."
    )
