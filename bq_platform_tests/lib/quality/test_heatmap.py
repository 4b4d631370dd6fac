"""The heat-map PNG (numpy + Pillow): cell colors, hatched columns, shapes, size."""

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bq_platform.lib.quality import heatmap as heatmap_png
from bq_platform.lib.quality.heatmap import (
    CELL_H,
    CELL_W,
    HATCH_RGB,
    MIN_MAP_H,
    Panel,
    heatmaps_png,
)

YELLOW = (253, 231, 36)  # viridis at 1.0 (matplotlib): the panel's largest value
HATCH = tuple(int(v) for v in HATCH_RGB)


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def count(image: np.ndarray, rgb: tuple[int, ...]) -> int:
    return int((image == np.array(rgb, dtype=np.uint8)).all(axis=2).sum())


def picture(values: list[list[int]], hatched: tuple[int, ...] = ()) -> np.ndarray:
    png = heatmaps_png(
        ["title"],
        [f"site{i:02d}" for i in range(len(values))],
        [Panel("lines", np.array(values, dtype=float))],
        {0: "00", 3: "03"},
        "hour (UTC)",
        hatched_columns=hatched,
    )
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return pixels(png)


def test_the_largest_cell_is_yellow_and_zero_cells_white() -> None:
    zeros = [[0, 0, 0, 0]] * 9  # 10 rows: cells of CELL_H
    plain = picture([*zeros, [0, 0, 0, 500]])
    brighter = picture([*zeros, [0, 500, 0, 500]])
    # The color bar's top rows are yellow too; each extra largest cell adds one cell of it.
    assert count(brighter, YELLOW) - count(plain, YELLOW) == CELL_W * CELL_H
    assert count(picture([*[[1, 1, 1, 1]] * 9, [1, 1, 1, 500]]), (255, 255, 255)) < count(
        plain, (255, 255, 255)
    )


def test_hatched_columns_are_drawn_in_red() -> None:
    values = [[5, 5, 5, 5], [5, 5, 5, 5]]
    assert count(picture(values), HATCH) == 0
    one, two = count(picture(values, (1,)), HATCH), count(picture(values, (1, 3)), HATCH)
    assert one > CELL_H and two == 2 * one


def test_rows_make_the_picture_taller_not_wider() -> None:
    small, large = picture([[1] * 24] * 10), picture([[1] * 24] * 40)
    assert large.shape[0] - small.shape[0] == 30 * CELL_H
    assert large.shape[1] == small.shape[1] > 24 * CELL_W
    one = picture([[10**6] * 24])  # one site: taller cells, so the color bar stays readable
    assert one.shape[0] >= MIN_MAP_H + 100 and one.shape[1] > 24 * CELL_W


def test_a_panel_of_another_shape_or_with_negative_values_is_refused() -> None:
    with pytest.raises(ValueError, match="shape"):
        heatmaps_png(["t"], ["a"], [Panel("p", np.zeros((2, 24)))], {}, "x")
    with pytest.raises(ValueError, match="negative"):
        heatmaps_png(["t"], ["a"], [Panel("p", np.full((1, 24), -1.0))], {}, "x")


def test_viridis_is_matplotlibs():
    """The embedded colormap is matplotlib's viridis, byte for byte (so a new matplotlib
    that changed it would show here)."""
    import matplotlib

    want = matplotlib.colormaps["viridis"](np.linspace(0.0, 1.0, 256), bytes=True)[:, :3]
    assert np.array_equal(heatmap_png._viridis(), want)


def test_font_is_matplotlibs_dejavu():
    import matplotlib

    assert heatmap_png.font_path() == Path(matplotlib.get_data_path()) / "fonts/ttf/DejaVuSans.ttf"


def test_drawing_does_not_import_matplotlib():
    """Importing matplotlib cost 0.1-0.26 s of the first daily run (issue 9); a picture needs
    only its font file."""
    code = (
        "import sys, numpy as np\n"
        "from bq_platform.lib.quality.heatmap import Panel, heatmaps_png\n"
        "png = heatmaps_png(['t'], ['a', 'b'], [Panel('p', np.array([[1.0, 5.0], [0.0, 2.0]]))],"
        " {0: '00'}, 'hour')\n"
        "assert png[:4] == b'\\x89PNG'\n"
        "print('matplotlib' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
