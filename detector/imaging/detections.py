"""The detections contract and its one host formatter.

The inference function (`detector.inference.detect`: the exported
artifact's, predict.py's in-process one, evaluation's) returns, for a batch
of b images and K detection slots, numpy or jax arrays named `OUTPUTS`:

- boxes f32[b, K, 4]: (x1, y1, x2, y2) in the original image's pixels
  (x2, y2 exclusive), clipped to it, never empty;
- scores f32[b, K];
- category_ids i32[b, K]: the dataset's category id of each detection;
- masks f32[b, K, T, T]: each detection's mask probabilities over its box
  (T: model.roi.mask_size);
- num_valid i32[b]: the first num_valid[i] slots of row i are detections,
  in descending score order; the slots after them are zeros.

`image_results` turns row i into COCO result dicts (masks pasted by a rule
of `masks.MASK_PASTERS`, RLE): predict.py's predictions.json and eval.py's
detections file hold these dicts. Shapes as above; numpy only.
"""

import numpy as np

from detector.imaging import masks, rle

OUTPUTS = ("boxes", "scores", "category_ids", "masks", "num_valid")


def image_results(
    outputs: dict[str, np.ndarray],
    i: int,
    height: int,
    width: int,
    mask_paste: str | None = "centres",
) -> tuple[list[dict], masks.BoxMasks | None]:
    """(COCO results, pasted masks) of row i of a batch of `OUTPUTS`, on
    its h x w original image.

    Each result is {bbox [x, y, w, h], score, category_id, segmentation}
    (RLE, counts as str), in slot order; `mask_paste` names the rule of
    `masks.MASK_PASTERS` (None: no masks pasted, no segmentation).
    """
    count = int(outputs["num_valid"][i])
    boxes = np.asarray(outputs["boxes"][i][:count], np.float64)
    pasted = segmentations = None
    if mask_paste is not None:
        pasted = masks.MASK_PASTERS[mask_paste](
            outputs["masks"][i][:count], boxes, height, width
        )
        segmentations = rle.encode(pasted)
    results = []
    for d in range(count):
        x1, y1, x2, y2 = (float(v) for v in boxes[d])
        result = {
            "bbox": [x1, y1, x2 - x1, y2 - y1],
            "score": float(outputs["scores"][i][d]),
            "category_id": int(outputs["category_ids"][i][d]),
        }
        if segmentations is not None:
            result["segmentation"] = segmentations[d]
        results.append(result)
    return results, pasted
