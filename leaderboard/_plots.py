"""Plots as inline SVG text: no library, no script, nothing fetched; every label escaped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from markupsafe import Markup, escape

_LABEL_W = 270
_PLOT_W = 460
_ROW_H = 34
_PAD = 24
_BINS = 20


@dataclass(frozen=True)
class Distribution:
    """One model's rewards on a taskset, with its mean and 95% interval."""

    label: str
    rewards: np.ndarray[Any, np.dtype[np.float64]]
    mean: float | None
    low: float | None
    high: float | None


def _f(value: float) -> str:
    return f"{value:.1f}"


def distribution_plot(rows: list[Distribution]) -> Markup:
    """Per model: a histogram of its episode rewards and its mean with the 95% interval.

    All rows share one reward axis, from min(0, lowest value) to max(1, highest value).
    """
    values = [r.rewards for r in rows if len(r.rewards)]
    ends = [v for r in rows for v in (r.low, r.high, r.mean) if v is not None]
    lo = min([0.0] + [float(v.min()) for v in values] + ends)
    hi = max([1.0] + [float(v.max()) for v in values] + ends)
    span = hi - lo

    def x(value: float) -> float:
        return _LABEL_W + _PLOT_W * (value - lo) / span

    width = _LABEL_W + _PLOT_W + _PAD
    height = _ROW_H * len(rows) + 2 * _PAD
    parts = [
        f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" '
        'aria-label="Reward distribution and mean with 95% confidence interval per model">'
    ]
    for i, row in enumerate(rows):
        top = _PAD + i * _ROW_H
        mid = top + _ROW_H / 2
        parts.append(f'<g class="row"><title>{escape(_row_title(row))}</title>')
        parts.append(
            f'<text x="{_LABEL_W - 8}" y="{_f(mid + 4)}" text-anchor="end" class="label">'
            f"{escape(_clip(row.label, 36))}</text>"
        )
        if len(row.rewards):
            counts, edges = np.histogram(row.rewards, bins=_BINS, range=(lo, hi))
            peak = counts.max()
            for count, left, right in zip(counts, edges[:-1], edges[1:], strict=True):
                if count == 0:
                    continue
                h = (_ROW_H - 10) * count / peak
                parts.append(
                    f'<rect class="bar" x="{_f(x(left) + 0.5)}" y="{_f(top + _ROW_H - 5 - h)}" '
                    f'width="{_f(max(x(right) - x(left) - 1, 1))}" height="{_f(h)}"/>'
                )
        if row.low is not None and row.high is not None:
            parts.append(
                f'<line class="ci" x1="{_f(x(row.low))}" x2="{_f(x(row.high))}" '
                f'y1="{_f(mid)}" y2="{_f(mid)}"/>'
            )
        if row.mean is not None:
            parts.append(f'<circle class="mean" cx="{_f(x(row.mean))}" cy="{_f(mid)}" r="4"/>')
        parts.append("</g>")
    axis_y = _PAD + _ROW_H * len(rows)
    parts.append(
        f'<line class="axis" x1="{_LABEL_W}" x2="{_LABEL_W + _PLOT_W}" '
        f'y1="{axis_y}" y2="{axis_y}"/>'
    )
    for tick in np.linspace(lo, hi, 5):
        parts.append(
            f'<text x="{_f(x(float(tick)))}" y="{axis_y + 16}" text-anchor="middle" '
            f'class="tick">{float(tick):.2f}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def histogram_plot(values: list[float], *, label: str, bins: int = 10) -> Markup:
    """A histogram of values in [0, 1] (per-task pass rates), with counts above the bars."""
    width, height = _LABEL_W + _PLOT_W + _PAD, 180
    plot_h = height - 2 * _PAD - 10
    counts, edges = np.histogram(np.asarray(values, dtype=float), bins=bins, range=(0.0, 1.0))
    peak = max(int(counts.max()), 1)
    bar_w = (width - 2 * _PAD) / bins
    parts = [
        f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{escape(label)}">'
    ]
    base = _PAD + plot_h
    for i, count in enumerate(counts):
        h = plot_h * int(count) / peak
        left = _PAD + i * bar_w
        parts.append(
            f"<g><title>{edges[i]:.1f}–{edges[i + 1]:.1f}: {int(count)} tasks</title>"
            f'<rect class="bar" x="{_f(left + 1)}" y="{_f(base - h)}" width="{_f(bar_w - 2)}" '
            f'height="{_f(h)}"/>'
            f'<text x="{_f(left + bar_w / 2)}" y="{_f(base - h - 4)}" text-anchor="middle" '
            f'class="tick">{int(count)}</text></g>'
        )
    parts.append(
        f'<line class="axis" x1="{_PAD}" x2="{width - _PAD}" y1="{_f(base)}" y2="{_f(base)}"/>'
    )
    for i in range(0, bins + 1, 2):
        parts.append(
            f'<text x="{_f(_PAD + i * bar_w)}" y="{_f(base + 16)}" text-anchor="middle" '
            f'class="tick">{edges[i]:.1f}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def _row_title(row: Distribution) -> str:
    if row.mean is None:
        return f"{row.label}: no rewarded episode"
    interval = (
        f" [{row.low:.3f}, {row.high:.3f}]" if row.low is not None and row.high is not None else ""
    )
    return f"{row.label}: mean {row.mean:.3f}{interval}, n={len(row.rewards)}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
