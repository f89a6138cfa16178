"""Image files -> RGB uint8 arrays -> resized, placed model inputs (numpy):
sizes by detector/imaging/resize.py, pixels by TensorFlow's bilinear kernel, so
predict's inputs are eval's (tests/detector/imaging/)."""

import pathlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

# numpy and PIL only, like this package.
from detector.imaging import canvases, image_file, resize

if TYPE_CHECKING:  # predict.py --exported runs without ml_collections
    import ml_collections

# The rule names, for predict/ (which imports only imaging/ of detector/).
RESIZE_RULES = resize.RULES
# (height, width) of a canvas, and the canvas of an h x w image among a
# model's canvases (one, or landscape and portrait: imaging/canvases.py).
Canvas = canvases.Canvas
pick_canvas = canvases.pick

# predict.py's --max_pixels default, 100 megapixels: 300 MB decoded, and
# several times that while a PNG that large is resized and drawn (a JPEG
# is decoded reduced).
DEFAULT_MAX_PIXELS = 100_000_000


# What `read_decoded` returns: pixels, orientation and the whole size.
DecodedImage = image_file.DecodedImage


class ImageReadError(ValueError):
    """A file that is not a readable image; the message names it."""


def read_decoded(
    path: str | pathlib.Path,
    *,
    max_pixels: int | None = None,
    needed: image_file.Needed | None = None,
    data: bytes | None = None,
) -> DecodedImage:
    """The file `path` as u8[h, w, 3] pixels, EXIF-turned
    (`image_file.read_rgb`, the reading of training and evaluation):
    images over `max_pixels` (0: no limit) refused in one line, a JPEG
    decoded reduced, at least to the (h, w) `needed` returns for its whole
    turned (h, w); `.size` is the whole image's (h, w). `data`, where
    given, are the file's bytes already read: those are decoded.

    Raises:
      ImageReadError: the file cannot be opened or decoded, or is over
        `max_pixels` (named).
    """
    try:
        return image_file.read_rgb(
            str(path), max_pixels=max_pixels, needed=needed, data=data
        )
    except ValueError as e:
        raise ImageReadError(str(e)) from None


class Resize(NamedTuple):
    """A resize rule and its settings (`data.resize`, predict.json); the
    canvas it sizes against is each image's own (`fitted_size`)."""

    rule: str  # a key of resize.RULES
    min_size: int = 800  # shortest_edge: the short side (eval's)
    max_size: int = 1333  # shortest_edge: the long side at most

    @classmethod
    def of(cls, data: "ml_collections.ConfigDict") -> "Resize":
        """The rule of a config's data section as inference applies it
        (eval's: the last of data.min_size)."""
        return cls(data.resize, int(data.min_size[-1]), int(data.max_size))


def fitted_size(
    orig_size: tuple[int, int], rule: Resize, canvas: Canvas
) -> tuple[int, int]:
    """(h', w') of an h x w image by `rule`, as eval sizes it on `canvas`."""
    options = resize.Options(1.0, rule.min_size, rule.max_size)
    _, size = resize.scale_and_size(rule.rule, orig_size, canvas, options)
    return int(size[0]), int(size[1])


def fitted_on(
    orig_size: tuple[int, int], rule: Resize, choices: Sequence[Canvas]
) -> tuple[int, int]:
    """(h', w') of a whole h x w image by `rule` on its canvas of `choices`:
    the size the model reads it at, and at least the size a JPEG is decoded
    at (`read_decoded`'s `needed`), in predict and evaluation alike."""
    return fitted_size(orig_size, rule, pick_canvas(choices, *orig_size))


def place(
    image: np.ndarray, size: tuple[int, int], canvas: Canvas
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
