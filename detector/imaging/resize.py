"""The resize rule by name (`data.resize`): an image's scale and size, in pure
Python and numpy, for tf.data (transforms.py, lsj.py) and imaging/images.py.
"""

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

Size = Sequence[float] | np.ndarray  # (height, width)


class Options(NamedTuple):
    """A rule's values for one image (at eval: no jitter, the last min_size)."""

    jitter: float = 1.0  # letterbox: the scale factor drawn in training
    min_size: float = 800.0  # shortest_edge: the short side
    max_size: float = 1333.0  # shortest_edge: the long side at most


DEFAULTS = Options()


def resized_size(hw: Size, scale: float) -> np.ndarray:
    """f32[2]: max(round(hw * scale), 1) in float32, half to even."""
    hw = np.asarray(hw, np.float32)
    return np.maximum(np.round(hw * np.float32(scale)), np.float32(1.0))


def letterbox(
    hw: Size, canvas: tuple[int, int], options: Options = DEFAULTS
) -> tuple[np.float32, np.ndarray]:
    """(scale, f32[2] size): scale = min(H / h, W / w) * jitter, float32."""
    hw = np.asarray(hw, np.float32)
    fit = np.minimum(
        np.float32(canvas[0]) / hw[0], np.float32(canvas[1]) / hw[1]
    )
    scale = np.float32(fit * np.float32(options.jitter))
    return scale, resized_size(hw, scale)


def shortest_edge_scale(hw: Size, min_size: float, max_size: float) -> float:
    """min(min_size / short side, max_size / long side), in float64."""
    h, w = (float(v) for v in np.asarray(hw))
    return min(float(min_size) / min(h, w), float(max_size) / max(h, w))


def shortest_edge_size(
    hw: Size, min_size: float, max_size: float
) -> tuple[int, int]:
    """(h', w') as torchvision's GeneralizedRCNNTransform resizes h x w:
    floor(side * scale) in float64, as torch's `interpolate`, at least 1."""
    scale = shortest_edge_scale(hw, min_size, max_size)
    h, w = (float(v) for v in np.asarray(hw))
    return max(math.floor(h * scale), 1), max(math.floor(w * scale), 1)


def shortest_edge(
    hw: Size, canvas: tuple[int, int], options: Options = DEFAULTS
) -> tuple[np.float32, np.ndarray]:
    """(scale, f32[2] size): `shortest_edge_size`, or letterboxed onto
    `canvas` where that is larger."""
    size = shortest_edge_size(hw, options.min_size, options.max_size)
    if size[0] > canvas[0] or size[1] > canvas[1]:
        return letterbox(hw, canvas)
    scale = shortest_edge_scale(hw, options.min_size, options.max_size)
    return np.float32(scale), np.asarray(size, np.float32)


# data.resize -> (hw, canvas (H, W), options) -> (scale f32, size f32[2]).
RULES: dict[
    str,
    Callable[[Size, tuple[int, int], Options], tuple[np.float32, np.ndarray]],
] = {
    "letterbox": letterbox,
    "shortest_edge": shortest_edge,
}


def check_rule(name: str, key: str) -> None:
    """Raises ValueError (one line: `key`, `name`, the known rules) unless
    `name` is a rule of RULES."""
    if name not in RULES:
        raise ValueError(
            f"config.{key}={name!r}: must be one of {', '.join(RULES)}"
        )


def scale_and_size(
    rule: str, hw: Size, canvas: tuple[int, int], options: Options = DEFAULTS
) -> tuple[np.float32, np.ndarray]:
    """(scale f32, size f32[2]) of an h x w image by `RULES[rule]`."""
    return RULES[rule](hw, canvas, options)
