"""Box-relative masks pasted into image pixels by the rule `eval.mask_paste`
names ('centres', 'torchvision'), kept as box crops (numpy only)."""

import dataclasses
import functools
from collections.abc import Callable

import numpy as np

try:  # compressed RLE where pycocotools is installed
    from pycocotools import mask as _coco_mask
except ImportError:  # a serving image without it: uncompressed RLE
    _coco_mask = None

# A pixel whose float32 value is within _BAND * max(|mask|, |threshold|) of
# the threshold is decided in float64 (float32 errs by under 7 * 2**-24 of
# it: two rounded weights, products and sums per axis).
_BAND = 2.0**-18
# A pixel whose float64 value (from its four cells) is within _BAND_64 of
# the threshold (relative, as _BAND) sends its box through the float64
# matrix products that define the rule (the two differ by under 2**-48).
_BAND_64 = 2.0**-40
# OpenBLAS multiplies on one thread below m * n * k = 2**18 (per product).
_ONE_THREAD_PRODUCT = 2**18
# Grown torchvision boxes at or beyond this many pixels take the float64
# path (their integer conversion is as numpy makes it there).
_HUGE = 2.0**62


@dataclasses.dataclass(frozen=True)
class BoxMasks:
    """Pasted masks of one image, kept as their crops.

    Crop d covers the pixels [top, bottom) x [left, right) of spans[d] (all
    0 where the box has no pixel in the image); every pixel outside it is
    False. `pixels` holds the crops one after another, each after one
    False, as its columns (left to right, each top to bottom and then one
    False): runs of True never join across columns or crops, and COCO's
    column-major RLE reads them in order (`rle.py`).

    Attributes:
      height, width: the image size.
      spans: i64[D, 4] (top, bottom, left, right).
      pixels: bool[n], n = sum over the crops of 1 + w * (h + 1).
    """

    height: int
    width: int
    spans: np.ndarray
    pixels: np.ndarray

    def __len__(self) -> int:
        return len(self.spans)

    @functools.cached_property
    def starts(self) -> np.ndarray:
        """i64[D]: where each crop's first column starts in `pixels`."""
        return _starts(self.spans)[0]

    def columns(self, d: int) -> np.ndarray:
        """bool[w, h]: crop d as its columns (a view of `pixels`)."""
        top, bottom, left, right = (int(v) for v in self.spans[d])
        start = int(self.starts[d])
        block = self.pixels[start : start + (right - left) * (bottom - top + 1)]
        return block.reshape(right - left, bottom - top + 1)[:, :-1]

    def crop(self, d: int) -> np.ndarray:
        """bool[h, w]: crop d (a view of `pixels`)."""
        return self.columns(d).T

    def full(self, select: np.ndarray | None = None) -> np.ndarray:
        """bool[D, H, W]: the masks at image size (those of the indices
        or bool[D] `select` only, where given)."""
        chosen = np.arange(len(self))
        if select is not None:
            chosen = chosen[np.asarray(select)]
        pasted = np.zeros((len(chosen), self.height, self.width), bool)
        for k, d in enumerate(chosen):
            top, bottom, left, right = (int(v) for v in self.spans[d])
            pasted[k, top:bottom, left:right] = self.crop(d)
        return pasted


def _starts(spans: np.ndarray) -> tuple[np.ndarray, int]:
    """Where each crop starts in `BoxMasks.pixels`, i64[D], and its size."""
    sizes = 1 + (spans[:, 3] - spans[:, 2]) * (spans[:, 1] - spans[:, 0] + 1)
    ends = np.cumsum(sizes)
    return (ends - sizes + 1).astype(np.int64), int(ends[-1]) if len(
        ends
    ) else 0


_NO_PIXELS = ((0, 0, 0, 0), np.zeros((0, 0), bool))


def _linear_weights(coord: np.ndarray, size: int) -> np.ndarray:
    """f64[len(coord), size]: linear interpolation at coord (>= 0), the
    last cell extended."""
    low = np.minimum(np.floor(coord).astype(int), size - 1)
    high = np.minimum(low + 1, size - 1)
    frac = coord - low
    matrix = np.zeros((len(coord), size))
    rows = np.arange(len(coord))
    np.add.at(matrix, (rows, low), 1.0 - frac)
    np.add.at(matrix, (rows, high), frac)
    return matrix


@dataclasses.dataclass(frozen=True)
class _Axis:
    """Interpolation along one axis at the pixels of every box, flat.

    Box d's pixels are [offsets[d], offsets[d + 1]) of the n; pixel k reads
    cells low[k] and high[k] with weights 1 - frac[k] and frac[k] (the rows
    of `_linear_weights`), and `weights` holds those rows as f32[n, S].
    """

    offsets: np.ndarray  # i64[D + 1]
    low: np.ndarray  # i64[n]
    high: np.ndarray  # i64[n]
    frac: np.ndarray  # f64[n]
    weights: np.ndarray  # f32[n, S]


def _axis(coord: np.ndarray, size: int, offsets: np.ndarray) -> _Axis:
    """The `_Axis` of coordinates f64[n] (>= 0) in a mask of `size` cells,
    the last cell extended."""
    low = np.minimum(np.floor(coord).astype(np.int64), size - 1)
    high = np.minimum(low + 1, size - 1)
    frac = coord - low
    weights = np.zeros((len(coord), size), np.float32)
    rows = np.arange(len(coord))
    weights[rows, low] = 1.0 - frac
    weights[rows, high] += frac
    return _Axis(offsets, low, high, frac, weights)


def _flat_pixels(
    first: np.ndarray, last: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every box's pixels [first_d, last_d) along one axis, flat.

    Returns:
      owner i64[n] (the box of each pixel), pixel i64[n] (its index in the
      image) and offsets i64[D + 1] (box d's pixels are
      [offsets[d], offsets[d + 1])).
    """
    counts = last - first
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    owner = np.repeat(np.arange(len(counts)), counts)
    pixel = np.arange(offsets[-1]) - offsets[owner] + first[owner]
    return owner, pixel, offsets


def _float64_values(
    mask: np.ndarray, rows: _Axis, cols: _Axis, i: np.ndarray, j: np.ndarray
) -> np.ndarray:
    """f64[k]: the interpolated mask f64[S, S] at pixels (rows i, cols j)
    of the flat axes, from four cells each (within 2**-48 of float64's
    matrix products)."""

    def along_rows(cell: np.ndarray) -> np.ndarray:
        frac = rows.frac[i]
        return (1.0 - frac) * mask[rows.low[i], cell] + frac * mask[
            rows.high[i], cell
        ]

    frac = cols.frac[j]
    return (1.0 - frac) * along_rows(cols.low[j]) + frac * along_rows(
        cols.high[j]
    )


def _interpolate(
    cols: np.ndarray, mask: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    """f32[w, h]: `(cols @ mask.T) @ rows.T`, the box's values column by
    column, from cols f32[w, S], mask f32[S, S] and rows f32[h, S].

    In slabs of columns, each product below OpenBLAS's threading threshold:
    its threads spin while they wait, and in an eval loop whose device
    work runs beside them (or on a shared machine) a threaded product of
    this size cost 50 times the work.
    """
    size = mask.shape[0]
    values = np.empty((len(cols), len(rows)), np.float32)
    step = max(1, _ONE_THREAD_PRODUCT // (size * max(size, len(rows))))
    for first in range(0, len(cols), step):
        np.matmul(
            cols[first : first + step] @ mask.T,
            rows.T,
            out=values[first : first + step],
        )
    return values


def _paste(
    masks: np.ndarray,
    spans: np.ndarray,
    axes: tuple[_Axis, _Axis],
    exact: np.ndarray,
    threshold: float,
    mask64: Callable[[int], np.ndarray],
    exact_crop: Callable[[int], tuple[tuple, np.ndarray]],
    image_size: tuple[int, int],
) -> BoxMasks:
    """Each box's crop: `rows_d @ mask_d @ cols_d.T` against the threshold.

    Float32 decides every pixel further than `_BAND` (relative) from the
    threshold; `_float64_values` those within it, unless one is within
    `_BAND_64` of it, where the box's crop is `exact_crop(d)`.

    Args:
      masks: f32[D, S, S] the masks the axes interpolate.
      spans: i64[D, 4] (top, bottom, left, right), all 0 where no pixel.
      axes: (rows, cols), the axes of every box's pixels.
      exact: bool[D], boxes that take `exact_crop(d)` -> (span, crop).
      threshold: the foreground threshold.
      mask64: d -> f64[S, S], box d's mask as the float64 rule reads it.
      image_size: (height, width) of the image pasted on.
    """
    rows, cols = axes
    height, width = image_size
    scale = np.maximum(np.abs(masks).max(axis=(1, 2)), abs(threshold))
    exact = exact | ~np.isfinite(scale)
    spans = np.where(
        ((spans[:, 1] > spans[:, 0]) & (spans[:, 3] > spans[:, 2]))[:, None],
        spans,
        0,
    )
    exact_crops = {}
    for d in np.flatnonzero(exact):  # their spans may differ
        spans[d], exact_crops[d] = exact_crop(d)
    starts, size = _starts(spans)
    pasted = BoxMasks(height, width, spans, np.zeros(size, bool))
    bands = (_BAND * scale).tolist()
    row_at, col_at = rows.offsets.tolist(), cols.offsets.tolist()
    for d, (top, bottom, left, right), start in zip(
        range(len(masks)), spans.tolist(), starts.tolist(), strict=True
    ):
        height_d, width_d = bottom - top, right - left
        if not height_d * width_d:
            continue
        columns = pasted.pixels[start : start + width_d * (height_d + 1)]
        columns = columns.reshape(width_d, height_d + 1)[:, :-1]
        if d in exact_crops:
            columns[...] = exact_crops[d].T
            continue
        values = _interpolate(
            cols.weights[col_at[d] : col_at[d + 1]],
            masks[d],
            rows.weights[row_at[d] : row_at[d + 1]],
        )
        np.greater(values, threshold + bands[d], out=columns)
        near = values >= threshold - bands[d]
        np.not_equal(near, columns, out=near)
        if near.any():
            col, row = np.divmod(np.flatnonzero(near), height_d)
            refined = _float64_values(
                mask64(d), rows, cols, row + row_at[d], col + col_at[d]
            )
            if (np.abs(refined - threshold) <= _BAND_64 * scale[d]).any():
                columns[...] = exact_crop(d)[1].T
            else:
                columns[col, row] = refined > threshold
    return pasted


def _empty(height: int, width: int) -> BoxMasks:
    return BoxMasks(
        height, width, np.zeros((0, 4), np.int64), np.zeros(0, bool)
    )


def _interpolation_matrix(
    start: float, stop: float, first: int, last: int, size: int
) -> np.ndarray:
    """Linear interpolation weights f64[last - first, size] of pixel centres.

    Pixel i (centre i + 0.5) of the image maps to mask coordinate
    (i + 0.5 - start) / (stop - start) * size in a mask of `size` cells
    spanning [start, stop); cells are sampled at their centres with the
    border cells extended.
    """
    centres = np.arange(first, last) + 0.5
    coord = (centres - start) / max(stop - start, 1e-6) * size - 0.5
    return _linear_weights(np.clip(coord, 0.0, size - 1.0), size)


def _pixel_span(start: float, stop: float, limit: int) -> tuple[int, int]:
    """Pixels [first, last) whose centres lie in [start, stop), clipped."""
    first = int(np.clip(np.ceil(start - 0.5), 0, limit))
    last = int(np.clip(np.ceil(stop - 0.5), first, limit))
    return first, last


def _centres_exact(
    mask: np.ndarray, box: np.ndarray, height: int, width: int, threshold
) -> tuple[tuple, np.ndarray]:
    """The 'centres' rule for one box in float64: (span, crop)."""
    x1, y1, x2, y2 = box
    left, right = _pixel_span(x1, x2, width)
    top, bottom = _pixel_span(y1, y2, height)
    if right <= left or bottom <= top:
        return _NO_PIXELS
    rows = _interpolation_matrix(y1, y2, top, bottom, mask.shape[0])
    cols = _interpolation_matrix(x1, x2, left, right, mask.shape[1])
    return (top, bottom, left, right), rows @ mask @ cols.T >= threshold


def _centres_axis(
    start: np.ndarray, stop: np.ndarray, limit: int, size: int
) -> tuple[np.ndarray, np.ndarray, _Axis]:
    """First and last pixel i64[D] of every box along one axis (as
    `_pixel_span`) and the axis there (as `_interpolation_matrix`)."""
    first = np.clip(np.ceil(start - 0.5), 0, limit).astype(np.int64)
    last = np.clip(np.ceil(stop - 0.5), first, limit).astype(np.int64)
    owner, pixel, offsets = _flat_pixels(first, last)
    length = np.maximum(stop - start, 1e-6)
    coord = (pixel + 0.5 - start[owner]) / length[owner] * size - 0.5
    return first, last, _axis(np.clip(coord, 0.0, size - 1.0), size, offsets)


def centres_crops(
    masks: np.ndarray,
    boxes: np.ndarray,
    height: int,
    width: int,
    threshold: float = 0.5,
) -> BoxMasks:
    """Pastes box-relative masks: bilinear at the pixel centres in the box.

    Args:
      masks: f32[D, T, T] mask probabilities, each spanning its box.
      boxes: f[D, 4] (x1, y1, x2, y2) in the target image's pixels.
      height, width: the target image size.
      threshold: probability at or above which a pixel is foreground.

    Returns:
      The crops: pixels whose centres are inside the box and the image.
    """
    masks, boxes = np.asarray(masks), np.asarray(boxes, np.float64)
    if not len(masks):
        return _empty(height, width)
    exact = ~np.isfinite(boxes).all(axis=1)
    x1, y1, x2, y2 = np.where(exact[:, None], 0.0, boxes).T
    top, bottom, rows = _centres_axis(y1, y2, height, masks.shape[1])
    left, right, cols = _centres_axis(x1, x2, width, masks.shape[2])
    return _paste(
        np.asarray(masks, np.float32),
        np.stack([top, bottom, left, right], axis=1),
        (rows, cols),
        exact,
        threshold,
        lambda d: np.asarray(masks[d], np.float64),
        lambda d: _centres_exact(
            np.asarray(masks[d], np.float64), boxes[d], height, width, threshold
        ),
        (height, width),
    )


def _resize_matrix(size_in: int, size_out: int) -> np.ndarray:
    """Bilinear resize weights f64[size_out, size_in], half-pixel centres.

    PyTorch's `interpolate(mode='bilinear', align_corners=False)` along one
    axis: output i reads input (i + 0.5) * size_in / size_out - 0.5,
    clamped at 0, the border cell extended.
    """
    coord = (np.arange(size_out) + 0.5) * (size_in / size_out) - 0.5
    return _linear_weights(np.maximum(coord, 0.0), size_in)


def _torchvision_exact(
    padded: np.ndarray,
    grown: np.ndarray,
    height: int,
    width: int,
    threshold: float,
) -> tuple[tuple, np.ndarray]:
    """The 'torchvision' rule for one box in float64: (span, crop).

    `padded` f64[T + 2, T + 2] is the mask with its zero border, `grown`
    the grown integer box (x1, y1, x2, y2 inclusive).
    """
    x1, y1, x2, y2 = (int(v) for v in grown)
    left, right = max(x1, 0), min(x2 + 1, width)
    top, bottom = max(y1, 0), min(y2 + 1, height)
    if right <= left or bottom <= top:
        return _NO_PIXELS
    size = padded.shape[0]
    box_w, box_h = max(x2 - x1 + 1, 1), max(y2 - y1 + 1, 1)
    resized = (
        _resize_matrix(size, box_h) @ padded @ _resize_matrix(size, box_w).T
    )
    crop = resized[top - y1 : bottom - y1, left - x1 : right - x1]
    return (top, bottom, left, right), crop > threshold


def _grown_boxes(boxes: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Torchvision's boxes grown by (T + 2) / T about their centres: i64[D, 4]
    truncated to integers (x1, y1, x2, y2 inclusive), and f64[D, 4] before
    the truncation."""
    scale = (size + 2.0) / size
    half = 0.5 * (boxes[:, 2:] - boxes[:, :2]) * scale
    centre = 0.5 * (boxes[:, 2:] + boxes[:, :2])
    grown = np.concatenate([centre - half, centre + half], axis=1)
    with np.errstate(invalid="ignore"):  # as torch's .to(int64) of NaN
        return np.trunc(grown).astype(np.int64), grown


def torchvision_crops(
    masks: np.ndarray,
    boxes: np.ndarray,
    height: int,
    width: int,
    threshold: float = 0.5,
) -> BoxMasks:
    """Pastes masks as torchvision's `paste_masks_in_image` (padding 1).

    Each T x T mask gets a one-cell zero border, its box grows by
    (T + 2) / T about its centre and is truncated to integer pixels
    (x1, y1, x2, y2 inclusive); the padded mask is resized bilinearly
    (half-pixel centres) to (y2 - y1 + 1) x (x2 - x1 + 1) pixels and placed
    at (x1, y1). A pixel is foreground where the probability is above
    `threshold` (torchvision's COCO evaluation: mask > 0.5).

    Args:
      masks: f32[D, T, T] mask probabilities, each spanning its box.
      boxes: f[D, 4] (x1, y1, x2, y2) in the target image's pixels.
      height, width: the target image size.
      threshold: probability above which a pixel is foreground.

    Returns:
      The crops: the resized mask's pixels inside the image.
    """
    masks, boxes = np.asarray(masks), np.asarray(boxes, np.float64)
    if not len(masks):
        return _empty(height, width)
    size = masks.shape[-1] + 2
    grown, unrounded = _grown_boxes(boxes, masks.shape[-1])
    exact = ~(np.abs(unrounded) < _HUGE).all(axis=1)  # NaN included
    x1, y1, x2, y2 = np.where(exact[:, None], 0, grown).T
    left, right = np.maximum(x1, 0), np.minimum(x2 + 1, width)
    top, bottom = np.maximum(y1, 0), np.minimum(y2 + 1, height)
    none = (right <= left) | (bottom <= top)
    spans = np.where(
        none[:, None], 0, np.stack([top, bottom, left, right], axis=1)
    )
    axes = []
    for first, last, origin, start, stop in (
        (spans[:, 0], spans[:, 1], y1, y1, y2),
        (spans[:, 2], spans[:, 3], x1, x1, x2),
    ):
        owner, pixel, offsets = _flat_pixels(first, last)
        length = np.maximum(stop - start + 1, 1)
        ratio = size / length
        coord = (pixel - origin[owner] + 0.5) * ratio[owner] - 0.5
        axes.append(_axis(np.maximum(coord, 0.0), size, offsets))
    padded = np.pad(np.asarray(masks, np.float32), ((0, 0), (1, 1), (1, 1)))
    return _paste(
        padded,
        spans,
        (axes[0], axes[1]),
        exact,
        threshold,
        lambda d: np.pad(np.asarray(masks[d], np.float64), 1),
        lambda d: _torchvision_exact(
            np.pad(np.asarray(masks[d], np.float64), 1),
            grown[d],
            height,
            width,
            threshold,
        ),
        (height, width),
    )


# eval.mask_paste: how box-relative masks become image masks (BoxMasks).
MASK_PASTERS = {
    "centres": centres_crops,
    "torchvision": torchvision_crops,
}


def check_paster(name: str, key: str) -> None:
    """Raises one ValueError line naming config `key` for an unknown
    pasting rule."""
    if name not in MASK_PASTERS:
        raise ValueError(
            f"config.{key}={name!r}: unknown mask pasting; known: "
            f"{', '.join(MASK_PASTERS)}"
        )


def uncompressed_rle(mask: np.ndarray) -> dict:
    """COCO's uncompressed RLE of bool[H, W]: {"size", "counts": [int]}.

    Run lengths in column-major order, starting with a run of zeros
    (possibly empty); what pycocotools' `frPyObjects` reads.
    """
    flat = np.asarray(mask, bool).ravel(order="F")
    changes = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    bounds = np.concatenate([[0], changes, [flat.size]])
    counts = np.diff(bounds).tolist()
    if flat.size and flat[0]:
        counts = [0] + counts
    return {"size": list(mask.shape), "counts": counts}


def encode_rle(mask: np.ndarray) -> dict:
    """COCO RLE of bool[H, W]: compressed (counts a str) with pycocotools,
    else `uncompressed_rle`. Both are valid COCO results segmentations."""
    if _coco_mask is None:
        return uncompressed_rle(mask)
    rle = _coco_mask.encode(np.asfortranarray(mask.astype(np.uint8)))
    rle["counts"] = rle["counts"].decode("ascii")
    return rle
