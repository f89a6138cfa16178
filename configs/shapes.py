"""The default recipe: Mask R-CNN on the synthetic shapes dataset, CPU-sized.

  python train.py                       # trains and evaluates this config
  python train.py --config=configs/shapes.py:runlocal   # smoke run

The dataset (COCO JSON + PNGs) is written under `data.root` on first use.
"""

import ml_collections

from detector import config as config_lib


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """Returns the shapes config; `arg='runlocal'` shrinks it to a smoke run."""
    config = config_lib.base_config()
    _set_data(config.data)
    _set_model(config.model)
    _set_train(config.train)
    config.eval.batch_size = 8
    if arg == "runlocal":
        _shrink_to_runlocal(config)
    elif arg:
        raise ValueError(
            f"configs/shapes.py: unknown variant {arg!r}; known: runlocal"
        )
    return config


def _set_data(data: ml_collections.ConfigDict) -> None:
    """The synthetic shapes set: 128x128 images, 3 classes."""
    data.source = "shapes"
    data.root = "data/shapes"
    data.train_split = "train"
    data.eval_split = "val"
    data.num_classes = 3
    data.image_size = (128, 128)
    data.max_instances = 8
    data.gt_mask_size = 56
    data.scale_jitter = (0.9, 1.1)
    data.cache = True
    data.shapes.num_train = 2000
    data.shapes.num_val = 200
    data.shapes.image_size = 128


def _set_model(model: ml_collections.ConfigDict) -> None:
    """A CPU-sized ResNet-FPN with fewer proposals, rois and detections."""
    model.backbone = "tiny"
    model.backbone_width = 16
    model.norm = "group"
    model.group_norm_groups = 8
    model.fpn_channels = 64
    model.min_level = 2
    model.max_level = 5
    model.anchor_scale = 4.0
    model.rpn.pre_nms_top_k_train = 512
    model.rpn.pre_nms_top_k_test = 256
    model.rpn.post_nms_top_k_train = 256
    model.rpn.post_nms_top_k_test = 128
    model.rpn.num_samples = 128
    model.roi.num_rois = 64
    model.roi.box_head_dim = 256
    model.roi.mask_head_dim = 64
    model.roi.mask_head_convs = 2
    model.roi.max_mask_rois = 8
    model.roi.sampling_ratio = 1  # 1 sample per bin: ~40% faster steps on CPU
    model.detection.max_detections = 20
    model.detection.pre_nms_top_k = 200


def _set_train(train: ml_collections.ConfigDict) -> None:
    """AdamW with warmup and cosine decay, 1800 steps of batch 8."""
    train.batch_size = 8
    train.num_steps = 1800
    train.optimizer = "adamw"
    train.learning_rate = 2e-3
    train.weight_decay = 1e-4
    train.schedule = "cosine"
    train.warmup_steps = 200
    train.grad_clip_norm = 10.0
    train.log_every = 50
    train.checkpoint_every = 500
    train.eval_every = 500


def _shrink_to_runlocal(config: ml_collections.ConfigDict) -> None:
    """The smoke run: 16 + 8 images, 4 steps of batch 2."""
    config.data.shapes.num_train = 16
    config.data.shapes.num_val = 8
    config.data.root = "data/shapes_runlocal"
    smoke_schedule(config)


def smoke_schedule(config: ml_collections.ConfigDict) -> None:
    """4 steps of batch 2, a log line every 2 and one checkpoint; eval
    batches of 4 (the `:runlocal` variants' schedule)."""
    config.train.batch_size = 2
    config.train.num_steps = 4
    config.train.warmup_steps = 2
    config.train.log_every = 2
    config.train.checkpoint_every = 4
    config.eval.batch_size = 4
