"""Host-side post-processing: paste masks, undo the resize, COCO results.

Runs on numpy arrays fetched from the device after predict. The data
pipeline resizes each h x w image to max(round([h, w] * scale), 1) pixels per
axis and pads it right and down, so original pixels are input pixels divided
by the per-axis factor resized / [h, w] (see `resize_factors`).

Shapes: D detections, T mask size (28), H, W image size in pixels,
B batch.
"""

import numpy as np
from pycocotools import mask as mask_utils


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


def resized_size(orig_size: np.ndarray, scale: float) -> np.ndarray:
    """(height, width) of one eval image once resized, before the padding.

    Recomputed as the data pipeline does, in float32 with rounding half to
    even (TensorFlow's and numpy's `round`): max(round([h, w] * scale), 1).

    Args:
      orig_size: (height, width) of the original image.
      scale: the batch's `scale` of the image (float32 in the batch).

    Returns:
      f32[2]: resized (height, width) in input pixels.
    """
    hw = np.asarray(orig_size, np.float32)
    return np.maximum(np.round(hw * np.float32(scale)), np.float32(1.0))


def resize_factors(orig_size: np.ndarray, scale: float) -> np.ndarray:
    """Per-axis (y, x) factors input / original pixels of one eval image.

    Boxes map back with the factor the image was resized by
    (`resized_size`), not the unrounded scale.

    Returns:
      f64[2]: resized (height, width) / original (height, width).
    """
    resized = resized_size(orig_size, scale).astype(np.float64)
    return resized / np.asarray(orig_size, np.float64)


def _encode_rle(mask: np.ndarray) -> dict:
    rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    rle["counts"] = rle["counts"].decode("ascii")
    return rle


def _image_results(
    predictions: dict,
    i: int,
    image_id: int,
    orig_size: np.ndarray,
    scale: float,
    category_ids: list[int],
    with_masks: bool,
) -> list[dict]:
    """COCO results of row i of a batch of predictions."""
    height, width = (int(v) for v in orig_size)
    count = int(predictions["num_detections"][i])
    classes = np.asarray(predictions["classes"][i][:count])
    keep = np.nonzero(classes > 0)[0]
    factor_y, factor_x = resize_factors(orig_size, scale)
    boxes = np.asarray(predictions["boxes"][i][keep], np.float64) / [
        factor_x,
        factor_y,
        factor_x,
        factor_y,
    ]
    clipped = np.stack(
        [
            np.clip(boxes[:, 0], 0, width),
            np.clip(boxes[:, 1], 0, height),
            np.clip(boxes[:, 2], 0, width),
            np.clip(boxes[:, 3], 0, height),
        ],
        axis=-1,
    )
    # Boxes predicted in the padding clip to nothing: never a detection.
    nonempty = np.nonzero(
        (clipped[:, 2] > clipped[:, 0]) & (clipped[:, 3] > clipped[:, 1])
    )[0]
    keep, boxes, clipped = keep[nonempty], boxes[nonempty], clipped[nonempty]
    if with_masks:
        masks = paste_masks(predictions["masks"][i][keep], boxes, height, width)
    results = []
    for j, d in enumerate(keep):
        x1, y1, x2, y2 = (float(v) for v in clipped[j])
        result = {
            "image_id": image_id,
            "category_id": int(category_ids[int(classes[d]) - 1]),
            "bbox": [x1, y1, x2 - x1, y2 - y1],
            "score": float(predictions["scores"][i][d]),
        }
        if with_masks:
            result["segmentation"] = _encode_rle(masks[j])
        results.append(result)
    return results


def coco_results(
    predictions: dict, batch: dict, category_ids: list[int], with_masks: bool
) -> list[dict]:
    """COCO result dicts of one predicted batch (numpy arrays).

    Args:
      predictions: boxes [B, D, 4] (input pixels), scores [B, D], classes
        [B, D] (1..C, 0 empty), masks [B, D, T, T], num_detections [B].
      batch: the eval batch: image_id [B], orig_size [B, 2] (height, width
        of the original image), scale [B] (the resize scale; boxes map back
        with `resize_factors`), image_valid [B] (False: a padding row,
        skipped).
      category_ids: COCO category id of each class 1..C (index class - 1).
      with_masks: add 'segmentation' (RLE, counts as str).

    Returns:
      [{image_id, category_id, bbox [x, y, w, h] in original pixels
      (clipped to the image), score, segmentation?}, ...]. A detection
      with nothing inside the image once clipped (zero width or height,
      e.g. predicted in the padding) is left out.
    """
    results = []
    for i in range(len(batch["image_id"])):
        if not bool(batch["image_valid"][i]):
            continue
        results += _image_results(
            predictions,
            i,
            int(batch["image_id"][i]),
            batch["orig_size"][i],
            float(batch["scale"][i]),
            category_ids,
            with_masks,
        )
    return results
