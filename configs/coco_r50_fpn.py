"""Mask R-CNN R50-FPN on COCO 2017, TF Model Garden hyper-parameters.

  python train.py --config=configs/coco_r50_fpn.py --workdir=DIR \
      --config.data.root=/path/to/coco
  python train.py --config=configs/coco_r50_fpn.py:runlocal   # smoke run
  python benchmarks/step_bench.py --config=configs/coco_r50_fpn.py:shapes

`data.root` is a COCO download (annotations/instances_train2017.json,
train2017/, val2017/). To read tfds coco/2017 instead (boxes only: it has
no instance masks), add `--config.data.source=tfds
--config.data.tfds_data_dir=DIR --config.data.train_split=train
--config.data.eval_split=validation`.

Variants: `runlocal` shrinks everything to a smoke run; `shapes` keeps the
full model at 1024 x 1024 (batch 8) but reads the synthetic shapes dataset
(3 classes, written under data/shapes on first use), so the real model size
can be trained and timed without COCO.
"""

import ml_collections

from detector import config as config_lib


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """Returns the R50-FPN config, changed by the variant `arg` if given."""
    config = config_lib.base_config()
    config.data.source = "coco_json"
    config.data.root = "data/coco"
    config.data.train_split = "train2017"
    config.data.eval_split = "val2017"
    config.model.backbone = "resnet50"
    config.model.norm = "group"
    config.model.dtype = "auto"  # bfloat16 on GPU/TPU, float32 on CPU
    if arg:
        if arg not in _VARIANTS:
            raise ValueError(f"configs/coco_r50_fpn.py: unknown variant "
                             f"{arg!r}; known: {', '.join(_VARIANTS)}")
        _VARIANTS[arg](config)
    return config


def _runlocal(config: ml_collections.ConfigDict) -> None:
    """A smoke run: resnet18 at 256 x 256, 4 steps of batch 2, float32."""
    config.data.image_size = (256, 256)
    config.data.max_instances = 32
    config.data.eval_split = "val2017[:8]"
    config.model.backbone = "resnet18"
    config.model.dtype = "float32"
    config.model.rpn.pre_nms_top_k_train = 500
    config.model.rpn.pre_nms_top_k_test = 500
    config.model.rpn.post_nms_top_k_train = 300
    config.model.rpn.post_nms_top_k_test = 300
    config.model.roi.num_rois = 128
    config.train.batch_size = 2
    config.train.num_steps = 4
    config.train.warmup_steps = 2
    config.train.step_boundaries = (3,)
    config.train.log_every = 2
    config.train.checkpoint_every = 4
    config.eval.batch_size = 2


def _shapes(config: ml_collections.ConfigDict) -> None:
    """The full model and input size on the shapes dataset, batch 8.

    The shapes set is the one configs/shapes.py writes (same root, counts
    and seed), its 128 x 128 images resized up to 1024 x 1024.
    """
    data = config.data
    data.source = "shapes"
    data.root = "data/shapes"
    data.train_split = "train"
    data.eval_split = "val"
    data.num_classes = 3
    config.train.batch_size = 8
    config.eval.batch_size = 8


_VARIANTS = {"runlocal": _runlocal, "shapes": _shapes}
