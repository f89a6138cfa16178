"""Mask R-CNN R50-FPN on COCO 2017: the standard pretrained 1x recipe.

  python train.py --config=configs/coco_r50_fpn.py --workdir=DIR \
      --config.data.root=/path/to/coco \
      --config.model.backbone_init=/path/to/resnet50.safetensors
  python train.py --config=configs/coco_r50_fpn.py:gn_scratch  # GN, scratch
  python train.py --config=configs/coco_r50_fpn.py:runlocal    # smoke run
  python benchmarks/step_bench.py --config=configs/coco_r50_fpn.py:shapes

The default starts from an ImageNet ResNet-50 (a torchvision-named
.safetensors file; docs/coco.md shows how to make one) with
frozen BatchNorm and the stem plus stage 1 frozen, and trains the 1x
schedule: SGD, momentum 0.9, base LR 0.02 at batch 16 scaled linearly with
the batch, linear warmup over 1000 steps (at batch 16) from 0.001 x the LR,
x0.1 at 2/3 and 8/9 of training, weight decay 1e-4, 90k steps at batch 16
(1.44M images, ~12 epochs); inputs resized as detectron2 trains them
(`_set_multiscale_input`): short side drawn from 640..800 in steps of 32,
long side at most 1333, flipped half the time, landscape images on an
832 x 1344 canvas and portrait ones on 1344 x 832, each step one
orientation (eval: short side 800, the same canvases).
`--config.train.batch_size=B` rescales the LR (x B/16), the steps and the
warmup (x 16/B) with it.

Checked against the published configs:
- detectron2, configs/Base-RCNN-FPN.yaml with detectron2/config/defaults.py
  and configs/common (optim.py, coco_schedule.py): RESNETS.NORM "FrozenBN",
  BACKBONE.FREEZE_AT 2, SGD momentum 0.9, BASE_LR 0.02 at IMS_PER_BATCH 16,
  STEPS (60000, 80000) of MAX_ITER 90000, WARMUP_ITERS 1000 with
  WARMUP_FACTOR 0.001, WEIGHT_DECAY 1e-4 (detectron2 also decays biases;
  here only kernels are decayed), INPUT.MIN_SIZE_TRAIN (640, ..., 800)
  sampled per image ("choice"), MAX_SIZE_TRAIN 1333, MIN_SIZE_TEST 800,
  RandomFlip.
- TF Model Garden, official/vision/configs/maskrcnn.py
  `maskrcnn_resnetfpn_coco`: init_checkpoint an ImageNet ResNet-50 with
  init_checkpoint_modules 'backbone', input 1024x1024, scale jitter
  0.8-1.25, SGD momentum 0.9, 22500 steps at batch 64 (the same 1.44M
  images) with LR steps at 15000 and 20000 (2/3 and 8/9); it trains its
  BatchNorm and uses LR 0.12 (0.0019 per image, above detectron2's
  0.00125), 500 warmup steps and L2 4e-5.

Variants (applied left to right, `runlocal` last wherever it is named;
they combine: `:gn_scratch,shapes`):
- `letterbox` trains on TF Model Garden's input instead: 1024 x 1024
  letterbox with 0.8-1.25 scale jitter;
- `gn_scratch` keeps the GroupNorm-from-scratch setup (no pretrained file,
  nothing frozen, TF Model Garden's schedule: batch 64, LR 0.12, 22.5k
  steps);
- `runlocal` shrinks everything to a smoke run (with `shapes`, in either
  order, on the shapes set);
- `torchvision` starts from torchvision's COCO-trained Mask R-CNN
  (`maskrcnn_resnet50_fpn` v1, converted to .safetensors;
  docs/torchvision-weights.md) through
  model.init_checkpoint, sets every inference setting torchvision does
  differently, and trains on its reference recipe with its training
  conventions (see `_torchvision`; docs/training.md);
- `torchvision_v2` starts from torchvision's `maskrcnn_resnet50_fpn_v2`
  (BatchNorm in the backbone, FPN and heads, a 2-conv RPN head, a
  4conv1fc box head; see `_torchvision_v2`), with that model's recipe;
- `shapes` keeps the full model at the 1024 x 1024 letterbox (batch 8)
  but reads the
  synthetic shapes dataset (3 classes, written under data/shapes on first
  use) and needs no pretrained file, so the real model size can be trained
  and timed without COCO.

`data.root` is a COCO download (annotations/instances_train2017.json,
train2017/, val2017/). To read tfds coco/2017 instead (boxes only: it has
no instance masks), add `--config.data.source=tfds
--config.data.tfds_data_dir=DIR --config.data.train_split=train
--config.data.eval_split=validation`.
"""

from collections.abc import Callable

import ml_collections

from detector import config as config_lib
from detector.data import splits

# The 1x recipe at its reference batch; other batches scale from it.
REFERENCE_BATCH = 16
BASE_LR = 0.02  # at REFERENCE_BATCH
NUM_IMAGES = 90_000 * REFERENCE_BATCH  # 1x: ~12 COCO epochs
WARMUP_IMAGES = 1000 * REFERENCE_BATCH


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """Returns the R50-FPN config; `arg` names variants (see VARIANTS)."""
    config = config_lib.base_config()
    config.data.source = "coco_json"
    config.data.root = "data/coco"
    config.data.train_split = "train2017"
    config.data.eval_split = "val2017"
    _set_multiscale_input(config.data)
    _set_pretrained_model(config.model)
    _set_1x_schedule(config.train)
    return config_lib.apply_variants(
        config, arg, VARIANTS, "configs/coco_r50_fpn.py"
    )


def _set_multiscale_input(data: ml_collections.ConfigDict) -> None:
    """detectron2's input: short side 640..800 (step 32) per image, long
    side at most 1333, flip; landscape images on an 832 x 1344 canvas,
    portrait ones on 1344 x 832, one orientation per step."""
    data.resize = "shortest_edge"
    data.min_size = tuple(range(640, 801, 32))
    data.max_size = 1333
    data.image_size = (832, 1344)
    data.group_orientations = True
    data.hflip = True


def _letterbox(config: ml_collections.ConfigDict) -> None:
    """TF Model Garden's input: 1024 x 1024 letterbox, 0.8-1.25 jitter."""
    data = config.data
    data.resize = "letterbox"
    data.image_size = (1024, 1024)
    data.group_orientations = False
    data.scale_jitter = (0.8, 1.25)


def _set_pretrained_model(model: ml_collections.ConfigDict) -> None:
    """ImageNet ResNet-50, frozen BatchNorm, stem + stage 1 frozen."""
    model.backbone = "resnet50"
    model.norm = "frozen_batch"  # also: no norm in the FPN and heads
    model.freeze_at = 2
    model.backbone_init = "data/resnet50.safetensors"
    model.dtype = "auto"  # bfloat16 on GPU/TPU, float32 on CPU


def _set_1x_schedule(train: ml_collections.ConfigDict) -> None:
    """SGD 1x at batch 16; LR, steps and warmup follow train.batch_size."""
    set_sgd_schedule(
        train,
        reference_batch=REFERENCE_BATCH,
        base_lr=BASE_LR,
        num_images=NUM_IMAGES,
        warmup_images=WARMUP_IMAGES,
        warmup_init_factor=0.001,
        step_fractions=(2 / 3, 8 / 9),
    )


def set_sgd_schedule(
    train: ml_collections.ConfigDict,
    *,
    reference_batch: int,
    base_lr: float,
    num_images: int,
    warmup_images: int,
    warmup_init_factor: float,
    step_fractions: tuple[float, ...],
) -> None:
    """SGD with momentum 0.9 and x0.1 steps at `step_fractions` of the run;
    the LR (base_lr at reference_batch), steps and warmup follow
    train.batch_size (field references: an override rescales them)."""
    train.batch_size = reference_batch
    batch = train.get_ref("batch_size")
    train.optimizer = "sgd"
    train.momentum = 0.9
    train.learning_rate = batch.to_float() * (base_lr / reference_batch)
    train.num_steps = num_images // batch
    train.schedule = "step"
    train.warmup_steps = warmup_images // batch
    train.warmup_init_factor = warmup_init_factor
    train.step_boundaries = ()
    train.step_fractions = tuple(step_fractions)
    train.step_factor = 0.1
    train.weight_decay = 1e-4
    train.grad_clip_norm = 0.0
    train.checkpoint_every = 5000


def _gn_scratch(config: ml_collections.ConfigDict) -> None:
    """GroupNorm from scratch with TF Model Garden's schedule."""
    model = config.model
    model.norm = "group"
    model.freeze_at = 0
    model.backbone_init = ""
    config.train = config_lib.base_config().train


def _runlocal(config: ml_collections.ConfigDict) -> None:
    """A smoke run: ResNet-18 (random init), 4 steps of batch 2, images
    at most 192 x 256 on a 256 x 256 canvas, or with orientation canvases
    on 192 x 256 (landscape) and 256 x 192 (portrait)."""
    grouped = config.data.group_orientations
    config.data.image_size = (192, 256) if grouped else (256, 256)
    config.data.min_size = (160, 192)
    config.data.max_size = 256
    config.data.max_instances = 32
    # The first 8 images of the eval split read (shapes' 'val' after
    # `shapes`: `:shapes,runlocal` is a smoke run on the shapes set).
    name, _, _ = splits.parse_split(config.data.eval_split)
    config.data.eval_split = f"{name}[:8]"
    config.model.backbone = "resnet18"
    config.model.backbone_init = ""
    config.model.dtype = "float32"
    config.model.rpn.pre_nms_top_k_train = 500
    config.model.rpn.pre_nms_top_k_test = 500
    config.model.rpn.post_nms_top_k_train = 300
    config.model.rpn.post_nms_top_k_test = 300
    config.model.roi.num_rois = 128
    train = config.train
    train.batch_size = 2
    train.num_steps = 4
    train.warmup_steps = 2
    train.step_boundaries, train.step_fractions = (3,), ()
    train.log_every = 2
    train.checkpoint_every = 4
    config.eval.batch_size = 2


def _shapes(config: ml_collections.ConfigDict) -> None:
    """The full model and input size on the shapes dataset, batch 8.

    The shapes set is the one configs/shapes.py writes (same root, counts
    and seed), its 128 x 128 images resized up to 1024 x 1024. The backbone
    starts from random weights (no file needed).
    """
    _letterbox(config)
    data = config.data
    data.source = "shapes"
    data.root = "data/shapes"
    data.train_split = "train"
    data.eval_split = "val"
    data.num_classes = 3
    config.model.backbone_init = ""
    config.train.batch_size = 8
    config.eval.batch_size = 8


# torchvision's reference scripts (references/detection/train.py): COCO
# train2017 less its images without annotations, LR warmup over 1000
# iterations from 0.001 x the LR.
TORCHVISION_EPOCH = 117_266
TORCHVISION_WARMUP_STEPS = 1000

# Where docs/torchvision-weights.md puts it.
TORCHVISION_FILE = "data/maskrcnn_resnet50_fpn_coco.safetensors"


def _torchvision_schedule(
    train: ml_collections.ConfigDict,
    *,
    batch: int,
    lr: float,
    epochs: int,
    steps: tuple[int, int],
) -> None:
    """torchvision's reference schedule at its batch (LR, steps and warmup
    follow train.batch_size as the 1x's do)."""
    set_sgd_schedule(
        train,
        reference_batch=batch,
        base_lr=lr,
        num_images=epochs * TORCHVISION_EPOCH,
        warmup_images=TORCHVISION_WARMUP_STEPS * batch,
        warmup_init_factor=0.001,
        step_fractions=tuple(step / epochs for step in steps),
    )


def _torchvision(config: ml_collections.ConfigDict) -> None:
    """torchvision's maskrcnn_resnet50_fpn (v1) inference, its weights.

    Each setting, checked against torchvision's source
    (torchvision/models/detection/{mask_rcnn,faster_rcnn,rpn,roi_heads,
    anchor_utils,_utils,transform}.py, ops/{poolers,misc}.py):
    - weights: model.init_checkpoint = TORCHVISION_FILE (a file: a
      torchvision state dict), no backbone_init; the 91-way COCO heads map
      onto data.num_classes = 80;
    - norm: FrozenBatchNorm2d in the backbone, no norm in the FPN and
      heads (ours: 'frozen_batch'); its eps is 1e-5 by default but 0 for
      these weights (maskrcnn_resnet50_fpn calls overwrite_eps(model, 0.0)
      when it loads COCO_V1): model.frozen_bn_epsilon = 0.0;
    - anchors: sizes 32..512 on P2..P6 (anchor_scale 8), aspect ratios
      (0.5, 1, 2) = h / w, centred at i * stride (anchor_offset 0.0) with
      half-extents rounded to whole pixels (anchor_round);
    - P6: max-pool kernel 1, stride 2 of P5 (LastLevelMaxPool; ours too);
    - RPN at test time: the top 1000 logits per level, decode, clip, boxes
      under 1e-3 pixels dropped (rpn.min_box_size), NMS 0.7 per level, the
      best 1000 per image; box deltas clamped at log(1000 / 16) (ours too);
    - ROIAlign: aligned=False, sampling ratio 2, 7 x 7 box and 14 x 14 mask
      pooling, levels P2..P5 by floor(4 + log2(sqrt(area) / 224) + 1e-6)
      (roi.level_eps); a sample clamps to the last row and column of its
      image's padded tensor (ours: of its extent on the canvas);
    - detections: softmax scores > 0.05, boxes under 1e-2 pixels dropped
      (detection.min_box_size), class-aware NMS 0.5, 100 per image; every
      (proposal, class) pair above 0.05 enters NMS there, here the best
      detection.pre_nms_top_k = 4000;
    - masks: torchvision's paste_masks_in_image (one-cell border, integer
      box, > 0.5): eval.mask_paste = 'torchvision';
    - input: ImageNet mean and std on RGB (data.pixel_mean/std, ours too);
      GeneralizedRCNNTransform's resize: short side 800, long side at most
      1333, size floored, bilinear in float (data.resize='shortest_edge',
      data.min_size=(800,), data.max_size=1333); each image's boxes clip to
      its own size, and the anchors of its tensor padded to a multiple of
      32 are the ones that propose (the model's image_sizes).

    Not matched, and measured on photo files by tests/test_photo_parity.py
    (torchvision's model.eval() on six JPEGs: all 600 of its detections
    matched with IoU >= 0.95, scores within 4e-6, mask IoU 1.000):
    torchvision's anchor stride of a level is its padded tensor's side //
    the level's cells (AnchorGenerator), so on a side of 800 (13 P6
    cells) P6 anchors step 61 pixels, here always 64 (on the EXIF-rotated
    photo, 1066 x 800, one of torchvision's 1000 proposals is not ours,
    no detection changes); every (proposal, class) pair above 0.05 enters
    torchvision's final NMS, here the best 4000; the bilinear resize sums
    in another order (float32 rounding).
    """
    data = config.data
    data.resize = "shortest_edge"
    data.min_size = (800,)
    data.max_size = 1333
    data.image_size = (1344, 1344)  # one canvas, as the parity tests ran
    data.group_orientations = False
    model = config.model
    model.backbone = "resnet50"
    model.norm = "frozen_batch"
    model.backbone_init = ""
    model.init_checkpoint = TORCHVISION_FILE
    model.frozen_bn_epsilon = 0.0
    model.anchor_offset = 0.0
    model.anchor_round = True
    model.rpn.pre_nms_top_k_test = 1000
    model.rpn.post_nms_top_k_test = 1000
    model.rpn.nms_iou = 0.7
    model.rpn.min_box_size = 1e-3
    model.roi.aligned = False
    model.roi.sampling_ratio = 2
    model.roi.canonical_size = 224.0
    model.roi.canonical_level = 4
    model.roi.level_eps = 1e-6
    model.detection.score_threshold = 0.05
    model.detection.nms_iou = 0.5
    model.detection.max_detections = 100
    model.detection.min_box_size = 1e-2
    model.detection.pre_nms_top_k = 4000
    config.eval.mask_paste = "torchvision"
    # Training (rpn.py, roi_heads.py; docs/training.md): top-k 2000 per
    # level and per image in training, smooth-L1 beta 1/9 for both box
    # losses, the RPN losses over the anchors sampled, soft mask targets
    # from the image-sized GT masks (the batch carries them bit-packed on
    # the canvas: data/gt_masks.py).
    model.rpn.pre_nms_top_k_train = 2000
    model.rpn.post_nms_top_k_train = 2000
    model.loss.rpn_box_beta = 1.0 / 9.0
    model.loss.box_beta = 1.0 / 9.0
    model.loss.rpn_normaliser = "sampled"
    model.loss.mask_target = "torchvision"
    # Its reference recipe: SGD, momentum 0.9, LR 0.02 at batch 16, weight
    # decay 1e-4 on every parameter, 26 epochs, x0.1 at epochs 16 and 22.
    _torchvision_schedule(
        config.train, batch=16, lr=0.02, epochs=26, steps=(16, 22)
    )
    config.train.weight_decay = 1e-4
    config.train.weight_decay_on = "all"


# Where README "Start from torchvision's COCO-trained Mask R-CNN" puts v2.
TORCHVISION_V2_FILE = "data/maskrcnn_resnet50_fpn_v2_coco.safetensors"


def _torchvision_v2(config: ml_collections.ConfigDict) -> None:
    """torchvision's maskrcnn_resnet50_fpn_v2 inference, its weights.

    The v1 variant's inference settings, and v2's layout, checked against
    torchvision's source (models/detection/mask_rcnn.py
    maskrcnn_resnet50_fpn_v2, faster_rcnn.py FastRCNNConvFCHead, rpn.py
    RPNHead, backbone_utils.py _resnet_fpn_extractor,
    ops/feature_pyramid_network.py):
    - weights: model.init_checkpoint = TORCHVISION_V2_FILE;
    - backbone: ResNet-50 with BatchNorm2d, trained, eps 1e-5 (v2 does not
      overwrite it): model.norm 'sync_batch' (its recipe's SyncBN; running
      statistics in eval);
    - FPN: BatchNorm2d after the lateral 1x1 and the output 3x3 convs (no
      conv biases): model.fpn_norm 'sync_batch';
    - RPN head: conv_depth 2, no norm: model.rpn.head_convs 2;
    - box head: FastRCNNConvFCHead((256, 7, 7), [256] * 4, [1024],
      norm_layer=BatchNorm2d): model.roi.box_head '4conv1fc' with
      box_head_norm 'sync_batch';
    - mask head: MaskRCNNHeads(256, [256] * 4, 1, norm_layer=BatchNorm2d):
      model.roi.mask_head_norm 'sync_batch'.
    torchvision publishes 47.4 box AP / 41.8 mask AP on COCO val2017 for
    these weights (at its 800-1333 resize).
    """
    _torchvision(config)
    model = config.model
    model.init_checkpoint = TORCHVISION_V2_FILE
    model.norm = "sync_batch"
    model.frozen_bn_epsilon = 1e-5
    model.fpn_norm = "sync_batch"
    model.rpn.head_convs = 2
    model.rpn.head_norm = "none"
    model.roi.box_head = "4conv1fc"
    model.roi.box_head_conv_dim = 256
    model.roi.box_head_norm = "sync_batch"
    model.roi.mask_head_norm = "sync_batch"
    # The recipe of these weights (torchvision's pull request 5773): 64
    # images per step, LR 0.1, weight decay 4e-5 on every parameter, 400
    # epochs, x0.1 at epochs 352 and 384, SyncBN (--sync-bn: every
    # BatchNorm's statistics over the global batch; in eval the running
    # ones, as 'batch'), and LSJ (--data-augmentation lsj; below).
    _torchvision_schedule(
        config.train, batch=64, lr=0.1, epochs=400, steps=(352, 384)
    )
    config.train.weight_decay = 4e-5
    _torchvision_lsj(config.data)


# torchvision's LSJ (references/detection presets 'lsj'): ScaleJitter to
# 1024 x 1024 by (0.1, 2.0), FixedSizeCrop 1024, flip; then the model's
# resize (800-1333) takes the 1024 x 1024 input to 800 x 800.
TORCHVISION_LSJ_SIZE = 800
TORCHVISION_LSJ_SCALES = (0.1, 2.0)


def _torchvision_lsj(data: ml_collections.ConfigDict) -> None:
    """torchvision's LSJ at its model's input: each image scaled by s x
    min(800 / h, 800 / w), s in (0.1, 2.0), cropped and padded, on an
    832 x 832 training canvas (the smallest that P6's stride 64 divides;
    the scales are taken over 832, so an image is scaled as torchvision
    scales it and only the crop is 32 pixels wider). Evaluation keeps the
    800-1333 resize on data.image_size. Boxes under 1 pixel are dropped
    (torchvision drops the empty ones)."""
    canvas = -(-TORCHVISION_LSJ_SIZE // 64) * 64
    low, high = TORCHVISION_LSJ_SCALES
    data.augment = "lsj"
    data.train_image_size = (canvas, canvas)
    data.lsj_min = low * TORCHVISION_LSJ_SIZE / canvas
    data.lsj_max = high * TORCHVISION_LSJ_SIZE / canvas


VARIANTS: dict[str, Callable[[ml_collections.ConfigDict], None]] = {
    "gn_scratch": _gn_scratch,
    "letterbox": _letterbox,
    "runlocal": _runlocal,
    "shapes": _shapes,
    "torchvision": _torchvision,
    "torchvision_v2": _torchvision_v2,
}
