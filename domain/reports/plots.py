"""The pages' plots, drawn with matplotlib (its object API and the Agg canvas: no pyplot, so no
global figure state and no display) into PNG images the page embeds."""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure as MplFigure
from matplotlib.ticker import MaxNLocator

from domain.reports.page import Figure

# Pixels: 8 x 3.2 inches at 100 dots per inch.
DPI = 100
SIZE = (8.0, 3.2)


@dataclass(frozen=True)
class Line:
    label: str
    xs: Sequence[float]
    ys: Sequence[float]
    dashed: bool = False


@dataclass(frozen=True)
class Mark:
    """A vertical line at `x` (a restart, the point of divergence), labelled."""

    x: float
    label: str
    color: str = "#c0392b"


@dataclass(frozen=True)
class Level:
    """A horizontal line at `y`, with a shaded band from `low` to `high` around it (the
    prediction and its error band) where there is one."""

    y: float
    label: str
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class Part:
    """One segment of a stacked bar."""

    label: str
    value: float
    color: str


def line_chart(
    key: str,
    title: str,
    lines: Sequence[Line],
    *,
    xlabel: str,
    ylabel: str,
    marks: Sequence[Mark] = (),
    levels: Sequence[Level] = (),
    caption: str = "",
) -> Figure:
    figure, axes = _axes()
    for line in lines:
        axes.plot(
            line.xs, line.ys, "--" if line.dashed else "-", marker="." if len(line.xs) < 50 else None, label=line.label
        )
    for level in levels:
        if level.low is not None and level.high is not None:
            axes.axhspan(level.low, level.high, color="#f39c12", alpha=0.2, label=f"{level.label}: band")
        axes.axhline(level.y, color="#e67e22", linestyle=":", label=level.label)
    for mark in marks:
        axes.axvline(mark.x, color=mark.color, linestyle="--", linewidth=1, label=mark.label)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    # Steps are whole numbers: no tick at step 1.5.
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(alpha=0.3)
    if lines or marks or levels:
        axes.legend(loc="best", fontsize="small")
    return _done(figure, key, title, caption)


def stacked_bar(
    key: str, title: str, parts: Sequence[Part], *, xlabel: str, limit: Level | None = None, caption: str = ""
) -> Figure:
    """One horizontal bar split into `parts` (left to right), with a `limit` line (a capacity)."""
    figure, axes = _axes(height=2.2)
    left = 0.0
    for part in parts:
        axes.barh([0], [part.value], left=left, color=part.color, label=f"{part.label} ({part.value:.3g})")
        left += part.value
    if limit is not None:
        axes.axvline(limit.y, color="#c0392b", linewidth=2, label=limit.label)
    axes.set_yticks([])
    axes.set_xlabel(xlabel)
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=3, fontsize="small", frameon=False)
    return _done(figure, key, title, caption)


def _axes(height: float = SIZE[1]) -> tuple[MplFigure, Axes]:
    figure = MplFigure(figsize=(SIZE[0], height), dpi=DPI, layout="constrained")
    return figure, figure.add_subplot()


def _done(figure: MplFigure, key: str, title: str, caption: str) -> Figure:
    figure.suptitle(title)
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    width, height = canvas.get_width_height()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return Figure(key, title, base64.b64encode(buffer.getvalue()).decode("ascii"), width, height, caption)
