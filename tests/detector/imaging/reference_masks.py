"""The mask pasting and RLE encoding as they were before the crop-based
implementation (detector/imaging/masks.py, detector/imaging/rle.py): a
frozen copy, the reference those must equal bit for bit.

One detection at a time in float64: each box's interpolation matrices,
`rows @ mask @ cols.T` over the pixels inside the box, a full-image bool
mask per detection, and pycocotools' `encode` of that mask.

Shapes: D detections, T mask size (28), H, W target image size in pixels.
"""

import numpy as np

try:  # compressed RLE where pycocotools is installed
    from pycocotools import mask as _coco_mask
except ImportError:  # a serving image without it: uncompressed RLE
    _coco_mask = None


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


def _pixel_span(start: float, stop: float, limit: int) -> tuple[int, int]:
    """Pixels [first, last) whose centres lie in [start, stop), clipped."""
    first = int(np.clip(np.ceil(start - 0.5), 0, limit))
    last = int(np.clip(np.ceil(stop - 0.5), first, limit))
    return first, last


def paste_masks(
    masks: np.ndarray,
    boxes: np.ndarray,
    height: int,
    width: int,
    threshold: float = 0.5,
) -> np.ndarray:
    """Pastes box-relative masks into full images.

    Args:
      masks: f32[D, T, T] mask probabilities, each spanning its box.
      boxes: f32[D, 4] (x1, y1, x2, y2) in the target image's pixels.
      height, width: the target image size.
      threshold: probability at or above which a pixel is foreground.

    Returns:
      bool[D, height, width]; pixels whose centres are outside the box are
      False.
    """
    masks = np.asarray(masks, np.float64)
    boxes = np.asarray(boxes, np.float64)
    pasted = np.zeros((len(masks), height, width), bool)
    for d, (mask, box) in enumerate(zip(masks, boxes, strict=True)):
        x1, y1, x2, y2 = box
        left, right = _pixel_span(x1, x2, width)
        top, bottom = _pixel_span(y1, y2, height)
        if right <= left or bottom <= top:
            continue
        rows = _interpolation_matrix(y1, y2, top, bottom, mask.shape[0])
        cols = _interpolation_matrix(x1, x2, left, right, mask.shape[1])
        pasted[d, top:bottom, left:right] = rows @ mask @ cols.T >= threshold
    return pasted


def _resize_matrix(size_in: int, size_out: int) -> np.ndarray:
    """Bilinear resize weights f64[size_out, size_in], half-pixel centres.

    PyTorch's `interpolate(mode='bilinear', align_corners=False)` along one
    axis: output i reads input (i + 0.5) * size_in / size_out - 0.5,
    clamped at 0, the border cell extended.
    """
    coord = (np.arange(size_out) + 0.5) * (size_in / size_out) - 0.5
    return _linear_weights(np.maximum(coord, 0.0), size_in)


def paste_masks_torchvision(
    masks: np.ndarray,
    boxes: np.ndarray,
    height: int,
    width: int,
    threshold: float = 0.5,
) -> np.ndarray:
    """Pastes masks as torchvision's `paste_masks_in_image` (padding 1).

    Each T x T mask gets a one-cell zero border, its box grows by
    (T + 2) / T about its centre and is truncated to integer pixels
    (x1, y1, x2, y2 inclusive); the padded mask is resized bilinearly
    (half-pixel centres) to (y2 - y1 + 1) x (x2 - x1 + 1) pixels and placed
    at (x1, y1). A pixel is foreground where the probability is above
    `threshold` (torchvision's COCO evaluation: mask > 0.5).

    Args:
      masks: f32[D, T, T] mask probabilities, each spanning its box.
      boxes: f32[D, 4] (x1, y1, x2, y2) in the target image's pixels.
      height, width: the target image size.
      threshold: probability above which a pixel is foreground.

    Returns:
      bool[D, height, width].
    """
    masks = np.asarray(masks, np.float64)
    boxes = np.asarray(boxes, np.float64)
    pasted = np.zeros((len(masks), height, width), bool)
    if not len(masks):
        return pasted
    size = masks.shape[-1]
    scale = (size + 2.0) / size
    padded = np.pad(masks, ((0, 0), (1, 1), (1, 1)))
    half = 0.5 * (boxes[:, 2:] - boxes[:, :2]) * scale
    centre = 0.5 * (boxes[:, 2:] + boxes[:, :2])
    grown = np.concatenate([centre - half, centre + half], axis=1)
    grown = np.trunc(grown).astype(np.int64)  # torch's .to(int64)
    for d, (mask, box) in enumerate(zip(padded, grown, strict=True)):
        x1, y1, x2, y2 = (int(v) for v in box)
        box_w, box_h = max(x2 - x1 + 1, 1), max(y2 - y1 + 1, 1)
        resized = (
            _resize_matrix(size + 2, box_h)
            @ mask
            @ _resize_matrix(size + 2, box_w).T
        )
        left, right = max(x1, 0), min(x2 + 1, width)
        top, bottom = max(y1, 0), min(y2 + 1, height)
        if right <= left or bottom <= top:
            continue
        pasted[d, top:bottom, left:right] = (
            resized[top - y1 : bottom - y1, left - x1 : right - x1] > threshold
        )
    return pasted


# eval.mask_paste: how box-relative masks become image masks.
MASK_PASTERS = {
    "centres": paste_masks,
    "torchvision": paste_masks_torchvision,
}


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
