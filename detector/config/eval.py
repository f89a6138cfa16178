"""config.eval: batch size, subset, visualisation, pasting, COCOeval.

eval.mask_paste and eval.coco_backend are checked beside their registries
(detector/launch/validate.py)."""

import ml_collections

from detector.config import ranges

# Every numeric field's range (detector/config/ranges.py).
RANGES: ranges.Table = {
    "eval.batch_size": ranges.between(1, 4096, "images per predict call"),
    "eval.max_images": ranges.at_least(
        0, "images evaluated, 0: the whole split"
    ),
    "eval.num_visualized": ranges.between(
        0, 64, "batches drawn, held in memory until written"
    ),
}


def defaults() -> ml_collections.ConfigDict:
    """config.eval: batch size, subset and visualisation."""
    evaluation = ml_collections.ConfigDict()
    evaluation.batch_size = 8
    evaluation.max_images = 0  # 0: the whole split
    evaluation.num_visualized = 4
    # How masks are pasted into the original image: 'centres' (bilinear at
    # pixel centres inside the box, probability >= 0.5) or 'torchvision'
    # (its paste_masks_in_image: one-cell border, integer box, > 0.5).
    evaluation.mask_paste = "centres"
    # Which COCOeval computes the metrics (evaluation/coco_backends.py):
    # 'faster_coco_eval' (C++, the same 12 numbers) or 'pycocotools';
    # pycocotools where the first is not installed.
    evaluation.coco_backend = "faster_coco_eval"
    return evaluation


def validate(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError (one line naming the key) on a bad eval section."""
    ranges.check(config, "eval", RANGES, defaults())
