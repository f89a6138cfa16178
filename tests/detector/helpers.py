"""Helpers of the model tests: a tiny config and synthetic batches.

The tiny config (64 x 64 images, 'tiny' backbone, 8-16 channels, few rois)
keeps every compiled program small enough for a 2-core CPU.
"""

import jax
import ml_collections
import numpy as np
from flax import nnx

from detector import config as config_lib
from detector.launch import cli

IMAGE = 64
MAX_INSTANCES = 4
GT_MASK = 16


def tiny_config(backend: str = "while_loop") -> ml_collections.ConfigDict:
    """A CPU-sized config: 64x64 inputs, 3 classes, levels 2-4."""
    config = config_lib.base_config()
    config.data.image_size = (IMAGE, IMAGE)
    config.data.num_classes = 3
    config.data.max_instances = MAX_INSTANCES
    config.data.gt_mask_size = GT_MASK
    model = config.model
    model.backbone = "tiny"
    model.backbone_width = 8
    model.group_norm_groups = 4
    model.fpn_channels = 16
    model.min_level, model.max_level = 2, 4
    model.anchor_scale = 4.0
    rpn = model.rpn
    rpn.pre_nms_top_k_train, rpn.pre_nms_top_k_test = 128, 64
    rpn.post_nms_top_k_train, rpn.post_nms_top_k_test = 64, 32
    rpn.num_samples = 64
    roi = model.roi
    roi.num_rois = 32
    roi.box_head_dim = 64
    roi.mask_head_dim = 16
    roi.mask_head_convs = 1
    roi.max_mask_rois = 8
    model.detection.max_detections = 10
    model.detection.pre_nms_top_k = 64
    cli.set_nms_backend(config, backend)
    return config


def _mask_crop(mask: np.ndarray, box, size: int) -> np.ndarray:
    """mask[H, W] cropped to box (x1, y1, x2, y2) and resized (nearest)."""
    x1, y1, x2, y2 = box
    crop = mask[y1:y2, x1:x2]
    rows = ((np.arange(size) + 0.5) * crop.shape[0] / size).astype(int)
    cols = ((np.arange(size) + 0.5) * crop.shape[1] / size).astype(int)
    return crop[rows][:, cols].astype(np.uint8)


def synthetic_example() -> dict[str, np.ndarray]:
    """One 64x64 image: a rectangle (class 1), ellipse (2), triangle (3).

    Each object is painted in its class's colour on a black background;
    GT boxes are the masks' tight boxes. Arrays carry a batch dim of 1.
    """
    yy, xx = np.mgrid[0:IMAGE, 0:IMAGE] + 0.5
    objects = [
        ((xx >= 6) & (xx < 26) & (yy >= 8) & (yy < 30), 1),
        (((xx - 46) / 12) ** 2 + ((yy - 16) / 10) ** 2 <= 1.0, 2),
        ((yy >= 36) & (yy < 60) & (np.abs(xx - 38) <= (yy - 36) * 14 / 24), 3),
    ]
    colours = {1: (1.5, -1.0, -1.0), 2: (-1.0, 1.5, -1.0), 3: (-1.0, -1.0, 1.5)}
    example = empty_example()
    for i, (mask, cls) in enumerate(objects):
        example["image"][0][mask] = colours[cls]
        ys, xs = np.nonzero(mask)
        box = (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
        example["boxes"][0, i] = box
        example["classes"][0, i] = cls
        example["valid"][0, i] = True
        example["mask_valid"][0, i] = True
        example["masks"][0, i] = _mask_crop(mask, box, GT_MASK)
    return example


def empty_example(batch: int = 1) -> dict[str, np.ndarray]:
    """A batch of black images with no instances (all padding)."""
    return {
        "image": np.zeros((batch, IMAGE, IMAGE, 3), np.float32),
        "boxes": np.zeros((batch, MAX_INSTANCES, 4), np.float32),
        "classes": np.zeros((batch, MAX_INSTANCES), np.int32),
        "valid": np.zeros((batch, MAX_INSTANCES), bool),
        "masks": np.zeros((batch, MAX_INSTANCES, GT_MASK, GT_MASK), np.uint8),
        "mask_valid": np.zeros((batch, MAX_INSTANCES), bool),
    }


def fast_init_rngs(seed: int = 0) -> nnx.Rngs:
    """Init keys of the RBG generator: its per-shape init programs compile
    several times faster on CPU than threefry's."""
    return nnx.Rngs(jax.random.key(seed, impl="rbg"))
