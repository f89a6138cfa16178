"""config.data: the source, splits, input size and augmentation."""

import ml_collections

from detector.config.checks import check, check_image_size, check_minimums

_MINIMUMS = (("data.max_instances", 1, "instances per image"),)


def defaults() -> ml_collections.ConfigDict:
    """config.data: the source, splits, input size and augmentation."""
    data = ml_collections.ConfigDict()
    # 'shapes' (synthetic COCO-format folder, generated on demand),
    # 'coco_json' (a COCO-format folder), or 'tfds' (tfds coco/2017).
    data.source = "coco_json"
    # coco_json / shapes: a folder holding annotations/instances_<split>.json
    # and one image folder per split, <split>/ (COCO 2017: train2017, val2017).
    data.root = ""
    # tfds: builder name and data_dir ("": the TFDS default).
    data.tfds_name = "coco/2017"
    data.tfds_data_dir = ""
    # Split strings; slicing picks a subset: 'val2017[:500]', 'train[:10%]'.
    data.train_split = "train2017"
    data.eval_split = "val2017"
    data.num_classes = 80
    # Fixed model input (height, width): the long side is resized to fit and
    # the rest padded. Must be divisible by 2**model.max_level.
    data.image_size = (1024, 1024)
    data.max_instances = 100
    # GT masks are cropped to their box and resized to this square size.
    data.gt_mask_size = 112
    data.hflip = True
    data.scale_jitter = (0.8, 1.25)  # (1.0, 1.0) turns jitter off
    # Training augmentation (data/augment.py AUGMENTS): 'jitter' (flip,
    # data.scale_jitter, crop) or 'lsj' (large-scale jitter: flip, scale in
    # [lsj_min, lsj_max] of image_size, crop or pad, boxes recomputed from
    # the cropped masks, boxes under lsj_min_box_size pixels dropped).
    data.augment = "jitter"
    data.lsj_min = 0.1
    data.lsj_max = 2.0
    data.lsj_min_box_size = 1.0
    data.pixel_mean = (123.675, 116.28, 103.53)
    data.pixel_std = (58.395, 57.12, 57.375)
    data.shuffle_buffer = 1000
    data.prefetch = 2
    # Cache decoded examples in memory (small datasets only).
    data.cache = False
    # shapes: the synthetic dataset written under data.root when missing.
    shapes = data.shapes = ml_collections.ConfigDict()
    shapes.num_train = 2000
    shapes.num_val = 200
    shapes.image_size = 128
    shapes.seed = 0
    return data


AUGMENTS = ("jitter", "lsj")  # the keys of data/augment.py AUGMENTS


def validate(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError (one line naming the key) on a bad data section."""
    check_minimums(config, _MINIMUMS)
    data = config.data
    check(
        data.augment in AUGMENTS,
        "data.augment",
        data.augment,
        f"unknown augmentation; known: {', '.join(AUGMENTS)}",
    )
    check(
        0.0 < data.lsj_min <= data.lsj_max,
        "data.lsj_min",
        data.lsj_min,
        f"must be in (0, data.lsj_max={data.lsj_max}]",
    )
    check(
        data.lsj_min_box_size >= 0.0,
        "data.lsj_min_box_size",
        data.lsj_min_box_size,
        "must be >= 0",
    )
    check_image_size(config.data.image_size)
    check(
        config.data.num_classes >= 1,
        "data.num_classes",
        config.data.num_classes,
        "must be >= 1",
    )
