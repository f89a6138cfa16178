"""COCO RLE of pasted masks, from their box crops without a full-image mask;
bit for bit `masks.encode_rle` of the full mask."""

import numpy as np

from detector.imaging import masks

try:  # compressed RLE where pycocotools is installed
    from pycocotools import mask as _coco_mask
except ImportError:  # a serving image without it: uncompressed RLE
    _coco_mask = None


def _changes(pixels: np.ndarray) -> np.ndarray:
    """i64[c]: the positions k where pixels[k] != pixels[k - 1], in order.

    Boundaries are few: found among 8-byte words first, then bytes.
    """
    count = len(pixels) - 1
    differ = np.zeros(-(-count // 8) * 8, bool)
    np.not_equal(pixels[1:], pixels[:-1], out=differ[:count])
    words = np.flatnonzero(differ.view(np.uint64))
    within = np.flatnonzero(differ.reshape(-1, 8)[words])
    return words[within // 8] * 8 + within % 8 + 1


def _boundaries(pasted: masks.BoxMasks) -> tuple[np.ndarray, np.ndarray]:
    """Run boundaries of every mask: detection i64[c] and image position
    i64[c] (column-major: column * H + row), in order.

    COCO's RLE counts alternating runs of 0 and 1 down the columns, from a
    run of 0. A column outside a box is zeros and one through it is zeros,
    the crop's column, zeros, so every boundary lies in a crop: all are
    found at once from `pasted.pixels` (crops column by column, a False
    between columns and crops).
    """
    height = pasted.height
    top, bottom, left, _ = pasted.spans.T
    starts, pixels = pasted.starts, pasted.pixels
    change = _changes(pixels)
    det = np.searchsorted(starts, change, side="right") - 1
    col, row = np.divmod(change - starts[det], bottom[det] - top[det] + 1)
    where = (left[det] + col) * height + top[det] + row
    # A crop as tall as the image: a run that ends at the bottom edge and
    # goes on at the top of the next column has no boundary there.
    joined = np.zeros(len(where) + 1, bool)  # [k]: boundaries k - 1, k
    joined[1:-1] = (where[1:] == where[:-1]) & (det[1:] == det[:-1])
    keep = ~(joined[:-1] | joined[1:])
    keep &= where < height * pasted.width  # a run that ends the image
    return det[keep], where[keep]


def counts(pasted: masks.BoxMasks) -> list[np.ndarray]:
    """COCO's uncompressed RLE counts i64[runs] of each pasted mask."""
    size = pasted.height * pasted.width
    det, where = _boundaries(pasted)
    groups = np.searchsorted(det, np.arange(len(pasted) + 1))
    # Each detection's boundaries, then the image's end.
    ends = np.insert(where, groups[1:], size)
    groups += np.arange(len(groups))
    previous = np.empty_like(ends)
    previous[1:] = ends[:-1]
    previous[groups[:-1]] = 0
    runs = ends - previous
    groups = groups.tolist()
    return [runs[a:b] for a, b in zip(groups[:-1], groups[1:], strict=True)]


def encode(pasted: masks.BoxMasks) -> list[dict]:
    """COCO RLE {"size": [H, W], "counts"} of each pasted mask."""
    if not len(pasted):
        return []
    size = [pasted.height, pasted.width]
    runs = counts(pasted)
    if _coco_mask is None:
        return [{"size": list(size), "counts": c.tolist()} for c in runs]
    rles = _coco_mask.frPyObjects(
        [{"size": size, "counts": c} for c in runs], *size
    )
    for rle in rles:
        rle["counts"] = rle["counts"].decode("ascii")
    return rles
