"""The full configuration schema, with defaults, shared by every config file.

Config files in `configs/` start from `base_config()` and change what they
need; every field a module reads is declared here, so a typo in an override
(`--config.model.fpn_chanels=128`) is an error, not a silently ignored key.

Box convention everywhere: (x1, y1, x2, y2) in pixels of the padded model
input, x2 and y2 exclusive (a COCO [x, y, w, h] box is [x, y, x + w, y + h]).
Class ids: 1..num_classes for objects, 0 for background / padding.
"""

import json
import pathlib

import ml_collections

from ops import host_audit
from ops import nms as nms_lib

NMS_BACKENDS = nms_lib.BACKENDS  # auto, cpu, while_loop, pallas


def base_config() -> ml_collections.ConfigDict:
    """Returns the schema with COCO-style defaults (TF Model Garden R50-FPN)."""
    config = ml_collections.ConfigDict()
    config.seed = 0
    config.data = _data_config()
    config.model = _model_config()
    config.train = _train_config()
    config.eval = _eval_config()
    return config


def _data_config() -> ml_collections.ConfigDict:
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


def _model_config() -> ml_collections.ConfigDict:
    """config.model: backbone, FPN and anchors; one sub-dict per head."""
    model = ml_collections.ConfigDict()
    # 'resnet18' | 'resnet50' | 'resnet101' | 'tiny' (a CPU-sized ResNet,
    # one basic block per stage); see backbone.BACKBONES.
    model.backbone = "resnet50"
    # Channels of the stem; the four stages use 1x, 2x, 4x, 8x this (x4 more
    # at the output of bottleneck stages).
    model.backbone_width = 64
    model.norm = "group"  # 'group' | 'batch' | 'frozen_batch'
    # Pretrained backbone weights read before step 1 of a fresh run: a
    # .safetensors or .npz file with torchvision ResNet names (timm's
    # ResNets use the same), or a .pth when torch is installed. '': random.
    model.backbone_init = ""
    # Start from another run's orbax checkpoint (its workdir, checkpoints/
    # folder or one step folder): every array whose path and shape match is
    # copied; class-dependent heads are reinitialised when num_classes
    # differs; the step and optimizer state start fresh. '': none.
    model.init_checkpoint = ""
    # Frozen (never updated) backbone parts, as detectron2's FREEZE_AT:
    # 0 none, 1 the stem, 2 the stem and stage 1 (C2), ... 5 all.
    model.freeze_at = 0
    model.group_norm_groups = 32
    model.fpn_channels = 256
    model.min_level = 2
    model.max_level = 6
    model.anchor_scale = 8.0  # anchor side at level l: anchor_scale * 2**l
    model.aspect_ratios = (0.5, 1.0, 2.0)
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
    # ROIAlign pooling: 'auto' (per platform), 'gather' or 'matmul'; see
    # ops/roi_align.py.
    roi.align_implementation = "auto"
    roi.box_head_dim = 1024
    roi.mask_pool_size = 14
    roi.mask_head_dim = 256
    roi.mask_head_convs = 4
    roi.max_mask_rois = 128  # mask loss uses at most this many fg rois/image
    roi.mask_size = 28  # 2 * mask_pool_size
    return roi


def _detection_config() -> ml_collections.ConfigDict:
    """config.model.detection: scoring and class-aware NMS of detections."""
    detection = ml_collections.ConfigDict()
    detection.score_threshold = 0.05
    detection.nms_iou = 0.5
    detection.max_detections = 100
    # Candidates (roi, class) pairs kept by score before class-aware NMS.
    detection.pre_nms_top_k = 1000
    detection.nms_backend = "auto"
    return detection


def _loss_config() -> ml_collections.ConfigDict:
    """config.model.loss: Huber deltas and loss weights."""
    loss = ml_collections.ConfigDict()
    loss.rpn_box_beta = 1.0 / 9.0  # Huber delta of the RPN box loss
    loss.box_beta = 1.0
    loss.rpn_cls_weight = 1.0
    loss.rpn_box_weight = 1.0
    loss.cls_weight = 1.0
    loss.box_weight = 1.0
    loss.mask_weight = 1.0
    return loss


def _train_config() -> ml_collections.ConfigDict:
    """config.train: batch, optimizer, schedule, logging and checkpoints."""
    train = ml_collections.ConfigDict()
    train.batch_size = 64  # global, across all devices and hosts
    train.num_steps = 22500
    train.optimizer = "sgd"  # 'sgd' (momentum) | 'adamw'
    train.learning_rate = 0.12
    train.momentum = 0.9
    train.weight_decay = 4e-5
    train.schedule = "step"  # 'step' | 'cosine'
    train.warmup_steps = 500
    train.warmup_init_factor = 0.0067
    train.step_boundaries = (15000, 20000)
    # The same boundaries as fractions of num_steps, e.g. (2/3, 8/9); used
    # instead of step_boundaries (which must then be empty) when set.
    train.step_fractions = ()
    train.step_factor = 0.1
    train.grad_clip_norm = 0.0  # 0 turns clipping off
    train.log_every = 100
    train.checkpoint_every = 1000
    train.keep_checkpoints = 3
    train.eval_every = 0  # 0: evaluate only at the end
    # Deterministic GPU reductions (XLA --xla_gpu_deterministic_ops): the
    # same run twice gives the same losses, at a cost in step time (README,
    # "GPU results"). Applied by the entry points before JAX starts a
    # backend (detector/determinism.py); no effect on CPU and TPU.
    train.deterministic = False
    return train


def _eval_config() -> ml_collections.ConfigDict:
    """config.eval: batch size, subset and visualisation."""
    evaluation = ml_collections.ConfigDict()
    evaluation.batch_size = 8
    evaluation.max_images = 0  # 0: the whole split
    evaluation.num_visualized = 4
    return evaluation


def set_nms_backend(
    config: ml_collections.ConfigDict,
    backend: str,
    *,
    allow_baselines: bool = False,
) -> None:
    """Points both NMS sites (RPN proposals, detections) at one backend.

    `allow_baselines` also admits ops.nms.BASELINES ('topk', no suppression),
    which benchmarks use to measure what NMS costs.
    """
    nms_lib.check_backend(backend, name="--nms", baselines=allow_baselines)
    config.model.rpn.nms_backend = backend
    config.model.detection.nms_backend = backend


def host_nms_advice(finding: host_audit.HostRoundTrip) -> str:
    """What to do about a host round-trip the audit found: for an NMS op,
    the flags that keep NMS on the device."""
    if "nms" not in finding.op_name:
        return ""
    return (
        "the NMS backend 'cpu' runs on the host; use --nms=pallas or "
        "--nms=while_loop"
    )


# Integer fields that must be at least this value: (key, minimum, meaning).
_MINIMUMS = (
    ("train.batch_size", 1, "images per step"),
    ("train.num_steps", 1, "steps to train"),
    ("train.log_every", 1, "steps between metrics lines"),
    ("train.checkpoint_every", 1, "steps between checkpoints"),
    ("train.keep_checkpoints", 1, "checkpoints kept"),
    ("train.eval_every", 0, "steps between evaluations, 0: only at the end"),
    ("eval.batch_size", 1, "images per predict call"),
    ("eval.max_images", 0, "images evaluated, 0: the whole split"),
    ("eval.num_visualized", 0, "batches drawn"),
    ("data.max_instances", 1, "instances per image"),
)


def _get(config: ml_collections.ConfigDict, key: str):
    for part in key.split("."):
        config = config[part]
    return config


def validate(config: ml_collections.ConfigDict) -> None:
    """Checks the run's counts and sizes before anything is written.

    Raises:
      ValueError: one line naming the first bad key, its value and the
        reason (a zero or negative count, a malformed data.image_size).
    """
    for key, minimum, meaning in _MINIMUMS:
        value = _get(config, key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(
                f"config.{key}={value!r}: must be an integer ({meaning})"
            )
        if value < minimum:
            raise ValueError(
                f"config.{key}={value}: must be >= {minimum} ({meaning})"
            )
    check_image_size(config.data.image_size)


def check_image_size(size) -> None:
    """Raises ValueError unless `size` is (height, width), both positive."""
    if not isinstance(size, tuple | list) or len(size) != 2:
        raise ValueError(
            f"config.data.image_size={size!r}: must be "
            "(height, width), two integers"
        )
    if not all(
        isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in size
    ):
        raise ValueError(
            f"config.data.image_size={tuple(size)!r}: height and "
            "width must be positive integers"
        )


def _merge_json(
    target: ml_collections.ConfigDict, values: dict, prefix: str
) -> None:
    for key, value in values.items():
        if key not in target:
            raise ValueError(
                f"{prefix}{key}: not a config field (written "
                "by another version?)"
            )
        if isinstance(value, dict):
            _merge_json(target[key], value, f"{prefix}{key}.")
        elif isinstance(target[key], tuple) and isinstance(value, list):
            target[key] = tuple(value)
        else:
            target[key] = value


def load_json(path: str | pathlib.Path) -> ml_collections.ConfigDict:
    """Reads a workdir's config.json back into the schema's types."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no config.json here; pass "
            "--config=... or a workdir written by "
            "train.py"
        )
    config = base_config()
    _merge_json(config, json.loads(path.read_text()), f"{path}: ")
    return config


def nms_backend_name(config: ml_collections.ConfigDict) -> str:
    """Both NMS sites' backend, with what 'auto' resolves to on this host."""
    rpn, det = (
        _resolved(config.model.rpn.nms_backend),
        _resolved(config.model.detection.nms_backend),
    )
    return rpn if rpn == det else f"rpn={rpn},detection={det}"


def _resolved(backend: str) -> str:
    name = nms_lib.resolve_backend(backend)
    return backend if name == backend else f"{backend} ({name})"
