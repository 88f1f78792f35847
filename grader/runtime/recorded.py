"""GPU figures for demos that run without a GPU: measured by the course, else published.

Measured figures live in ``images/recorded_figures.json``, a list of records::

    {"figure": "matmul_bf16_8192", "value": 797.0, "unit": "TFLOP/s",
     "device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "cuda": "13.0",
     "date": "2026-11-13"}

Only figures actually measured are written there (by ``python -m grader measure`` on a GPU
machine). Until the course has measured a figure, a demo shows what a public source
publishes for a named GPU, from ``images/published_figures.json``::

    {"figure": "matmul_bf16_8192", "kind": "peak", "value": 989, "unit": "TFLOP/s",
     "device": "NVIDIA H100 SXM", "what": "...", "source": "NVIDIA H100 Tensor Core GPU,
     specifications", "url": "https://...", "stated": "BF16 Tensor Core: 1,979 teraFLOPS* ...",
     "derived": "The figure is with 2:4 sparsity ...: 1,979 / 2 = 989 TFLOP/s dense."}

``kind`` is ``peak`` (a vendor's theoretical rate), ``measurement`` (the source measured it)
or ``statement`` (no public source gives a number: the entry quotes what the source says, and
has no ``value``). ``stated`` quotes the source's own words; ``derived`` says how the course
computed ``value`` from them, when it did; ``software`` and ``date`` are there only when the
source gives them; ``note`` says how the source's figure differs from the notebook's. A value
is a number or a ``[low, high]`` range. The course never shows a number without its source,
and a measured figure always wins over a published one.
"""

from __future__ import annotations

import json
import textwrap

from grader.runtime.course import IMAGES

RECORDED_FILE = IMAGES / "recorded_figures.json"
PUBLISHED_FILE = IMAGES / "published_figures.json"
_REQUIRED = ("figure", "value", "unit", "device", "torch", "date")
_PUBLISHED_REQUIRED = ("figure", "kind", "what", "source", "url", "stated")
#: What a published figure is: a vendor's peak, a figure the source measured, or words only.
PUBLISHED_KINDS = ("peak", "measurement", "statement")


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


def _check_published(entry: dict) -> list[str]:
    """What is wrong with one published entry (an empty list when nothing is)."""
    problems = [f"lacks {k}" for k in _PUBLISHED_REQUIRED if not entry.get(k)]
    kind = entry.get("kind")
    if kind not in PUBLISHED_KINDS:
        problems.append(f"kind {kind!r} is not one of {PUBLISHED_KINDS}")
    if not str(entry.get("url", "")).startswith("https://"):
        problems.append("url is not an https:// address")
    value = entry.get("value")
    if kind == "statement":
        if value is not None:
            problems.append("a statement has no value (a number needs a source that gives it)")
    else:
        if value is None:
            problems.append(f"a {kind} needs a value")
        elif not _is_value(value):
            problems.append(f"value {value!r} is not a number or a [low, high] range")
        for k in ("unit", "device"):
            if not entry.get(k):
                problems.append(f"a {kind} needs a {k}")
    return problems


def _is_value(value) -> bool:
    if isinstance(value, list):
        return len(value) == 2 and all(_is_value(v) for v in value) and value[0] < value[1]
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def load_published() -> list[dict]:
    """All published figures (an empty list when the file is missing).

    Raises:
        ValueError: an entry lacks its source, unit or value, or names a figure twice.
    """
    if not PUBLISHED_FILE.is_file():
        return []
    entries = json.loads(PUBLISHED_FILE.read_text())
    seen: set[str] = set()
    for entry in entries:
        problems = _check_published(entry)
        if entry.get("figure") in seen:
            problems.append("the figure has another entry")
        seen.add(entry.get("figure"))
        if problems:
            raise ValueError(f"{PUBLISHED_FILE}: {entry.get('figure')!r}: {'; '.join(problems)}")
    return entries


def published(figure: str) -> dict | None:
    """The published entry of ``figure``, or None when the course has none."""
    return next((e for e in load_published() if e["figure"] == figure), None)


def format_value(entry: dict) -> str:
    """``989 TFLOP/s``, ``about 7x``, ``1.5-2x``: a published value with its unit."""
    value, unit = entry["value"], entry["unit"]
    text = f"{value[0]:g}-{value[1]:g}" if isinstance(value, list) else f"{value:g}"
    text += "x" if unit == "x" else f" {unit}"
    return f"{entry['qualifier']} {text}" if entry.get("qualifier") else text


def _wrapped(label: str, text: str) -> str:
    """``  label:   text`` wrapped at 100 columns, continuation lines under the text (web
    addresses and hyphenated words are never broken); no label: the text under the others."""
    return textwrap.fill(
        text,
        width=100,
        initial_indent=f"  {label + ':':<9} " if label else " " * 12,
        subsequent_indent=" " * 12,
        break_long_words=False,
        break_on_hyphens=False,
    )


def describe_published(entry: dict, what: str) -> str:
    """Lines for a published entry: labelled as published, never as measured by the course."""
    if entry["kind"] == "statement":
        lines = [
            textwrap.fill(
                f"No figure for {what} is recorded on a real GPU yet, and no public source "
                "gives a number for it. What the published sources say:",
                width=100,
            )
        ]
    else:
        kind = "the vendor's peak" if entry["kind"] == "peak" else "measured by the source"
        lines = [
            "Published, not measured by this course (no figure recorded on a real GPU yet):",
            _wrapped("figure", f"{what}: {format_value(entry)} on {entry['device']} ({kind})"),
            _wrapped("of", entry["what"]),
        ]
    when = ", ".join(entry[k] for k in ("software", "date") if entry.get(k))
    lines.append(_wrapped("source", entry["source"] + (f" ({when})" if when else "")))
    lines.append(_wrapped("", entry["url"]))
    lines.append(_wrapped("it says", f'"{entry["stated"]}"'))
    for key in ("derived", "note"):
        if entry.get(key):
            lines.append(_wrapped(key, entry[key]))
    return "\n".join(lines)


def describe(figure: str, what: str) -> str:
    """A sentence for a demo without a GPU: the figure measured by the course with its
    provenance; else the published one, labelled as published, with its source; else a plain
    statement that none has been recorded yet.

    Args:
        figure: Record key, e.g. ``"timing_naive_vs_synchronized"``.
        what: Human description of the figure, e.g. ``"naive vs synchronized timing"``.
    """
    rec = lookup(figure)
    if rec is not None:
        text = (
            f"Recorded on a real GPU: {what} = {rec['value']} {rec['unit']} "
            f"({rec['device']}, torch {rec['torch']}, {rec['date']})."
        )
        if rec.get("fraction_of_peak") and rec.get("peak"):
            text += (
                f" That is {100 * rec['fraction_of_peak']:.0f}% of the peak, {rec['peak']} "
                f"{rec['unit']} ({rec.get('peak_source', 'published')})."
            )
        if rec.get("note"):
            text += "\n" + _wrapped("measured", rec["note"])
        return text
    entry = published(figure)
    if entry is not None:
        return describe_published(entry, what)
    return (
        f"No reference figure for {what} has been recorded on a real GPU yet "
        "(`python -m grader measure` on a CUDA machine records it); on a GPU, this cell "
        "measures it live."
    )
