"""The heat-map PNG: a valid PNG of the documented size, cell colors from the data, white zeros,
hatched columns, and no pyplot."""

import io
import subprocess
import sys

import matplotlib.image
import numpy as np
import pytest
from matplotlib import colormaps

from bq_platform.lib.quality.heatmap import (
    BAR_W,
    CELL_H,
    CELL_W,
    MIN_MAP_H,
    Panel,
    color_scale,
    heatmaps_figure,
    heatmaps_png,
)

VALUES = np.array([[0, 1, 10, 100], [1000, 0, 5, 1000]], dtype=float)
ARGS = (["title"], ["site0", "site1"], [Panel("lines", VALUES)], {0: "00", 3: "03"}, "hour")


def pixels(png: bytes) -> np.ndarray:
    """The picture as ``height x width x 3`` bytes."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(io.BytesIO(png), format="png")
    return np.rint(image[:, :, :3] * 255).astype(int)


def cell(image: np.ndarray, figure, row: int, column: int, panel: int = 0) -> np.ndarray:
    """The color at the center of a heat map's cell, placed from the figure's own axes."""
    ax = figure.axes[panel]
    rows, columns = ax.images[0].get_array().shape
    x0, y0, w, h = ax.get_position().bounds
    height, width = image.shape[:2]
    x = (x0 + (column + 0.5) * w / columns) * width
    y = (1 - y0 - h + (row + 0.5) * h / rows) * height
    return image[int(y), int(x)]


def viridis(values: np.ndarray, value: float) -> np.ndarray:
    return np.array(colormaps["viridis"](color_scale(values)(value), bytes=True)[:3], dtype=int)


def test_each_cell_takes_its_color_from_its_value_and_zero_is_white() -> None:
    image, figure = pixels(heatmaps_png(*ARGS)), heatmaps_figure(*ARGS)
    for (row, column), value in np.ndenumerate(VALUES):
        want = np.array([255, 255, 255]) if value == 0 else viridis(VALUES, value)
        assert np.abs(cell(image, figure, row, column) - want).max() <= 2, (row, column, value)
    assert tuple(viridis(VALUES, 1000)) == (253, 231, 36)  # the largest value: viridis' top


def test_hatched_columns_are_red_and_the_others_not() -> None:
    values = np.full((2, 4), 5.0)
    args = (["t"], ["a", "b"], [Panel("p", values), Panel("q", values)], {}, "x")
    plain = pixels(heatmaps_png(*args))
    hatched = pixels(heatmaps_png(*args, hatched_columns=[1]))
    figure = heatmaps_figure(*args, hatched_columns=[1])

    def reddish(image: np.ndarray, panel: int, column: int) -> int:
        ax = figure.axes[panel]
        x0, y0, w, h = ax.get_position().bounds
        height, width = image.shape[:2]
        left, right = (
            int((x0 + column * w / 4) * width) + 1,
            int((x0 + (column + 1) * w / 4) * width),
        )
        top, bottom = int((1 - y0 - h) * height) + 1, int((1 - y0) * height)
        block = image[top:bottom, left:right]
        return int(((block[:, :, 0] > 150) & (block[:, :, 0] - block[:, :, 1] > 100)).sum())

    for panel in (0, 1):
        assert reddish(plain, panel, 1) == 0
        assert reddish(hatched, panel, 1) > CELL_H  # the "//" lines
        assert reddish(hatched, panel, 0) == reddish(hatched, panel, 2) == 0
    assert not np.array_equal(cell(hatched, figure, 0, 1), cell(plain, figure, 0, 1))  # washed
    assert np.array_equal(cell(hatched, figure, 0, 2), cell(plain, figure, 0, 2))


def test_rows_make_the_picture_taller_not_wider() -> None:
    def size(rows: int) -> tuple[int, int]:
        labels = [f"site{i:02d}" for i in range(rows)]
        png = heatmaps_png(["t"], labels, [Panel("p", np.ones((rows, 24)))], {0: "00"}, "x")
        return pixels(png).shape[:2]

    (h10, w10), (h40, w40), (h1, w1) = size(10), size(40), size(1)
    assert h40 - h10 == 30 * CELL_H and w40 == w10 > 24 * CELL_W + BAR_W
    assert h1 > MIN_MAP_H and w1 == w10  # one site: taller cells, so the color bar is readable


def test_a_long_row_label_is_cut() -> None:
    figure = heatmaps_figure(["t"], ["x" * 80], [Panel("p", np.ones((1, 2)))], {}, "x")
    (label,) = [t.get_text() for t in figure.axes[0].get_yticklabels()]
    assert label.endswith("…") and len(label) < 80


def test_a_panel_of_another_shape_or_with_negative_values_is_refused() -> None:
    with pytest.raises(ValueError, match="shape"):
        heatmaps_png(["t"], ["a"], [Panel("p", np.zeros((2, 24)))], {}, "x")
    with pytest.raises(ValueError, match="negative"):
        heatmaps_png(["t"], ["a"], [Panel("p", np.full((1, 24), -1.0))], {}, "x")


def test_drawing_leaves_pyplot_alone() -> None:
    """The figure is drawn on its own canvas: pyplot (and its global figures) is not needed."""
    code = (
        "import sys, numpy as np\n"
        "from bq_platform.lib.quality.heatmap import Panel, heatmaps_png\n"
        "png = heatmaps_png(['t'], ['a', 'b'], [Panel('p', np.array([[1.0, 5.0], [0.0, 2.0]]))],"
        " {0: '00'}, 'hour')\n"
        "assert png[:4] == b'\\x89PNG'\n"
        "print('matplotlib.pyplot' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
