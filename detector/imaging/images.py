"""Image files -> RGB uint8 arrays -> resized model inputs (numpy).

The resize rules are the eval pipeline's (detector/data/transforms.py)
written in numpy, one per `data.resize` (`RESIZE_RULES`):
- 'letterbox': scale = min(H / h, W / w), resized size
  max(round([h, w] * scale), 1) per axis (float32, half to even);
- 'shortest_edge': torchvision's GeneralizedRCNNTransform, scale =
  min(min_size / short side, max_size / long side) and size
  floor([h, w] * scale) per axis, in float64 (Python floats).
An image a rule makes larger than its canvas is letterboxed onto it.
Both resize with TensorFlow's (and torch's `interpolate`) bilinear kernel:
half-pixel centres, no antialiasing, in float32 from the decoded uint8
pixels. The image is placed at the top left and zero-padded right and
down. tests/detector/imaging/ checks this against the pipeline's output.

Shapes: h, w original image; H, W model input (a canvas).
"""

import math
import pathlib
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

# numpy and PIL only, like this package.
from detector.data import image_file

# predict.py's --max_pixels default, 100 megapixels: 300 MB decoded, and
# several times that while a PNG that large is resized and drawn (a JPEG
# is decoded reduced).
DEFAULT_MAX_PIXELS = 100_000_000


# What `read_decoded` returns: pixels, orientation and the whole size.
DecodedImage = image_file.DecodedImage


class ImageReadError(ValueError):
    """A file that is not a readable image; the message names it."""


def read_image(path: str | pathlib.Path) -> np.ndarray:
    """Reads a JPEG/PNG (any mode) as u8[h, w, 3], EXIF orientation applied.

    The reading of training and evaluation (`detector.data.image_file`):
    grayscale, palette, CMYK and RGBA files become RGB; 16-bit samples keep
    their high byte, as TensorFlow's PNG decoder reads them.

    Raises:
      ImageReadError: the file cannot be opened or decoded (named).
    """
    return read_decoded(path).pixels


def read_decoded(
    path: str | pathlib.Path,
    *,
    max_pixels: int | None = None,
    needed: Callable[[tuple[int, int]], tuple[int, int]] | None = None,
) -> DecodedImage:
    """`read_image` with predict's options (`image_file.read_rgb`): refuse
    images over `max_pixels` (0: no limit) in one line, and decode a JPEG
    reduced, at least to the (h, w) `needed` returns for its whole turned
    (h, w); `.size` is the whole image's (h, w).

    Raises:
      ImageReadError: the file cannot be opened or decoded, or is over
        `max_pixels` (named).
    """
    try:
        return image_file.read_rgb(
            str(path), max_pixels=max_pixels, needed=needed
        )
    except ValueError as e:
        raise ImageReadError(str(e)) from None


def resized_size(orig_size: np.ndarray, scale: float) -> np.ndarray:
    """(height, width) of an image resized by `scale`, before the padding.

    As the data pipeline computes it, in float32 with rounding half to even
    (TensorFlow's and numpy's `round`): max(round([h, w] * scale), 1).

    Args:
      orig_size: (height, width) of the original image.
      scale: the resize factor (float32 in an eval batch).

    Returns:
      f32[2]: resized (height, width) in input pixels.
    """
    hw = np.asarray(orig_size, np.float32)
    return np.maximum(np.round(hw * np.float32(scale)), np.float32(1.0))


def letterbox_size(
    orig_size: tuple[int, int], image_size: tuple[int, int]
) -> tuple[int, int]:
    """(h', w') of an h x w image resized to fit H x W, as eval resizes it."""
    hw = np.asarray(orig_size, np.float32)
    height, width = (np.float32(v) for v in image_size)
    resized = resized_size(hw, np.minimum(height / hw[0], width / hw[1]))
    return int(resized[0]), int(resized[1])


class Resize(NamedTuple):
    """A resize rule and its settings (`data.resize`, predict.json)."""

    rule: str  # a key of RESIZE_RULES
    image_size: tuple[int, int]  # letterbox: the (H, W) fitted
    min_size: int = 800  # shortest_edge: the short side (eval's)
    max_size: int = 1333  # shortest_edge: the long side at most


def shortest_edge_size(
    orig_size: tuple[int, int], min_size: float, max_size: float
) -> tuple[int, int]:
    """(h', w') as torchvision's GeneralizedRCNNTransform resizes h x w.

    scale = min(min_size / short, max_size / long) and floor(side * scale)
    per axis, in Python floats (float64) as torch's `interpolate` computes
    an output size from a scale factor; at least 1 pixel.
    """
    h, w = (int(v) for v in orig_size)
    scale = min(min_size / min(h, w), max_size / max(h, w))
    return max(math.floor(h * scale), 1), max(math.floor(w * scale), 1)


# data.resize -> (original (h, w), settings) -> resized (h', w').
RESIZE_RULES: dict[
    str, Callable[[tuple[int, int], Resize], tuple[int, int]]
] = {
    "letterbox": lambda hw, r: letterbox_size(hw, r.image_size),
    "shortest_edge": lambda hw, r: shortest_edge_size(
        hw, r.min_size, r.max_size
    ),
}


def fitted_size(
    orig_size: tuple[int, int], resize: Resize, canvas: tuple[int, int]
) -> tuple[int, int]:
    """(h', w') by `resize.rule`; letterboxed onto `canvas` if larger."""
    size = RESIZE_RULES[resize.rule](tuple(orig_size), resize)
    if size[0] > canvas[0] or size[1] > canvas[1]:
        return letterbox_size(orig_size, canvas)
    return size


def place(
    image: np.ndarray, size: tuple[int, int], canvas: tuple[int, int]
) -> np.ndarray:
    """u8[h, w, 3] -> f32[H, W, 3]: resized to `size` in float, unrounded,
    at the top left of a zero `canvas`."""
    out = np.zeros((*canvas, 3), np.float32)
    out[: size[0], : size[1]] = resize_bilinear(image, size)
    return out


def _axis_weights(
    in_size: int, out_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TensorFlow's half-pixel bilinear taps: (lower, upper, lerp f32)."""
    scale = np.float32(in_size) / np.float32(out_size)
    centres = (np.arange(out_size, dtype=np.float32) + np.float32(0.5)) * scale
    coord = centres - np.float32(0.5)
    floor = np.floor(coord)
    lower = np.maximum(floor, 0).astype(np.int64)
    upper = np.minimum(np.ceil(coord), in_size - 1).astype(np.int64)
    return lower, upper, (coord - floor).astype(np.float32)


def resize_bilinear(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """`tf.image.resize(image, size, 'bilinear')`: [h, w, C] -> f32[h', w', C].

    Half-pixel centres, no antialiasing, computed in float32 in the
    kernel's order (lerp along x, then along y).
    """
    image = np.asarray(image, np.float32)
    y_low, y_high, y_lerp = _axis_weights(image.shape[0], size[0])
    x_low, x_high, x_lerp = _axis_weights(image.shape[1], size[1])
    x_lerp = x_lerp[None, :, None]
    top = image[y_low]
    bottom = image[y_high]
    top = top[:, x_low] + (top[:, x_high] - top[:, x_low]) * x_lerp
    bottom = bottom[:, x_low] + (bottom[:, x_high] - bottom[:, x_low]) * x_lerp
    return top + (bottom - top) * y_lerp[:, None, None]
