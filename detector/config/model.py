"""config.model: backbone, FPN, anchors, heads, losses and dtype; ranges
and combinations (registry names are checked beside the registries)."""

import jax
import jax.numpy as jnp
import ml_collections

from detector.config import data as data_section
from detector.config import ranges
from detector.config.checks import check, check_image_size, get

DTYPES = ("auto", "float32", "bfloat16")
# 'auto' per jax.default_backend(); other platforms get float32.
_AUTO_DTYPES = {"cpu": "float32", "gpu": "bfloat16", "tpu": "bfloat16"}
# The backbone norms that an 'auto' FPN output or mask head norm repeats
# (the 2017 layouts); any other backbone norm gives those layers none.
_AUTO_HEAD_NORMS = ("group", "batch")

_IOU = ranges.between(0, 1, "an IoU")
_COUNT = ranges.between(1, 16384, "channels")
# Boxes kept per image, and candidates before an NMS (torchvision: 4000).
_PER_IMAGE = ranges.between(1, 10_000, "per image")
_CANDIDATES = ranges.between(1, 100_000, "candidates")
_WEIGHTS = ranges.each(ranges.above(0), length=4, shape="(x, y, w, h)")
# Every numeric field's range (detector/config/ranges.py); checks that
# combine fields follow in validate().
RANGES: ranges.Table = {
    "model.backbone_width": ranges.between(1, 1024, "channels of the stem"),
    "model.frozen_bn_epsilon": ranges.at_least(0),
    # Its upper end is the backbone's: modeling/backbone.py MAX_FREEZE_AT.
    "model.freeze_at": ranges.at_least(
        0, "0: nothing frozen, 1: the stem, 2: the stem and stage 1, ..."
    ),
    "model.group_norm_groups": ranges.at_least(1, "GroupNorm groups"),
    "model.fpn_channels": ranges.between(1, 4096, "FPN channels"),
    "model.min_level": ranges.between(1, 10, "coarsest stride 2**level"),
    "model.max_level": ranges.between(1, 10, "coarsest stride 2**level"),
    "model.anchor_scale": ranges.above(0, "anchor side / stride"),
    "model.aspect_ratios": ranges.each(
        ranges.above(0, "each an anchor per location, RPN outputs with it"),
        min_length=1,
        max_length=16,
        shape="anchor height / width",
    ),
    "model.anchor_offset": ranges.between(
        0, 1, "0.5: cell centres, 0: torchvision's", high_open=True
    ),
    "model.rpn.pre_nms_top_k_train": _CANDIDATES,
    "model.rpn.pre_nms_top_k_test": _CANDIDATES,
    "model.rpn.post_nms_top_k_train": _PER_IMAGE,
    "model.rpn.post_nms_top_k_test": _PER_IMAGE,
    "model.rpn.nms_iou": _IOU,
    "model.rpn.min_box_size": ranges.at_least(0),
    "model.rpn.fg_iou": _IOU,
    "model.rpn.bg_iou": _IOU,
    "model.rpn.num_samples": ranges.between(
        1, 100_000, "anchors sampled per image"
    ),
    "model.rpn.positive_fraction": ranges.between(0, 1, low_open=True),
    "model.rpn.box_weights": _WEIGHTS,
    "model.rpn.approx_top_k_recall": ranges.between(
        0, 1, "0: exact top-k, else a recall target", high_open=True
    ),
    "model.roi.num_rois": ranges.between(1, 10_000, "rois sampled per image"),
    "model.roi.fg_fraction": ranges.between(0, 1, low_open=True),
    "model.roi.fg_iou": _IOU,
    "model.roi.bg_iou_high": _IOU,
    "model.roi.bg_iou_low": _IOU,
    "model.roi.box_weights": _WEIGHTS,
    "model.roi.pool_size": ranges.between(1, 64, "ROIAlign output side"),
    "model.roi.canonical_size": ranges.above(0, "roi side of the level"),
    "model.roi.canonical_level": ranges.at_least(1),
    "model.roi.sampling_ratio": ranges.between(
        1, 16, "samples per bin side (torchvision, detectron2: 2)"
    ),
    "model.roi.level_eps": ranges.at_least(0),
    "model.roi.box_head_dim": _COUNT,
    "model.roi.mask_pool_size": ranges.between(1, 64, "mask ROIAlign side"),
    "model.roi.mask_head_dim": _COUNT,
    "model.roi.mask_head_convs": ranges.between(0, 16, "convolutions"),
    "model.roi.box_head_conv_dim": _COUNT,
    "model.rpn.head_convs": ranges.between(1, 16, "3x3 convolutions"),
    "model.roi.max_mask_rois": _PER_IMAGE,
    "model.roi.mask_size": ranges.between(2, 256, "predicted mask side"),
    "model.detection.score_threshold": ranges.between(0, 1, "a score"),
    "model.detection.nms_iou": _IOU,
    "model.detection.min_box_size": ranges.at_least(0),
    "model.detection.max_detections": _PER_IMAGE,
    "model.detection.pre_nms_top_k": _CANDIDATES,
    "model.loss.rpn_box_beta": ranges.at_least(0, "Huber delta, 0: L1"),
    "model.loss.box_beta": ranges.at_least(0, "Huber delta, 0: L1"),
    "model.loss.rpn_cls_weight": ranges.at_least(0),
    "model.loss.rpn_box_weight": ranges.at_least(0),
    "model.loss.cls_weight": ranges.at_least(0),
    "model.loss.box_weight": ranges.at_least(0),
    "model.loss.mask_weight": ranges.at_least(0),
}


def defaults() -> ml_collections.ConfigDict:
    """config.model: backbone, FPN and anchors; one sub-dict per head."""
    model = ml_collections.ConfigDict()
    # 'resnet18' | 'resnet50' | 'resnet101' | 'tiny' (a CPU-sized ResNet,
    # one basic block per stage); see backbone.BACKBONES.
    model.backbone = "resnet50"
    # Channels of the stem; the four stages use 1x, 2x, 4x, 8x this (x4 more
    # at the output of bottleneck stages).
    model.backbone_width = 64
    # The backbone's norm: 'group' | 'batch' (trained, statistics per
    # device) | 'sync_batch' (trained, statistics over the global batch) |
    # 'frozen_batch' (pretrained statistics and affine terms, fixed).
    model.norm = "group"
    # Epsilon of the frozen BatchNorm layers (torchvision's FrozenBatchNorm2d
    # default; its legacy COCO Mask R-CNN v1 weights need 0).
    model.frozen_bn_epsilon = 1e-5
    # Pretrained backbone weights read before step 1 of a fresh run: a
    # .safetensors or .npz file with torchvision ResNet names (timm's
    # ResNets use the same), or a .pth when torch is installed. '': random.
    model.backbone_init = ""
    # A FOLDER: start from another run's orbax checkpoint (its workdir,
    # checkpoints/ folder or one step folder): every array whose path and
    # shape match is copied; class-dependent heads are reinitialised when
    # num_classes differs. A FILE: a torchvision maskrcnn_resnet50_fpn (v1)
    # state dict (.safetensors, or .pth with torch), mapped onto the whole
    # model; its 91-way COCO heads map onto num_classes 80 or 90, other
    # counts reinitialise the class heads. The step and optimizer state
    # start fresh either way. '': none.
    model.init_checkpoint = ""
    # Frozen (never updated) backbone parts, as detectron2's FREEZE_AT:
    # 0 none, 1 the stem, 2 the stem and stage 1 (C2), ... 5 all.
    model.freeze_at = 0
    model.group_norm_groups = 32
    model.fpn_channels = 256
    # Norm of the FPN's lateral and output convs: 'none' | 'batch' |
    # 'sync_batch' | 'group' (norms.HEAD_NORMS), or 'auto': the 2017
    # layout, model.norm 'group' or 'batch' in the output convs only.
    model.fpn_norm = "auto"
    model.min_level = 2
    model.max_level = 6
    model.anchor_scale = 8.0  # anchor side at level l: anchor_scale * 2**l
    model.aspect_ratios = (0.5, 1.0, 2.0)
    # Anchor centres at (i + anchor_offset) * stride: 0.5 the cell centre,
    # 0.0 torchvision's and Detectron's (the cell's first pixel).
    model.anchor_offset = 0.5
    # Round anchor half-extents to whole pixels (torchvision rounds them).
    model.anchor_round = False
    # Activation dtype: 'auto' (float32 on CPU, bfloat16 on GPU/TPU),
    # 'float32' or 'bfloat16'. Params and losses stay float32.
    model.dtype = "auto"
    model.rpn = _rpn_config()
    model.roi = _roi_config()
    model.detection = _detection_config()
    model.loss = _loss_config()
    return model


def _rpn_config() -> ml_collections.ConfigDict:
    """config.model.rpn: proposals (top-k, NMS) and RPN anchor sampling."""
    rpn = ml_collections.ConfigDict()
    rpn.pre_nms_top_k_train = 2000  # per level
    rpn.pre_nms_top_k_test = 1000  # per level
    rpn.post_nms_top_k_train = 1000  # per image, after merging levels
    rpn.post_nms_top_k_test = 1000
    rpn.nms_iou = 0.7
    rpn.min_box_size = 0.0
    rpn.fg_iou = 0.7
    rpn.bg_iou = 0.3
    rpn.num_samples = 256
    rpn.positive_fraction = 0.5
    rpn.box_weights = (1.0, 1.0, 1.0, 1.0)
    rpn.nms_backend = "auto"
    # Shared 3x3 convs of the RPN head (torchvision v2 and detectron2's LSJ
    # baselines: 2) and their norm ('none' | 'batch' | 'sync_batch' |
    # 'group').
    rpn.head_convs = 1
    rpn.head_norm = "none"
    # Per-level pre-NMS top-k: 0 exact; in (0, 1) lax.approx_max_k with this
    # recall target (opt-in: the proposals may change).
    rpn.approx_top_k_recall = 0.0
    return rpn


def _roi_config() -> ml_collections.ConfigDict:
    """config.model.roi: ROI sampling, ROIAlign, box and mask heads."""
    roi = ml_collections.ConfigDict()
    roi.num_rois = 512
    roi.fg_fraction = 0.25
    roi.fg_iou = 0.5
    roi.bg_iou_high = 0.5
    roi.bg_iou_low = 0.0
    roi.box_weights = (10.0, 10.0, 5.0, 5.0)
    roi.pool_size = 7
    roi.canonical_size = 224.0
    roi.canonical_level = 4
    roi.sampling_ratio = 2
    # ROIAlign's half-pixel convention; False is the original Mask R-CNN's
    # (torchvision's v1 and Detectron's) as in ops/roi_align.py.
    roi.aligned = True
    # Added before the floor of the FPN level rule (torchvision: 1e-6).
    roi.level_eps = 0.0
    # ROIAlign pooling: 'auto' (per platform), 'gather' or 'matmul'; see
    # ops/roi_align.py.
    roi.align_implementation = "auto"
    # Box head (box_head.BOX_HEADS): '2fc' (two fc layers of box_head_dim)
    # or '4conv1fc' (4 3x3 convs of box_head_conv_dim with box_head_norm,
    # then one fc of box_head_dim).
    roi.box_head = "2fc"
    roi.box_head_dim = 1024
    roi.box_head_conv_dim = 256
    roi.box_head_norm = "none"  # 'none' | 'batch' | 'sync_batch' | 'group'
    roi.mask_pool_size = 14
    roi.mask_head_dim = 256
    roi.mask_head_convs = 4
    # Norm of the mask head convs: 'none' | 'batch' | 'sync_batch' | 'group',
    # or 'auto': model.norm 'group' or 'batch', else none (2017 layouts).
    roi.mask_head_norm = "auto"
    roi.max_mask_rois = 128  # mask loss uses at most this many fg rois/image
    roi.mask_size = 28  # 2 * mask_pool_size
    return roi


def _detection_config() -> ml_collections.ConfigDict:
    """config.model.detection: scoring and class-aware NMS of detections."""
    detection = ml_collections.ConfigDict()
    detection.score_threshold = 0.05
    detection.nms_iou = 0.5
    # Decoded, clipped boxes not wider and taller than this are dropped
    # before NMS (torchvision: 1e-2).
    detection.min_box_size = 0.0
    detection.max_detections = 100
    # Candidates (roi, class) pairs kept by score before class-aware NMS.
    detection.pre_nms_top_k = 1000
    detection.nms_backend = "auto"
    return detection


def _loss_config() -> ml_collections.ConfigDict:
    """config.model.loss: Huber deltas, the loss conventions
    (docs/training.md) and loss weights."""
    loss = ml_collections.ConfigDict()
    loss.rpn_box_beta = 1.0 / 9.0  # Huber delta of the RPN box loss
    loss.box_beta = 1.0
    # What the RPN losses are divided by (modeling/losses.RPN_NORMALISERS):
    # 'slots' B x rpn.num_samples (detectron2's), 'sampled' the anchors
    # sampled (torchvision's).
    loss.rpn_normaliser = "slots"
    # The rois' mask targets (modeling/mask_targets.RULES): 'crop' the GT
    # crop resampled at the roi, >= 0.5 (detectron2's), 'torchvision' the
    # soft roi_align of the GT mask at its image's size (torchvision's; the
    # batch then carries canvas-sized masks: data.MASK_LAYOUTS).
    loss.mask_target = "crop"
    loss.rpn_cls_weight = 1.0
    loss.rpn_box_weight = 1.0
    loss.cls_weight = 1.0
    loss.box_weight = 1.0
    loss.mask_weight = 1.0
    return loss


def resolve_dtype(name: str, platform: str | None = None) -> jnp.dtype:
    """The activation dtype that config `model.dtype` names.

    Args:
      name: 'float32', 'bfloat16', or 'auto' (float32 on CPU, bfloat16 on
        GPU and TPU).
      platform: the backend 'auto' resolves for; jax.default_backend() when
        None.

    Raises:
      ValueError: one line naming model.dtype, for an unknown name.
    """
    check(
        name in DTYPES,
        "model.dtype",
        name,
        f"unknown dtype; known: {', '.join(DTYPES)}",
    )
    if name == "auto":
        platform = platform or jax.default_backend()
        name = _AUTO_DTYPES.get(platform, "float32")
    return jnp.dtype(name)


def validate(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError (one line naming the key) on a bad model section."""
    ranges.check(config, "model", RANGES, defaults())
    model, data = config.model, config.data
    roi, rpn_cfg = model.roi, model.rpn
    resolve_dtype(model.dtype)
    check(
        not (model.backbone_init and model.init_checkpoint),
        "model.init_checkpoint",
        model.init_checkpoint,
        "set at most one of model.backbone_init and model.init_checkpoint",
    )
    check(
        model.max_level >= model.min_level,
        "model.max_level",
        model.max_level,
        "must be >= model.min_level",
    )
    stride = 2**model.max_level
    check_image_size(data.image_size)
    sizes = {"data.image_size": tuple(data.image_size)}
    train_size = data_section.training_size(data)
    if train_size:
        sizes["data.train_image_size"] = train_size
    for key, size in sizes.items():
        check(
            all(s % stride == 0 for s in size),
            key,
            size,
            f"(height, width) must be divisible by "
            f"the coarsest stride 2**model.max_level={stride}",
        )
    if model.norm == "group":
        groups = model.group_norm_groups
        for key, channels in (
            ("backbone_width", model.backbone_width),
            ("fpn_channels", model.fpn_channels),
            ("roi.mask_head_dim", roi.mask_head_dim),
        ):
            check(
                channels % groups == 0,
                f"model.{key}",
                channels,
                f"must be divisible by model.group_norm_groups={groups}",
            )
    check(
        roi.mask_size == 2 * roi.mask_pool_size,
        "model.roi.mask_size",
        roi.mask_size,
        "must be 2 * model.roi.mask_pool_size",
    )
    check(
        int(roi.num_rois * roi.fg_fraction) >= 1,
        "model.roi.fg_fraction",
        roi.fg_fraction,
        "must leave room for >= 1 foreground roi",
    )
    for key, low, high in (
        ("model.rpn.bg_iou", rpn_cfg.bg_iou, "model.rpn.fg_iou"),
        ("model.roi.bg_iou_low", roi.bg_iou_low, "model.roi.bg_iou_high"),
    ):
        check(
            low <= get(config, high),
            key,
            low,
            f"must be <= {high}={get(config, high)}",
        )
    _validate_heads(model)


def _auto_head_norm(norm: str) -> str:
    """The norm of the layers an 'auto' leaves to the backbone norm `norm`
    (FPN outputs, mask head): itself where it is 'group' or 'batch'."""
    return norm if norm in _AUTO_HEAD_NORMS else "none"


def fpn_norms(model: ml_collections.ConfigDict) -> tuple[str, str]:
    """(lateral, output) conv norms of the FPN (model.fpn_norm; 'auto':
    none in the laterals, model.norm 'group' or 'batch' in the outputs)."""
    if model.fpn_norm == "auto":
        return "none", _auto_head_norm(model.norm)
    return model.fpn_norm, model.fpn_norm


def mask_head_norm(model: ml_collections.ConfigDict) -> str:
    """The mask head's conv norm (model.roi.mask_head_norm; 'auto':
    model.norm 'group' or 'batch', else none)."""
    norm = model.roi.mask_head_norm
    return _auto_head_norm(model.norm) if norm == "auto" else norm


def _validate_heads(model: ml_collections.ConfigDict) -> None:
    """GroupNorm channel counts of the FPN and the heads."""
    groups = model.group_norm_groups
    for key, channels, norm in (
        ("fpn_channels", model.fpn_channels, fpn_norms(model)[1]),
        ("fpn_channels", model.fpn_channels, model.rpn.head_norm),
        (
            "roi.box_head_conv_dim",
            model.roi.box_head_conv_dim,
            model.roi.box_head_norm if model.roi.box_head != "2fc" else "none",
        ),
        ("roi.mask_head_dim", model.roi.mask_head_dim, mask_head_norm(model)),
    ):
        check(
            norm != "group" or channels % groups == 0,
            f"model.{key}",
            channels,
            f"must be divisible by model.group_norm_groups={groups} "
            "(GroupNorm)",
        )
