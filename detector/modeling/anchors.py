"""Static anchors for a fixed image size, computed once on the host.

Shapes: L levels, A anchors per cell (len(aspect_ratios)), N_l = H_l W_l A.
"""

import functools
from typing import NamedTuple

import numpy as np


class AnchorSpec(NamedTuple):
    """The anchors of a pyramid (docs/model.md, "RPN")."""

    min_level: int
    max_level: int
    scale: float  # anchor side at level l: scale * 2**l
    aspect_ratios: tuple[float, ...]
    offset: float = 0.5
    round_sizes: bool = False

    def pyramid(self, image_size: tuple[int, int]) -> list[np.ndarray]:
        """Per-level anchors [f32[N_l, 4]] of an image of `image_size`."""
        return pyramid_anchors(
            image_size,
            self.min_level,
            self.max_level,
            self.scale,
            self.aspect_ratios,
            offset=self.offset,
            round_sizes=self.round_sizes,
        )

    def cell_origins(self, image_size: tuple[int, int]) -> list[np.ndarray]:
        """Per-level i32[N_l, 2] cell origins (`level_cell_origins`)."""
        return [
            level_cell_origins(
                tuple(image_size), level, len(self.aspect_ratios)
            )
            for level in range(self.min_level, self.max_level + 1)
        ]


@functools.cache
def level_anchors(
    image_size: tuple[int, int],
    level: int,
    anchor_scale: float,
    aspect_ratios: tuple[float, ...],
    offset: float = 0.5,
    round_sizes: bool = False,
) -> np.ndarray:
    """Anchors f32[N_l, 4] (x1, y1, x2, y2) of one level in input pixels."""
    stride = 2**level
    height, width = image_size[0] // stride, image_size[1] // stride
    side = anchor_scale * stride
    ratios = np.asarray(aspect_ratios, np.float64)
    half_w = 0.5 * side / np.sqrt(ratios)  # [A]
    half_h = 0.5 * side * np.sqrt(ratios)
    if round_sizes:
        half_w, half_h = np.round(half_w), np.round(half_h)
    cy = (np.arange(height) + offset) * stride
    cx = (np.arange(width) + offset) * stride
    cy, cx = np.meshgrid(cy, cx, indexing="ij")  # [H, W]
    cx, cy = cx[..., None], cy[..., None]  # [H, W, 1]
    anchors = np.stack(
        [cx - half_w, cy - half_h, cx + half_w, cy + half_h], axis=-1
    )  # [H, W, A, 4]
    anchors = anchors.reshape(-1, 4).astype(np.float32)
    anchors.flags.writeable = False
    return anchors


@functools.cache
def level_cell_origins(
    image_size: tuple[int, int], level: int, num_anchors: int
) -> np.ndarray:
    """i32[N_l, 2]: the (y, x) pixel of each anchor's cell's top left.

    An anchor's cell exists in an image h x w padded to a multiple d of
    the stride exactly when its origin is inside [0, h') x [0, w') with
    h', w' the image's size rounded up to d.
    """
    stride = 2**level
    rows = np.arange(image_size[0] // stride) * stride
    cols = np.arange(image_size[1] // stride) * stride
    y, x = np.meshgrid(rows, cols, indexing="ij")
    origins = np.stack([y, x], axis=-1)[:, :, None, :]
    origins = np.broadcast_to(origins, (*y.shape, num_anchors, 2))
    origins = origins.reshape(-1, 2).astype(np.int32)
    origins.flags.writeable = False
    return origins


def pyramid_anchors(
    image_size: tuple[int, int],
    min_level: int,
    max_level: int,
    anchor_scale: float,
    aspect_ratios: tuple[float, ...],
    *,
    offset: float = 0.5,
    round_sizes: bool = False,
) -> list[np.ndarray]:
    """Per-level anchors [f32[N_l, 4] for l in min_level..max_level]."""
    return [
        level_anchors(
            tuple(image_size),
            level,
            float(anchor_scale),
            tuple(aspect_ratios),
            float(offset),
            bool(round_sizes),
        )
        for level in range(min_level, max_level + 1)
    ]
