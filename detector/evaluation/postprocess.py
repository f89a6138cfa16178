"""Host side of predict: boxes mapped back to original pixels (per-axis
`resize_factors`), masks pasted, COCO results.
Shapes: D detections, T mask size (28), H, W image size, B batch.
"""

import numpy as np

from detector.imaging import masks as masks_lib
from detector.imaging import rle


def resize_factors(orig_size: np.ndarray, image_size: np.ndarray) -> np.ndarray:
    """Per-axis (y, x) factors input / original pixels of one eval image.

    Boxes map back with the factor the image was resized by (its resized
    size `image_size` over `orig_size`), not the unrounded scale.

    Returns:
      f64[2]: resized (height, width) / original (height, width).
    """
    return np.asarray(image_size, np.float64) / np.asarray(
        orig_size, np.float64
    )


def _image_results(
    predictions: dict,
    i: int,
    image_id: int,
    orig_size: np.ndarray,
    image_size: np.ndarray,
    category_ids: list[int],
    with_masks: bool,
    mask_paste: str,
) -> list[dict]:
    """COCO results of row i of a batch of predictions."""
    height, width = (int(v) for v in orig_size)
    count = int(predictions["num_detections"][i])
    classes = np.asarray(predictions["classes"][i][:count])
    keep = np.nonzero(classes > 0)[0]
    factor_y, factor_x = resize_factors(orig_size, image_size)
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
        segmentations = rle.encode(
            masks_lib.MASK_PASTERS[mask_paste](
                predictions["masks"][i][keep], boxes, height, width
            )
        )
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
            result["segmentation"] = segmentations[j]
        results.append(result)
    return results


def coco_results(
    predictions: dict,
    batch: dict,
    category_ids: list[int],
    with_masks: bool,
    mask_paste: str = "centres",
) -> list[dict]:
    """COCO result dicts of one predicted batch (numpy arrays).

    Args:
      predictions: boxes [B, D, 4] (input pixels), scores [B, D], classes
        [B, D] (1..C, 0 empty), masks [B, D, T, T], num_detections [B].
      batch: the eval batch: image_id [B], orig_size [B, 2] (height, width
        of the original image), image_size [B, 2] (its resized height and
        width; boxes map back with `resize_factors`), image_valid [B]
        (False: a padding row, skipped).
      category_ids: COCO category id of each class 1..C (index class - 1).
      with_masks: add 'segmentation' (RLE, counts as str).
      mask_paste: a key of masks_lib.MASK_PASTERS (config eval.mask_paste).

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
            batch["image_size"][i],
            category_ids,
            with_masks,
            mask_paste,
        )
    return results
