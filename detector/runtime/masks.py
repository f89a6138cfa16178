"""Box-relative masks -> full-image masks -> COCO run-length encoding.

Numpy only (pycocotools where installed), shared by evaluation
(`detector.modeling.postprocess`) and the exported predictor.

Shapes: D detections, T mask size, H, W target image size in pixels.
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
    coord = np.clip(coord, 0.0, size - 1.0)
    low = np.floor(coord).astype(int)
    high = np.minimum(low + 1, size - 1)
    frac = coord - low
    matrix = np.zeros((len(centres), size))
    rows = np.arange(len(centres))
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
