"""Heat maps that share their rows, side by side, as a PNG: a matplotlib ``Figure`` of its own
(Agg renderer, no pyplot state), one cell per row and column on a log color scale (viridis) with
a color bar per panel; 0 is white; marked columns are hatched red.
"""

import dataclasses
import io
from collections.abc import Collection, Mapping, Sequence

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm, to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, LogLocator

DPI = 100
CELL_W, CELL_H = 12, 16  # pixels per column and per row
MIN_MAP_H = 160  # pixels: a heat map of few rows gets taller cells, so its color bar is readable
TOP_H, BOTTOM_H, SIDE_W = 78, 48, 16  # pixels: titles; tick labels and axis label; margins
BAR_W = 80  # pixels right of each heat map: gap, color bar and its labels
CHAR_W = 7  # pixels per character of a row label (9 pt DejaVu Sans), for the left margin
LABEL_MAX_CHARS = 32
FONT_SIZE = 9
#: Hatched columns: red "//" lines over a translucent red wash.
HATCH_COLOR = "#c53030"
HATCH_ALPHA = 0.3
ZERO_COLOR = "white"


@dataclasses.dataclass(frozen=True)
class Panel:
    """One heat map: ``title`` and ``rows x columns`` non-negative ``values`` (0 white, the rest
    on a log scale from 1 to the largest)."""

    title: str
    values: np.ndarray


def color_scale(values: np.ndarray) -> LogNorm:
    """A panel's color scale: log, from 1 to its largest value (at least 2, so it spans)."""
    return LogNorm(vmin=1.0, vmax=max(float(values.max(initial=0.0)), 2.0))


def _short(label: str) -> str:
    return label if len(label) <= LABEL_MAX_CHARS else label[: LABEL_MAX_CHARS - 1] + "…"


def heatmaps_figure(
    title: Sequence[str],
    row_labels: Sequence[str],
    panels: Sequence[Panel],
    column_labels: Mapping[int, str],
    x_label: str,
    hatched_columns: Collection[int] = (),
) -> Figure:
    """The figure of :func:`heatmaps_png` (same arguments, same errors); ``figure.axes`` holds
    the heat maps in ``panels`` order, then their color bars."""
    rows = len(row_labels)
    columns = panels[0].values.shape[1] if panels else 0
    for panel in panels:
        if panel.values.shape != (rows, columns):
            raise ValueError(
                f"panel {panel.title!r} has shape {panel.values.shape}, expected {(rows, columns)}"
            )
        if (panel.values < 0).any():
            raise ValueError(f"panel {panel.title!r} has negative values")
    labels = [_short(label) for label in row_labels]
    label_w = CHAR_W * max(map(len, labels), default=0) + 12
    map_w, map_h = columns * CELL_W, max(rows * CELL_H, MIN_MAP_H)
    width = SIDE_W + label_w + len(panels) * (map_w + BAR_W) + SIDE_W
    height = TOP_H + map_h + BOTTOM_H
    figure = Figure(figsize=(width / DPI, height / DPI), dpi=DPI)
    FigureCanvasAgg(figure)
    figure.suptitle("\n".join(title), y=1 - 8 / height, va="top", fontsize=FONT_SIZE + 1)
    colormap = colormaps["viridis"].with_extremes(bad=ZERO_COLOR)

    def box(left: float, w: float) -> tuple[float, float, float, float]:
        """Figure coordinates of a box ``w`` pixels wide at ``left``, as high as the maps."""
        return (left / width, BOTTOM_H / height, w / width, map_h / height)

    images = []
    for i, panel in enumerate(panels):
        ax = figure.add_axes(box(SIDE_W + label_w + i * (map_w + BAR_W), map_w))
        images.append(
            ax.imshow(
                np.ma.masked_equal(panel.values, 0),
                cmap=colormap,
                norm=color_scale(panel.values),
                aspect="auto",
                interpolation="nearest",
            )
        )
        for column in hatched_columns:
            ax.add_patch(
                Rectangle(
                    (column - 0.5, -0.5),
                    1,
                    rows,
                    facecolor=to_rgba(HATCH_COLOR, HATCH_ALPHA),
                    hatch="//",
                    hatchcolor=HATCH_COLOR,
                    hatch_linewidth=1.5,
                    linewidth=0,
                )
            )
        ax.set_title(panel.title, fontsize=FONT_SIZE + 1)
        ax.set_xticks(list(column_labels), labels=list(column_labels.values()))
        ax.set_xlabel(x_label, fontsize=FONT_SIZE, labelpad=2)
        ax.set_yticks(range(rows), labels=labels if i == 0 else [])
        ax.tick_params(labelsize=FONT_SIZE, length=2)
    for i, image in enumerate(images):
        left = SIDE_W + label_w + i * (map_w + BAR_W) + map_w + 8
        bar = figure.colorbar(image, cax=figure.add_axes(box(left, 12)))
        bar.locator = LogLocator(base=10)
        bar.formatter = FuncFormatter(lambda value, _: f"{value:,.0f}")
        bar.ax.tick_params(labelsize=FONT_SIZE - 1, length=2)
        bar.update_ticks()
    return figure


def heatmaps_png(
    title: Sequence[str],
    row_labels: Sequence[str],
    panels: Sequence[Panel],
    column_labels: Mapping[int, str],
    x_label: str,
    hatched_columns: Collection[int] = (),
) -> bytes:
    """Side-by-side heat maps sharing their rows, as PNG bytes.

    Args:
        title: lines above the picture.
        row_labels: one per row (cut to :data:`LABEL_MAX_CHARS` characters).
        panels: each ``len(row_labels) x columns``.
        column_labels: ``{column index: label}`` under each heat map.
        hatched_columns: column indexes hatched red in every panel (e.g. missing hours).

    Returns:
        A PNG of ``CELL_W x CELL_H`` pixels per cell (maps at least ``MIN_MAP_H`` high) plus
        margins, so a cell keeps its size whatever the rows.

    Raises:
        ValueError: if a panel's shape does not match ``row_labels``, or a value is negative.
    """
    figure = heatmaps_figure(title, row_labels, panels, column_labels, x_label, hatched_columns)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()
