"""Image files as uint8 RGB pixels, turned by their EXIF orientation; 16-bit
samples keep their high byte, deeper ones are refused (docs/bad-input.md);
predict alone bounds the pixels, predict and evaluation draft large JPEGs
(docs/export-and-predict.md)."""

import contextlib
import dataclasses
import io
from collections.abc import Callable, Iterator

import numpy as np
from PIL import Image

from detector.imaging import orientation as orientation_lib

# PIL modes of 16-bit single-channel samples (a 16-bit grayscale PNG).
_SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")
# PIL modes of samples wider than 16 bits or floating point.
_REFUSED_MODES = {"I": "32-bit integer", "F": "32-bit float"}
# (h, w) of a whole turned image -> the (h, w) it is resized to: a JPEG is
# decoded at the smallest scale that is at least that (`read_rgb`).
Needed = Callable[[tuple[int, int]], tuple[int, int]]
# What PIL raises for a file that is no image it reads.
_UNREADABLE = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)


@dataclasses.dataclass(frozen=True)
class ImageHeader:
    """What an image file's header says: how its pixels are stored."""

    orientation: int  # EXIF orientation 1..8 (1: as stored)
    stored_size: tuple[int, int]  # (width, height) of the stored pixels

    @property
    def size(self) -> tuple[int, int]:
        """(h, w) of the whole image after the orientation."""
        width, height = self.stored_size
        return orientation_lib.oriented_size(height, width, self.orientation)


@dataclasses.dataclass(frozen=True)
class DecodedImage(ImageHeader):
    """Pixels turned for display (`size` stays the whole image's where
    `pixels` was decoded reduced), and how the file stored them."""

    pixels: np.ndarray  # uint8 [h, w, 3], after the orientation


def _rgb(image: Image.Image) -> np.ndarray:
    """uint8 [h, w, 3] of an opened image (stored orientation)."""
    if image.mode in _SIXTEEN_BIT_MODES:
        samples = np.asarray(image).astype(np.uint16)
        gray = (samples >> 8).astype(np.uint8)
        return np.repeat(gray[..., None], 3, axis=-1)
    return np.asarray(image.convert("RGB"))


@contextlib.contextmanager
def _pillow_guard_off(max_pixels: int | None) -> Iterator[None]:
    """Pillow's pixel guard off while `max_pixels` stands in for it."""
    if max_pixels is None:
        yield
        return
    previous, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
    try:
        yield
    finally:
        Image.MAX_IMAGE_PIXELS = previous


class TooLargeError(ValueError):
    """An image over `max_pixels`; the message names it and the limit."""


def _check_pixels(path: str, image: Image.Image, max_pixels: int | None):
    width, height = image.size
    if max_pixels and width * height > max_pixels:
        raise TooLargeError(
            f"{path}: {width} x {height} = {width * height} pixels, over "
            f"--max_pixels={max_pixels}; raise --max_pixels to read it "
            "(0: no limit)"
        )


def _draft(
    image: Image.Image,
    orientation: int,
    needed: Needed,
) -> None:
    """Asks a JPEG decoder for the smallest scale still >= `needed`."""
    width, height = image.size
    turned = orientation_lib.oriented_size(height, width, orientation)
    rows, cols = needed(turned)
    if orientation_lib.swaps_axes(orientation):
        rows, cols = cols, rows
    if image.format == "JPEG":
        image.draft(image.mode, (cols, rows))


def read_rgb(
    path: str,
    *,
    max_pixels: int | None = None,
    needed: Needed | None = None,
    data: bytes | None = None,
) -> DecodedImage:
    """Reads `path` (see the module docstring).

    Args:
      data: the file's bytes, already read (they are decoded, not the file
        as it is now; `path` names them in messages).
      max_pixels: refuse images of more pixels (0: no limit; None:
        Pillow's own guard, as training reads).
      needed: (h, w) of the whole turned image -> the (h, w) the caller
        resizes it to; a JPEG is then decoded at the smallest scale that
        is at least that (`DecodedImage.size` stays the whole image's).

    Raises:
      ValueError: one line naming `path`: the file is no image PIL decodes,
        its samples have no 8-bit reading, its pixels do not fit in memory,
        or it is over `max_pixels` (TooLargeError).
    """
    stored_size = None
    source = path if data is None else io.BytesIO(data)
    try:
        with _pillow_guard_off(max_pixels), Image.open(source) as image:
            stored_size = image.size
            _check_pixels(path, image, max_pixels)
            mode = image.mode
            if image.format != "JPEG":  # JPEG's draft must come first
                # Decoded here, so that a damaged stream raises: reading a
                # PNG's EXIF loads its pixels, and that error is swallowed
                # (the pixels then stay black).
                image.load()
            orientation = orientation_lib.of_image(image)
            stored_size = image.size
            if needed is not None:
                _draft(image, orientation, needed)
            stored = None if mode in _REFUSED_MODES else _rgb(image)
    except TooLargeError:
        raise
    except MemoryError:  # a PNG bomb with no --max_pixels, say
        width, height = stored_size or ("?", "?")
        raise ValueError(
            f"{path}: {width} x {height} pixels do not fit in memory to "
            "decode; free memory or leave this file out"
        ) from None
    except _UNREADABLE as e:
        # PIL names the file object it read: name the file.
        why = str(e).replace(repr(source), repr(path))
        raise ValueError(f"{path}: cannot decode image ({why})") from None
    if stored is None:
        raise ValueError(
            f"{path}: {_REFUSED_MODES[mode]} samples (PIL mode {mode!r}) "
            "have no 8-bit reading; convert the image to 8 or 16 bits "
            "per sample"
        )
    return DecodedImage(
        orientation,
        stored_size,
        pixels=orientation_lib.orient(stored, orientation),
    )


def read_header(path: str) -> ImageHeader:
    """The header of image `path`: its stored size and EXIF orientation,
    with no pixel decoding (PIL reads the header alone).

    Raises:
      ValueError: one line naming `path`: no image PIL opens.
    """
    try:
        with Image.open(path) as image:
            return ImageHeader(orientation_lib.of_image(image), image.size)
    except _UNREADABLE as e:
        raise ValueError(f"{path}: cannot decode image ({e})") from None


# Magic bytes -> what a complete file of that format ends with: JPEG's
# end-of-image marker (never inside the scan data, where 0xFF is followed
# by 0x00 or a restart marker), PNG's IEND chunk.
_ENDINGS = {b"\xff\xd8\xff": b"\xff\xd9", b"\x89PNG": b"IEND\xaeB`\x82"}
# How far from the end the ending is looked for (padding after it).
TAIL_BYTES = 64


def check_complete(path: str) -> None:
    """Raises ValueError naming `path` when it is a JPEG or PNG cut short
    (a copy or download that stopped): its header reads, its pixels do
    not. Cheap: the last TAIL_BYTES are read; a file whose ending is not
    among them (a trailer after it: a motion photo's video) is decoded to
    tell."""
    with open(path, "rb") as f:
        head = f.read(8)
        size = f.seek(0, 2)
        f.seek(max(0, size - TAIL_BYTES))
        tail = f.read()
    ending = next(
        (end for magic, end in _ENDINGS.items() if head.startswith(magic)),
        None,
    )
    if ending is None or ending in tail:
        return
    try:
        read_rgb(path)
    except ValueError as e:
        raise ValueError(
            f"{e}: the file is cut short or damaged; copy it again or "
            "remove its record"
        ) from None
