"""Image files as uint8 RGB pixels, turned by their EXIF orientation; 16-bit
samples keep their high byte, deeper ones are refused (docs/bad-input.md)."""

import dataclasses

import numpy as np
from PIL import Image

from detector.data import orientation as orientation_lib

# PIL modes of 16-bit single-channel samples (a 16-bit grayscale PNG).
_SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")
# PIL modes of samples wider than 16 bits or floating point.
_REFUSED_MODES = {"I": "32-bit integer", "F": "32-bit float"}


@dataclasses.dataclass(frozen=True)
class DecodedImage:
    """Pixels turned for display, and how the file stored them."""

    pixels: np.ndarray  # uint8 [h, w, 3], after the orientation
    orientation: int  # EXIF orientation 1..8 (1: as stored)
    stored_size: tuple[int, int]  # (width, height) of the stored pixels


def _rgb(image: Image.Image) -> np.ndarray:
    """uint8 [h, w, 3] of an opened image (stored orientation)."""
    if image.mode in _SIXTEEN_BIT_MODES:
        samples = np.asarray(image).astype(np.uint16)
        gray = (samples >> 8).astype(np.uint8)
        return np.repeat(gray[..., None], 3, axis=-1)
    return np.asarray(image.convert("RGB"))


def read_rgb(path: str) -> DecodedImage:
    """Reads `path` (see the module docstring).

    Raises:
      ValueError: one line naming `path`: the file is no image PIL decodes,
        or its samples have no 8-bit reading.
    """
    try:
        with Image.open(path) as image:
            mode = image.mode
            orientation = orientation_lib.of_image(image)
            stored = None if mode in _REFUSED_MODES else _rgb(image)
    except (
        OSError,
        SyntaxError,
        ValueError,
        Image.DecompressionBombError,
    ) as e:
        raise ValueError(f"{path}: cannot decode image ({e})") from None
    if stored is None:
        raise ValueError(
            f"{path}: {_REFUSED_MODES[mode]} samples (PIL mode {mode!r}) "
            "have no 8-bit reading; convert the image to 8 or 16 bits "
            "per sample"
        )
    return DecodedImage(
        orientation_lib.orient(stored, orientation),
        orientation,
        (stored.shape[1], stored.shape[0]),
    )
