"""Mask R-CNN R50-FPN on COCO 2017, TF Model Garden hyper-parameters.

  python train.py --config=configs/coco_r50_fpn.py --workdir=DIR \
      --config.data.root=/path/to/coco
  python train.py --config=configs/coco_r50_fpn.py:runlocal   # smoke run

`data.root` is a COCO download (annotations/instances_train2017.json,
train2017/, val2017/). To read tfds coco/2017 instead (boxes only: it has
no instance masks), add `--config.data.source=tfds
--config.data.tfds_data_dir=DIR --config.data.train_split=train
--config.data.eval_split=validation`.
"""

import ml_collections

from detector import config as config_lib


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """Returns the R50-FPN config; `arg='runlocal'` shrinks it to a smoke run."""
    config = config_lib.base_config()
    config.data.source = "coco_json"
    config.data.root = "data/coco"
    config.data.train_split = "train2017"
    config.data.eval_split = "val2017"
    config.model.backbone = "resnet50"
    config.model.norm = "group"
    config.model.dtype = "auto"  # bfloat16 on GPU/TPU, float32 on CPU
    if arg == "runlocal":
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
    elif arg:
        raise ValueError(f"configs/coco_r50_fpn.py: unknown variant {arg!r}; "
                         "known: runlocal")
    return config
