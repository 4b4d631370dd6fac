"""Heat maps as a PNG, drawn pixel by pixel: numpy for the cells, Pillow for the text.

Why not a matplotlib figure: the completeness picture (3 heat maps of up to 41 rows x 24
hours) took ~1 s a day with matplotlib (constrained layout measures every tick label, colorbars,
an ``axvspan`` per missing hour, ``savefig``); here it takes ~50 ms (issue 9: at most 3 s of
overhead per day). matplotlib's files still supply the DejaVu Sans font, and its viridis
colormap is :data:`VIRIDIS_RGB`; matplotlib itself is not imported (its import was 0.1-0.26 s
of the first daily run, after the build; issue 9).

Layout of :func:`heatmaps_png`, left to right: row labels, then per panel a heat map (one cell
per row and column), its color bar with log-scale ticks; above, the title lines and each
panel's title; below, column tick labels and the x-axis label.
"""

import dataclasses
import functools
import importlib.util
import io
import math
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

CELL_W, CELL_H = 12, 18  # pixels per column (hour) and per row (site), at least
MIN_MAP_H = 160  # a heat map of few rows gets taller cells, so its color bar stays readable
MARGIN, GAP = 12, 18  # outer margin; space between a color bar's labels and the next panel
BAR_W, BAR_GAP = 12, 6  # color bar width and its distance from the heat map
TEXT, TITLE = 12, 13  # font sizes, pixels
LABEL_MAX_CHARS = 36
#: Hatched columns: a translucent red wash and red diagonal lines (matplotlib's "//" look).
HATCH_RGB = np.array([197, 48, 48], dtype=np.float32)  # #c53030
HATCH_ALPHA = 0.35
HATCH_PERIOD = 8  # pixels between hatch lines
INK = (20, 20, 20)
FRAME = (120, 120, 120)


@dataclasses.dataclass(frozen=True)
class Panel:
    """One heat map.

    Attributes:
        title: shown above the heat map.
        values: ``rows x columns`` non-negative counts; 0 is drawn white, the rest on a log
            color scale from 1 to the panel's largest value.
    """

    title: str
    values: np.ndarray


#: matplotlib's viridis colormap (CC0; matplotlib.org/stable/users/explain/colors/colormaps)
#: as 256 RGB triples of bytes: ``matplotlib.colormaps["viridis"](np.linspace(0, 1, 256),
#: bytes=True)[:, :3]`` (matplotlib 3.11). Kept here so drawing a heat map does not import
#: matplotlib; ``test_heatmap_png.py`` compares it with matplotlib's.
VIRIDIS_RGB = bytes.fromhex(
    "44015444025544035745055845065a45085b46095c460b5e460c5f460e61470f62471163471265471466471567"
    "47166947186a48196b481a6c481c6e481d6f481e70482071482172482273482374472575472676472777472878"
    "472a79472b7a472c7b462d7c462f7c46307d46317e45327f45347f453580453681443781443982433a83433b83"
    "433c84423d84423e854240854141864142864043874044873f45873f47883e48883e49893d4a893d4b893d4c89"
    "3c4d8a3c4e8a3b508a3b518a3a528b3a538b39548b39558b38568b38578c37588c37598c365a8c365b8c355c8c"
    "355d8c345e8d345f8d33608d33618d32628d32638d31648d31658d31668d30678d30688d2f698d2f6a8d2e6b8e"
    "2e6c8e2e6d8e2d6e8e2d6f8e2c708e2c718e2c728e2b738e2b748e2a758e2a768e2a778e29788e29798e287a8e"
    "287a8e287b8e277c8e277d8e277e8e267f8e26808e26818e25828e25838d24848d24858d24868d23878d23888d"
    "23898d22898d228a8d228b8d218c8d218d8c218e8c208f8c20908c20918c1f928c1f938b1f948b1f958b1f968b"
    "1e978a1e988a1e998a1e998a1e9a891e9b891e9c891e9d881e9e881e9f881ea0871fa1871fa2861fa38620a485"
    "20a58521a68521a78422a78423a88323a98224aa8225ab8126ac8127ad8028ae7f29af7f2ab07e2bb17d2cb17d"
    "2eb27c2fb37b30b47a32b57a33b67935b77836b87738b97639b9763bba753dbb743ebc7340bd7242be7144be70"
    "45bf6f47c06e49c16d4bc26c4dc26b4fc36951c46853c56755c66657c66559c7645bc8625ec96160c96062ca5f"
    "64cb5d67cc5c69cc5b6bcd596dce5870ce5672cf5574d05477d05279d1517cd24f7ed24e81d34c83d34b86d449"
    "88d5478bd5468dd64490d64392d74195d73f97d83e9ad83c9dd93a9fd938a2da37a5da35a7db33aadb32addc30"
    "afdc2eb2dd2cb5dd2bb7dd29bade27bdde26bfdf24c2df22c5df21c7e01fcae01ecde01dcfe11cd2e11bd4e11a"
    "d7e219dae218dce218dfe318e1e318e4e318e7e419e9e419ece41aeee51bf1e51cf3e51ef6e61ff8e621fae622"
    "fde724"
)


def font_path() -> Path:
    """matplotlib's bundled DejaVu Sans (``mpl-data/fonts/ttf/DejaVuSans.ttf``), found from
    the package's location without importing it (``matplotlib.get_data_path()`` is that
    ``mpl-data`` folder).

    Raises:
        FileNotFoundError: if matplotlib is not installed, or its font file is missing.
    """
    spec = importlib.util.find_spec("matplotlib")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("matplotlib is not installed: its DejaVu Sans font draws the text")
    path = Path(spec.origin).parent / "mpl-data" / "fonts" / "ttf" / "DejaVuSans.ttf"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: matplotlib's DejaVu Sans font is missing")
    return path


@functools.cache
def _font(size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(font_path()), size)


@functools.cache
def _viridis() -> np.ndarray:
    """:data:`VIRIDIS_RGB` as a ``256 x 3`` uint8 lookup table."""
    return np.frombuffer(VIRIDIS_RGB, dtype=np.uint8).reshape(256, 3)


def _text_width(text: str, size: int) -> int:
    return math.ceil(_font(size).getlength(text))


def _short(label: str) -> str:
    return label if len(label) <= LABEL_MAX_CHARS else label[: LABEL_MAX_CHARS - 1] + "…"


def _log_top(values: np.ndarray) -> float:
    """Top of a panel's log color scale: its largest value, at least 2 (a scale needs a span)."""
    return max(float(values.max(initial=0.0)), 2.0)


def _colors(values: np.ndarray, top: float) -> np.ndarray:
    """``rows x columns x 3`` uint8: white for 0, else viridis at log(v) / log(top)."""
    positive = values > 0
    scaled = np.zeros(values.shape)
    np.log(values, out=scaled, where=positive)
    index = np.clip(np.rint(scaled / math.log(top) * 255), 0, 255).astype(np.intp)
    rgb = _viridis()[index]
    rgb[~positive] = 255
    return rgb


def _cells(values: np.ndarray, cell_h: int, hatched: Collection[int]) -> np.ndarray:
    """The heat map's pixels: each cell ``cell_h x CELL_W``, hatched columns washed in red."""
    rgb = _colors(values, _log_top(values))
    pixels = np.repeat(np.repeat(rgb, cell_h, axis=0), CELL_W, axis=1).astype(np.float32)
    height = pixels.shape[0]
    ys, xs = np.mgrid[0:height, 0:CELL_W]
    lines = (xs + ys) % HATCH_PERIOD < 2  # "//": constant x + y
    for column in sorted(hatched):
        block = pixels[:, column * CELL_W : (column + 1) * CELL_W]
        block[:] = block * (1 - HATCH_ALPHA) + HATCH_RGB * HATCH_ALPHA
        block[lines] = HATCH_RGB
    return pixels.astype(np.uint8)


def _bar_ticks(top: float) -> list[int]:
    """Powers of ten from 1 up to ``top`` (the color bar's labels)."""
    return [10**k for k in range(int(math.log10(top)) + 1)]


def _bar_positions(top: float, bottom_y: int, height: int) -> list[tuple[int, int]]:
    """``(tick, y)`` of the color bar's labels, bottom up, dropping any that would overlap."""
    kept: list[tuple[int, int]] = []
    for tick in _bar_ticks(top):
        y = bottom_y - 1 - round(math.log(tick) / math.log(top) * (height - 1))
        if not kept or kept[-1][1] - y >= TEXT + 2:
            kept.append((tick, y))
    return kept


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
        row_labels: one per row of every panel's ``values``.
        panels: the heat maps; each ``len(row_labels) x columns`` (all the same shape).
        column_labels: ``{column index: label}`` under each heat map (e.g. every third hour).
        x_label: the columns' axis label.
        hatched_columns: column indexes drawn hatched red in every panel (e.g. missing hours).

    Returns:
        The PNG: about ``(label width + panels x (columns x 12 + 80))`` by
        ``(max(rows x 18, 160) + 110)`` pixels.

    Raises:
        ValueError: if a panel's shape does not match ``row_labels``, or a value is negative.
    """
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
    label_w = max((_text_width(label, TEXT) for label in labels), default=0) + 8
    tops = [_log_top(panel.values) for panel in panels]
    bar_label_w = max(
        (_text_width(f"{tick:,}", TEXT) for top in tops for tick in _bar_ticks(top)), default=0
    )
    map_w = columns * CELL_W
    panel_w = map_w + BAR_GAP + BAR_W + 4 + bar_label_w + GAP
    top_y = MARGIN + len(title) * (TITLE + 5) + 8 + TITLE + 8  # title lines, panel titles
    cell_h = max(CELL_H, -(-MIN_MAP_H // max(rows, 1)))
    map_h = rows * cell_h
    width = MARGIN + label_w + len(panels) * panel_w + MARGIN - GAP
    height = top_y + map_h + 6 + TEXT + 6 + TEXT + MARGIN
    canvas = np.full((height, width, 3), 255, dtype=np.uint8)
    lefts = [MARGIN + label_w + i * panel_w for i in range(len(panels))]
    for left, panel, top in zip(lefts, panels, tops, strict=True):
        canvas[top_y : top_y + map_h, left : left + map_w] = _cells(
            panel.values, cell_h, hatched_columns
        )
        bar_x = left + map_w + BAR_GAP
        levels = np.exp(np.linspace(math.log(top), 0.0, map_h))  # top of the bar = largest
        canvas[top_y : top_y + map_h, bar_x : bar_x + BAR_W] = _colors(levels, top)[:, None, :]
    image = Image.fromarray(canvas)
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(title):
        w = _text_width(line, TITLE)
        draw.text(((width - w) // 2, MARGIN + i * (TITLE + 5)), line, fill=INK, font=_font(TITLE))
    for row, label in enumerate(labels):
        y = top_y + row * cell_h + cell_h // 2
        x = MARGIN + label_w - 6
        draw.text((x, y), label, fill=INK, font=_font(TEXT), anchor="rm")
    axis_y = top_y + map_h
    for left, panel, top in zip(lefts, panels, tops, strict=True):
        draw.rectangle((left - 1, top_y - 1, left + map_w, axis_y), outline=FRAME)
        draw.text(
            (left + map_w // 2, top_y - 6), panel.title, fill=INK, font=_font(TITLE), anchor="md"
        )
        for column, text in column_labels.items():
            x = left + column * CELL_W + CELL_W // 2
            draw.line((x, axis_y, x, axis_y + 3), fill=FRAME)
            draw.text((x, axis_y + 5), text, fill=INK, font=_font(TEXT), anchor="mt")
        draw.text(
            (left + map_w // 2, axis_y + 6 + TEXT + 6),
            x_label,
            fill=INK,
            font=_font(TEXT),
            anchor="mt",
        )
        bar_x = left + map_w + BAR_GAP
        draw.rectangle((bar_x - 1, top_y - 1, bar_x + BAR_W, axis_y), outline=FRAME)
        for tick, y in _bar_positions(top, axis_y, map_h):
            draw.line((bar_x + BAR_W, y, bar_x + BAR_W + 3, y), fill=FRAME)
            draw.text((bar_x + BAR_W + 5, y), f"{tick:,}", fill=INK, font=_font(TEXT), anchor="lm")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=6)
    return buffer.getvalue()
