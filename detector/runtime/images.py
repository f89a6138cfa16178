"""Image files -> RGB uint8 arrays -> letterboxed model inputs (numpy).

The letterbox is the eval pipeline's geometry (detector/data/transforms.py)
written in numpy: scale = min(H / h, W / w), resized size
max(round([h, w] * scale), 1) per axis (float32, half to even), TensorFlow's
bilinear resize with half-pixel centres and no antialiasing, placed at the
top left and zero-padded right and down. tests/detector/runtime/ checks it
against the pipeline's own output.

Shapes: h, w original image; H, W model input.
"""

import pathlib

import numpy as np

# numpy and PIL only, like this package.
from detector.data import image_file


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
    try:
        return image_file.read_rgb(str(path)).pixels
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


def letterbox(image: np.ndarray, image_size: tuple[int, int]) -> np.ndarray:
    """u8[h, w, 3] -> u8[H, W, 3]: resized as eval resizes, zero-padded.

    The resized pixels are rounded to uint8 (the exported model's input
    type); the model zeroes the padding after normalising, from the
    original size it is given with the image.
    """
    height, width = image_size
    resized = resize_bilinear(
        image, letterbox_size(image.shape[:2], image_size)
    )
    resized = np.clip(np.round(resized), 0, 255).astype(np.uint8)
    out = np.zeros((height, width, 3), np.uint8)
    part = resized[:height, :width]
    out[: part.shape[0], : part.shape[1]] = part
    return out
