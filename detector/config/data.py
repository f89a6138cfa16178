"""config.data: the source, splits, input size and augmentation.

data.source, data.resize and data.shapes.image_size's lower end are checked
beside their registries (detector/launch/validate.py)."""

import math

import ml_collections

from detector.config import checks, ranges
from detector.config.checks import check, check_image_size
from detector.utils import image_ranges

# An image scale: detectron2's and TF Model Garden's LSJ draw from [0.1, 2].
_SCALE = ranges.between(0, 4, "of data.image_size", low_open=True)
# The most bytes one tensor of the input may take (largest_tensors): the LSJ
# recipe's largest, its batch of 64 at 1024 x 1024, is 0.75 GiB; a scale or
# count that would ask for more is refused before the pipeline starts.
MAX_TENSOR_BYTES = 16 * 2**30

# The layout of a training batch's GT masks that each model.loss.mask_target
# rule reads (modeling/mask_targets.RULES; data/gt_masks.LAYOUTS makes them):
# 'crop', each mask resampled over its box, u8[M, S, S] (S
# data.gt_mask_size); 'canvas', each mask at its image's resized size on the
# canvas, eight pixels a byte along x (numpy's packbits order), u8[M, H,
# ceil(W / 8)].
MASK_LAYOUTS = {"crop": "crop", "torchvision": "canvas"}

# Every numeric field's range (detector/config/ranges.py).
RANGES: ranges.Table = {
    # 0: the training annotation file's count, taken where the run starts
    # (detector/launch/data_check.py).
    "data.num_classes": ranges.between(
        0,
        image_ranges.NUM_CLASSES.high,
        "object categories; 0: as many as the annotation file lists",
    ),
    "data.image_size": image_ranges.IMAGE_SIZE,
    "data.train_image_size": ranges.each(
        ranges.between(0, image_ranges.MAX_SIDE, "pixels"),
        length=2,
        shape="(height, width); (0, 0): data.image_size",
    ),
    "data.min_size": image_ranges.MIN_SIZE,
    "data.max_size": image_ranges.MAX_SIZE,
    "data.max_instances": ranges.between(1, 1000, "instances per image"),
    "data.gt_mask_size": ranges.between(1, 512, "GT mask side in pixels"),
    "data.scale_jitter": ranges.each(
        _SCALE, length=2, ordered=True, shape="(low, high)"
    ),
    "data.pixel_mean": image_ranges.PIXEL_MEAN,
    "data.pixel_std": image_ranges.PIXEL_STD,
    "data.shuffle_buffer": ranges.between(1, 100_000, "examples shuffled"),
    "data.prefetch": ranges.between(1, 64, "batches prepared ahead"),
    "data.lsj_min": _SCALE,
    "data.lsj_max": _SCALE,
    "data.lsj_min_box_size": ranges.at_least(0, "pixels"),
    "data.shapes.num_train": ranges.between(1, 10**7, "images written"),
    "data.shapes.num_val": ranges.between(1, 10**7, "images written"),
    # Its lower end is the writer's: data/shapes_writer.py MIN_IMAGE_SIZE.
    "data.shapes.image_size": ranges.between(
        1, image_ranges.MAX_SIDE, "side of the square images"
    ),
    "data.shapes.seed": ranges.between(0, 2**32 - 1),
}


def defaults() -> ml_collections.ConfigDict:
    """config.data: the source, splits, input size and augmentation.

    data.source, data.resize and data.shapes.image_size's lower end are checked
    beside their registries (detector/launch/validate.py)."""
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
    # Fixed model input (height, width), the canvas of training and eval:
    # each image is resized by data.resize and padded. Must be divisible by
    # 2**model.max_level.
    data.image_size = (1024, 1024)
    # The training canvas when it differs from the eval one (torchvision's
    # v2 recipe: LSJ crops at 800, evaluation at 800-1333); (0, 0): the
    # canvases of data.image_size. Not with data.group_orientations.
    data.train_image_size = (0, 0)
    # Orientation canvases (shortest_edge only): data.image_size, height <=
    # width, is the landscape canvas and its transpose the portrait one;
    # each training step, eval batch and predict batch holds one
    # orientation (detector/imaging/canvases.py, orientation_schedule.py).
    data.group_orientations = False
    # The resize rule (detector/imaging/resize.py):
    # 'letterbox' fits the long side to data.image_size (scale_jitter and
    # a random crop in training); 'shortest_edge' is torchvision's and
    # detectron2's: short side min_size (one drawn per training image, the
    # last at eval), long side at most max_size, the size floored.
    data.resize = "letterbox"
    data.min_size = (800,)
    data.max_size = 1333
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
    # coco_json: read images whose file_name leads outside the split's image
    # folder ('../x.jpg', an absolute path); refused by default.
    data.allow_outside_images = False
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
    ranges.check(config, "data", RANGES, defaults())
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
    check_image_size(config.data.image_size)
    if training_size(data):
        check_image_size(data.train_image_size, "data.train_image_size")
        check(
            not data.group_orientations,
            "data.train_image_size",
            tuple(data.train_image_size),
            "set with data.group_orientations: the orientation canvases "
            "are both training's and evaluation's; set (0, 0)",
        )
    if data.group_orientations:
        _check_grouping(data)


def _check_grouping(data: ml_collections.ConfigDict) -> None:
    """Orientation canvases hold shortest-edge images, landscape first."""
    check(
        data.resize == "shortest_edge",
        "data.group_orientations",
        True,
        f"needs data.resize='shortest_edge' (is {data.resize!r}): "
        "letterbox keeps one canvas",
    )
    check(
        data.augment == "jitter",
        "data.group_orientations",
        True,
        f"needs data.augment='jitter' (is {data.augment!r}): LSJ keeps "
        "its square crop",
    )
    height, width = data.image_size
    check(
        height <= width,
        "data.image_size",
        tuple(data.image_size),
        "with data.group_orientations it is the landscape canvas: "
        "height <= width",
    )


def training_size(data: ml_collections.ConfigDict) -> tuple[int, int] | None:
    """data.train_image_size where set, else None ((0, 0): the canvases of
    data.image_size; imaging/canvases.training places the batches)."""
    size = tuple(data.train_image_size)
    return size if any(size) else None


def mask_layout(config: ml_collections.ConfigDict) -> str:
    """The GT mask layout config.model.loss.mask_target reads (an unknown
    rule, refused beside its registry by launch/validate.py, reads 'crop')."""
    return MASK_LAYOUTS.get(config.model.loss.mask_target, "crop")


def gt_masks_shape(
    layout: str,
    data: ml_collections.ConfigDict,
    canvas: tuple[int, int] | None = None,
) -> tuple[int, int, int]:
    """One image's GT masks in `layout` (MASK_LAYOUTS) on `canvas` (default
    data.image_size)."""
    height, width = canvas or data.image_size
    if layout == "canvas":
        return (data.max_instances, height, -(-width // 8))
    return (data.max_instances, data.gt_mask_size, data.gt_mask_size)


def largest_tensors(config: ml_collections.ConfigDict) -> dict[str, tuple]:
    """The largest tensors the input makes, by the field that sizes them:
    field -> (bytes, 'what f32[shape]').

    The scaled image before its crop (the training scale's high end: of
    data.lsj_max with LSJ, else of data.scale_jitter), the training and
    eval input batches (f32 on the canvas) and the training batch's GT
    masks (u8, gt_masks_shape per image).
    """
    data = config.data
    # The training canvas (a portrait one has the landscape one's area).
    height, width = training_size(data) or data.image_size
    eval_height, eval_width = data.image_size
    lsj = data.augment == "lsj"
    scale = data.lsj_max if lsj else data.scale_jitter[1]
    scaled = (math.ceil(height * scale), math.ceil(width * scale), 3)
    shapes = {
        "data.lsj_max" if lsj else "data.scale_jitter": (
            4,
            "the scaled image before its crop f32",
            scaled,
        ),
        "train.batch_size": (
            4,
            "the training batch f32",
            (config.train.batch_size, height, width, 3),
        ),
        "eval.batch_size": (
            4,
            "the eval batch f32",
            (config.eval.batch_size, eval_height, eval_width, 3),
        ),
        "data.max_instances": (
            1,
            "the training batch's GT masks u8",
            (
                config.train.batch_size,
                *gt_masks_shape(mask_layout(config), data, (height, width)),
            ),
        ),
    }
    return {
        key: (item * math.prod(shape), f"{what}{list(shape)}")
        for key, (item, what, shape) in shapes.items()
    }


def check_memory(config: ml_collections.ConfigDict) -> None:
    """Refuses a config whose input would make a tensor over
    MAX_TENSOR_BYTES, in one line naming the field that sizes it."""
    for key, (size, what) in largest_tensors(config).items():
        check(
            size <= MAX_TENSOR_BYTES,
            key,
            checks.get(config, key),
            f"{what} would take {size / 2**30:.1f} GiB, over the "
            f"{MAX_TENSOR_BYTES / 2**30:g} GiB one tensor may take "
            "(detector/config/data.py MAX_TENSOR_BYTES)",
        )
