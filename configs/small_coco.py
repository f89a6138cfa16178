"""Mask R-CNN on your own small COCO-format folder, on a CPU: the shapes
recipe's CPU-sized model and schedule (configs/shapes.py) on your data.

  python train.py --config=configs/small_coco.py \
      --config.data.root=data/mine --workdir=runs/mine
  python train.py --config=configs/small_coco.py:roboflow \
      --config.data.root=data/export --workdir=runs/mine   # a Roboflow export
  python train.py --config=configs/small_coco.py:runlocal \
      --config.data.root=data/mine --workdir=runs/smoke    # 4-step smoke run

The folder holds annotations/instances_train.json and instances_val.json
with the images in train/ and val/ (a Roboflow COCO export, `:roboflow`:
train/ and valid/, each with its _annotations.coco.json). data.num_classes
is 0: the training annotation file's category count, taken when the run
starts (docs/fine-tuning.md).
"""

import ml_collections

from configs import shapes
from detector import config as config_lib


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """Returns the small-COCO config; `arg` names variants (see VARIANTS)."""
    config = shapes.get_config()
    _set_data(config.data)
    return config_lib.apply_variants(
        config, arg, VARIANTS, "configs/small_coco.py"
    )


def _set_data(data: ml_collections.ConfigDict) -> None:
    """Your COCO folder at a CPU-sized 320 x 320 letterbox."""
    data.source = "coco_json"
    data.root = ""  # --config.data.root=YOUR_FOLDER
    data.train_split = "train"
    data.eval_split = "val"
    data.num_classes = 0  # the annotation file's category count
    data.image_size = (320, 320)
    data.max_instances = 50
    data.scale_jitter = (0.8, 1.25)


def _roboflow(config: ml_collections.ConfigDict) -> None:
    """A Roboflow COCO export's split names: train/, valid/."""
    config.data.eval_split = "valid"


def _shrink_to_runlocal(config: ml_collections.ConfigDict) -> None:
    """The smoke run: 4 steps of batch 2, the first 8 images of each split."""
    config.data.train_split += "[:8]"
    config.data.eval_split += "[:8]"
    shapes.smoke_schedule(config)
    config.train.eval_every = 0


VARIANTS = {"roboflow": _roboflow, "runlocal": _shrink_to_runlocal}
