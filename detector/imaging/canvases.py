"""The canvases an image is placed on: one (`data.image_size`), or a
landscape and a portrait one with `data.group_orientations`; training's
own one where `data.train_image_size` is set."""

from collections.abc import Sequence
from typing import TYPE_CHECKING

# ml_collections only where a config is copied (`on_canvas`): `pick` and
# `orientation` serve predict.py --exported, which runs without it.
if TYPE_CHECKING:
    import ml_collections

Canvas = tuple[int, int]  # (height, width)

LANDSCAPE, PORTRAIT = 0, 1
# Orientation index -> its name (logs, benchmark tables).
NAMES = ("landscape", "portrait")


def canvases(data: "ml_collections.ConfigDict") -> tuple[Canvas, ...]:
    """The canvases, indexed by orientation (one when not grouping)."""
    height, width = (int(v) for v in data.image_size)
    if data.group_orientations:
        return (height, width), (width, height)
    return ((height, width),)


def training(data: "ml_collections.ConfigDict") -> tuple[Canvas, ...]:
    """The canvases training batches are on: data.train_image_size where
    set, else `canvases`."""
    size = tuple(int(v) for v in data.get("train_image_size", (0, 0)))
    if any(size):
        return (size,)
    return canvases(data)


def orientation(height: int, width: int) -> int:
    """PORTRAIT for an image taller than wide, else LANDSCAPE (squares)."""
    return PORTRAIT if height > width else LANDSCAPE


def orientations(sizes: Sequence[tuple[int, int]]) -> list[int]:
    """The orientation of each (height, width)."""
    return [orientation(int(h), int(w)) for h, w in sizes]


def group(kinds: Sequence[int]) -> tuple[list[int], ...]:
    """The positions in `kinds` of each orientation, LANDSCAPE first, in
    order (an orientation with none: an empty list)."""
    groups = tuple([] for _ in NAMES)
    for position, kind in enumerate(kinds):
        groups[kind].append(position)
    return groups


def pick(choices: Sequence[Canvas], height: int, width: int) -> Canvas:
    """The canvas of `choices` (`canvases`' order) an h x w image is placed
    on."""
    return choices[orientation(height, width) % len(choices)]


def on_canvas(
    data: "ml_collections.ConfigDict", canvas: Canvas
) -> "ml_collections.ConfigDict":
    """A copy of config.data whose one canvas is `canvas`: the transforms
    of one orientation's images."""
    import ml_collections

    placed = ml_collections.ConfigDict(data.to_dict())
    placed.image_size = tuple(canvas)
    placed.group_orientations = False
    return placed
