"""EXIF orientation read from an encoded image and applied, by one table for
PIL (`orient`) and TensorFlow (`orient_tf`, which imports it when called).
"""

import io

import numpy as np
from PIL import Image

ORIENTATION_TAG = 0x0112
# orientation -> (transpose, flip rows, flip columns), applied in that order
# to an array [h, w, ...]; a missing, unreadable or out-of-range tag is 1.
_STEPS: dict[int, tuple[bool, bool, bool]] = {
    1: (False, False, False),  # as stored
    2: (False, False, True),  # mirror left-right
    3: (False, True, True),  # rotate 180
    4: (False, True, False),  # mirror top-bottom
    5: (True, False, False),  # transpose
    6: (True, False, True),  # rotate 90 clockwise
    7: (True, True, True),  # transverse
    8: (True, True, False),  # rotate 90 counter-clockwise
}


def valid(orientation: int) -> int:
    """`orientation` when it is 1..8, else 1 (as stored)."""
    return orientation if orientation in _STEPS else 1


def of_image(image: Image.Image) -> int:
    """The EXIF orientation of an opened PIL image (1 without one)."""
    try:
        value = image.getexif().get(ORIENTATION_TAG, 1)
    except (OSError, SyntaxError, ValueError, TypeError):
        return 1  # a damaged EXIF block: the pixels as stored
    return valid(value) if isinstance(value, int) else 1


def of_bytes(encoded: bytes) -> np.int32:
    """The EXIF orientation of an encoded image (1 without one).

    Reads the headers only; bytes PIL cannot open are 1 (the decoder
    reports them).
    """
    if isinstance(encoded, np.ndarray):  # from tf.numpy_function
        encoded = encoded.item()
    try:
        with Image.open(io.BytesIO(encoded)) as image:
            return np.int32(of_image(image))
    except (OSError, SyntaxError, ValueError):
        return np.int32(1)


def swaps_axes(orientation: int) -> bool:
    """Whether `orientation` swaps width and height (5..8)."""
    return _STEPS[valid(orientation)][0]


def oriented_size(height: int, width: int, orientation: int) -> tuple[int, int]:
    """(height, width) of an h x w stored image once turned."""
    if swaps_axes(orientation):
        return width, height
    return height, width


def orient(pixels: np.ndarray, orientation: int) -> np.ndarray:
    """Turns stored pixels [h, w, ...] for display (see the table)."""
    transpose, flip_rows, flip_cols = _STEPS[valid(orientation)]
    if transpose:
        pixels = np.swapaxes(pixels, 0, 1)
    if flip_rows:
        pixels = pixels[::-1]
    if flip_cols:
        pixels = pixels[:, ::-1]
    return np.ascontiguousarray(pixels)


def orientation_tf(encoded):
    """tf.int32 [] EXIF orientation of a tf.string encoded image."""
    import tensorflow as tf  # noqa: PLC0415 (the pure part stays TF-free)

    orientation = tf.numpy_function(
        of_bytes, [encoded], tf.int32, stateful=False
    )
    return tf.ensure_shape(orientation, [])


def _steps_tf(orientation):
    """(transpose, flip rows, flip columns) tf.bool [] of `orientation`."""
    import tensorflow as tf  # noqa: PLC0415 (the pure part stays TF-free)

    table = tf.constant(
        [_STEPS[1]] + [_STEPS[n] for n in range(1, 9)], tf.bool
    )  # row 0 (out of range) as stored
    in_range = (orientation >= 1) & (orientation <= 8)
    return tf.unstack(tf.gather(table, tf.where(in_range, orientation, 0)))


def oriented_size_tf(size, orientation):
    """`oriented_size` in TensorFlow: size [2] (height, width)."""
    import tensorflow as tf  # noqa: PLC0415 (the pure part stays TF-free)

    transpose, _, _ = _steps_tf(orientation)
    return tf.where(transpose, tf.reverse(size, [0]), size)


def orient_tf(image, orientation):
    """`orient` in TensorFlow: image [h, w, C], orientation int32 []."""
    import tensorflow as tf  # noqa: PLC0415 (the pure part stays TF-free)

    transpose, flip_rows, flip_cols = _steps_tf(orientation)
    perm = [1, 0] + list(range(2, image.shape.rank))
    image = tf.cond(transpose, lambda: tf.transpose(image, perm), lambda: image)
    image = tf.cond(flip_rows, lambda: tf.reverse(image, [0]), lambda: image)
    return tf.cond(flip_cols, lambda: tf.reverse(image, [1]), lambda: image)
