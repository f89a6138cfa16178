"""Mask R-CNN R50-FPN on COCO 2017: the modern recipe (100 epochs of LSJ).

  python train.py --config=configs/coco_r50_fpn_lsj.py --workdir=DIR \
      --config.data.root=/path/to/coco
  python train.py --config=configs/coco_r50_fpn_lsj.py:imagenet    # + ImageNet
  python train.py --config=configs/coco_r50_fpn_lsj.py:runlocal    # smoke run
  python benchmarks/step_bench.py --config=configs/coco_r50_fpn_lsj.py:shapes

detectron2's configs/new_baselines/mask_rcnn_R_50_FPN_100ep_LSJ.py,
checked against its source (and common/models/mask_rcnn_fpn.py,
common/optim.py, common/train.py):
- from scratch, nothing frozen: train.init_checkpoint '' and
  bottom_up.freeze_at 0 (here model.backbone_init '', model.freeze_at 0);
- SyncBN in the stem, the stages and the FPN (model.norm and
  model.fpn_norm 'sync_batch'), NaiveSyncBatchNorm(stats_mode='N') in the
  box and mask head convs, whose statistics weigh each replica by its rois
  (model.roi.box_head_norm / mask_head_norm 'sync_batch': the statistics
  of the valid rois of the global batch);
- a 2-conv RPN head (proposal_generator.head.conv_dims [-1, -1], no norm:
  model.rpn.head_convs 2) and a 4conv1fc box head (conv_dims [256] * 4,
  fc_dims [1024]);
- ResizeScale(0.1, 2.0, 1024, 1024), FixedSizeCrop(1024), RandomFlip with
  recompute_boxes (data.augment 'lsj', lsj_min 0.1, lsj_max 2.0);
- total_batch_size 64, max_iter 184375 (100 epochs), SGD momentum 0.9, lr
  0.1, weight_decay 4e-5, WarmupParamScheduler over 500 iterations from
  0.067, MultiStepParamScheduler x0.1 at 163889 and x0.01 at 177546;
- amp (float16 there): model.dtype 'auto' (bfloat16 on GPU/TPU).
detectron2 also decays norm parameters and biases; here only kernels are
decayed (as the 1x config). Published: 44.6 box AP / 40.3 mask AP
(detectron2's model zoo; not reproduced here).

`--config.train.batch_size=B` scales the LR (x B/64), the steps, the
warmup and the LR steps (x 64/B), as the 1x config scales from 16.

Variants (applied left to right, `runlocal` last wherever it is named):
- `imagenet` starts the backbone from an ImageNet ResNet-50 through
  model.backbone_init (coco_r50_fpn's file) instead of from scratch;
- `runlocal` and `shapes` are coco_r50_fpn's (a smoke run; the full model
  at 1024 x 1024 on the synthetic shapes set, batch 8);
  `:shapes,runlocal` (or `:runlocal,shapes`) is a smoke run on the
  shapes set.
"""

from collections.abc import Callable

import ml_collections

from configs import coco_r50_fpn
from detector import config as config_lib

REFERENCE_BATCH = 64
BASE_LR = 0.1  # at REFERENCE_BATCH
STEPS = 184_375  # at REFERENCE_BATCH: 100 epochs
NUM_IMAGES = STEPS * REFERENCE_BATCH
WARMUP_IMAGES = 500 * REFERENCE_BATCH
LR_STEPS = (163_889, 177_546)  # at REFERENCE_BATCH


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """Returns the LSJ recipe; `arg` names variants (see VARIANTS)."""
    config = coco_r50_fpn.get_config()
    _set_model(config.model)
    data = config.data
    data.image_size = (1024, 1024)
    data.group_orientations = False  # LSJ keeps its square crop
    data.augment = "lsj"
    data.lsj_min, data.lsj_max = 0.1, 2.0
    data.hflip = True
    _set_schedule(config.train)
    return config_lib.apply_variants(
        config, arg, VARIANTS, "configs/coco_r50_fpn_lsj.py"
    )


def _set_model(model: ml_collections.ConfigDict) -> None:
    """From scratch, SyncBN everywhere, 2-conv RPN head, 4conv1fc."""
    model.backbone = "resnet50"
    model.backbone_init = ""
    model.freeze_at = 0
    model.norm = "sync_batch"
    model.fpn_norm = "sync_batch"
    model.rpn.head_convs = 2
    model.rpn.head_norm = "none"
    model.roi.box_head = "4conv1fc"
    model.roi.box_head_conv_dim = 256
    model.roi.box_head_dim = 1024
    model.roi.box_head_norm = "sync_batch"
    model.roi.mask_head_norm = "sync_batch"
    model.dtype = "auto"


def _set_schedule(train: ml_collections.ConfigDict) -> None:
    """SGD 100 epochs at batch 64; LR, steps and warmup follow the batch."""
    coco_r50_fpn.set_sgd_schedule(
        train,
        reference_batch=REFERENCE_BATCH,
        base_lr=BASE_LR,
        num_images=NUM_IMAGES,
        warmup_images=WARMUP_IMAGES,
        warmup_init_factor=0.067,
        step_fractions=tuple(step / STEPS for step in LR_STEPS),
    )
    train.weight_decay = 4e-5
    train.grad_clip_norm = 0.0


def _imagenet(config: ml_collections.ConfigDict) -> None:
    """The backbone from an ImageNet ResNet-50 (coco_r50_fpn's file)."""
    config.model.backbone_init = "data/resnet50.safetensors"


VARIANTS: dict[str, Callable[[ml_collections.ConfigDict], None]] = {
    "imagenet": _imagenet,
    "runlocal": coco_r50_fpn.VARIANTS["runlocal"],
    "shapes": coco_r50_fpn.VARIANTS["shapes"],
}
