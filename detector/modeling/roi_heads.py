"""ROI heads: ROI sampling and targets, box head, mask head, detections.

Train: GT boxes are appended to the proposals, matched (fg >= fg_iou, bg in
[bg_iou_low, bg_iou_high)) and num_rois are sampled per image at fg_fraction
foreground, with static shapes and each image's own PRNG key; foreground
rois come first, so the mask head trains on the first max_mask_rois slots.
Mask targets resample each matched GT's pre-cropped S x S mask at the roi
(box-normalised coordinates) with the same gather-based ROIAlign, reading 0
outside the GT box, then threshold at 0.5.

Predict (NMS site 2): class-specific decode, candidates with
score > score_threshold, the top pre_nms_top_k (roi, class) pairs, then
class-aware `ops.nms` for the whole batch at once.

Shapes (the letters of docs/architecture.md where they exist): B batch,
P proposals per image, G GT boxes per image, R sampled rois, Rm mask rois
(the first Rm of R), N flattened rois (B * R) inside the mask head layers,
C classes, F channels, Q pool size, S GT mask crop size, M predicted mask
size (2Q, 28), N_pre pre-NMS (roi, class) candidates, K kept detections.
"""

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from detector.modeling import backbone, box_coder, matcher, norms, sampler
from ops import box_ops, roi_align
from ops.nms import nms


def add_class_layers(
    head: nnx.Module,
    hidden: int,
    num_classes: int,
    *,
    dtype: jnp.dtype,
    rngs: nnx.Rngs,
) -> None:
    """The layers every box head ends in: `classes` (C + 1 logits, drawn
    from N(0, 0.01)) and `deltas` (4 per class, N(0, 0.001))."""
    head.classes = nnx.Linear(
        hidden,
        num_classes + 1,
        dtype=dtype,
        rngs=rngs,
        kernel_init=nnx.initializers.normal(0.01),
    )
    head.deltas = nnx.Linear(
        hidden,
        4 * num_classes,
        dtype=dtype,
        rngs=rngs,
        kernel_init=nnx.initializers.normal(0.001),
    )


class BoxHead(nnx.Module):
    """Two fully connected layers, then class logits and class deltas."""

    def __init__(
        self,
        in_features: int,
        hidden: int,
        num_classes: int,
        *,
        dtype: jnp.dtype,
        rngs: nnx.Rngs,
    ):
        self.fc1 = nnx.Linear(in_features, hidden, dtype=dtype, rngs=rngs)
        self.fc2 = nnx.Linear(hidden, hidden, dtype=dtype, rngs=rngs)
        add_class_layers(self, hidden, num_classes, dtype=dtype, rngs=rngs)

    @jax.named_scope("box_head")
    def __call__(
        self, features: jax.Array, valid: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """[B, R, Q, Q, F] -> logits f32[B, R, C + 1], deltas [B, R, C, 4].

        `valid` (bool[B, R]) is what a head with a norm counts; no norm here.
        """
        del valid
        batch, rois = features.shape[:2]
        x = features.reshape(batch, rois, -1)
        x = jax.nn.relu(self.fc1(x))
        x = jax.nn.relu(self.fc2(x))
        deltas = self.deltas(x).astype(jnp.float32)
        return (
            self.classes(x).astype(jnp.float32),
            deltas.reshape(batch, rois, -1, 4),
        )


class Deconv2x(nnx.Module):
    """Transposed conv, kernel 2 and stride 2, as one matmul.

    The 2x2 stride-2 windows do not overlap, so out[2i + a, 2j + b] =
    x[i, j] @ kernel[a, b] + bias (PyTorch's ConvTranspose2d form; lax's
    conv_transpose flips the kernel). Its weight gradient is a plain matmul:
    XLA CPU's transposed-conv weight gradient is ~30x slower at mask head
    sizes.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        dtype: jnp.dtype,
        rngs: nnx.Rngs,
    ):
        self.kernel = nnx.Param(
            backbone.conv_init(
                rngs.params(), (2, 2, in_channels, out_channels), jnp.float32
            )
        )
        self.bias = nnx.Param(jnp.zeros((out_channels,), jnp.float32))
        self.dtype = dtype

    def unshuffled(self, x: jax.Array) -> jax.Array:
        """[N, H, W, F_in] -> [N, H, W, 2 (a), 2 (b), F_out], pre-interleave.

        Pointwise layers commute with the interleave, so a head can apply
        them here and interleave only its (narrower) final output.
        """
        kernel = self.kernel[...].astype(self.dtype)
        y = jnp.einsum("nhwc,abcd->nhwabd", x.astype(self.dtype), kernel)
        return y + self.bias[...].astype(self.dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        """[N, H, W, F_in] -> [N, 2H, 2W, F_out]."""
        return pixel_shuffle(self.unshuffled(x))


def pixel_shuffle(x: jax.Array) -> jax.Array:
    """[N, H, W, 2 (a), 2 (b), F] -> [N, 2H, 2W, F], out[2i + a, 2j + b]."""
    batch, height, width, _, _, channels = x.shape
    x = jnp.transpose(x, (0, 1, 3, 2, 4, 5))
    return x.reshape(batch, 2 * height, 2 * width, channels)


class MaskHead(nnx.Module):
    """conv3x3 stack, 2x deconv, then one mask logit map per class.

    Each conv + ReLU carries the norm `norm` of norms.HEAD_NORMS ('none':
    a conv with a bias, torchvision's v1 MaskRCNNHeads; 'batch':
    its v2 MaskRCNNHeads(norm_layer=BatchNorm2d); detectron2's
    MaskRCNNConvUpsampleHead(conv_norm=...)).
    """

    def __init__(
        self,
        in_channels: int,
        hidden: int,
        num_convs: int,
        num_classes: int,
        *,
        norm: str,
        groups: int,
        dtype: jnp.dtype,
        rngs: nnx.Rngs,
    ):
        self.convs = nnx.List(
            [
                norms.conv_norm(
                    in_channels if i == 0 else hidden,
                    hidden,
                    3,
                    norm=norm,
                    groups=groups,
                    dtype=dtype,
                    rngs=rngs,
                )
                for i in range(num_convs)
            ]
        )
        self.upsample = Deconv2x(
            hidden if num_convs else in_channels, hidden, dtype=dtype, rngs=rngs
        )
        # A 1x1 conv as a Linear over channels (a cheaper gradient on CPU).
        self.logits = nnx.Linear(
            hidden,
            num_classes,
            kernel_init=nnx.initializers.normal(0.001),
            dtype=dtype,
            rngs=rngs,
        )

    @jax.named_scope("mask_head")
    def __call__(
        self, features: jax.Array, valid: jax.Array | None = None
    ) -> jax.Array:
        """[B, R, Q, Q, F], valid bool[B, R] or None (all) -> mask logits
        f32[B, R, M, M, C], M = 2Q; a norm counts the valid rows only."""
        batch, rois = features.shape[:2]
        x = features.reshape((batch * rois,) + features.shape[2:])
        mask = None if valid is None else valid.reshape(-1)
        for conv in self.convs:
            x = conv(x, mask)
        # ReLU and the 1x1 logits are pointwise: apply them before the 2x
        # interleave, which then moves C channels instead of `hidden`.
        x = jax.nn.relu(self.upsample.unshuffled(x))
        x = pixel_shuffle(self.logits(x).astype(jnp.float32))
        return x.reshape((batch, rois) + x.shape[1:])


class PoolOptions(NamedTuple):
    """`pool_rois`' multilevel ROIAlign settings (ops/roi_align.py)."""

    sampling_ratio: int
    canonical_size: float
    canonical_level: int
    implementation: str = "auto"
    aligned: bool = True
    level_eps: float = 0.0


class RoiSampling(NamedTuple):
    """`sample_rois`' matching and sampling settings."""

    num_rois: int  # R per image
    fg_fraction: float
    fg_iou: float
    bg_iou_low: float
    bg_iou_high: float
    weights: tuple[float, ...]  # box coder weights


class DetectionOptions(NamedTuple):
    """`detect`'s scoring and class-aware NMS settings."""

    weights: tuple[float, ...]  # box coder weights
    score_threshold: float
    pre_nms_top_k: int
    max_detections: int  # K
    nms_iou: float
    backend: str  # ops.nms backend
    min_size: float = 0.0


class RoiTargets(NamedTuple):
    """Sampled rois of every image and what they should predict."""

    rois: jax.Array  # f32[B, R, 4]
    is_valid: jax.Array  # bool[B, R]
    classes: jax.Array  # int32[B, R], 0 for background
    matched: jax.Array  # int32[B, R], GT index (meaningful for foreground)
    box_targets: jax.Array  # f32[B, R, 4]


def sample_rois(
    proposals: jax.Array,
    proposal_valid: jax.Array,
    gt_boxes: jax.Array,
    gt_classes: jax.Array,
    gt_valid: jax.Array,
    key: jax.Array,
    *,
    num_rois: int,
    fg_fraction: float,
    fg_iou: float,
    bg_iou_low: float,
    bg_iou_high: float,
    weights: Sequence[float],
) -> RoiTargets:
    """Appends GT to proposals [B, P, 4], matches and samples R per image."""
    keys = jax.random.split(key, proposals.shape[0])

    def one_image(boxes, valid, gt, classes, is_gt, image_key):
        candidates = jnp.concatenate([boxes, gt], axis=0)  # [P + G, 4]
        candidate_valid = jnp.concatenate([valid, is_gt], axis=0)
        iou = box_ops.pairwise_iou(candidates, gt)
        labels, matched = matcher.match(
            iou,
            is_gt,
            fg_iou=fg_iou,
            bg_iou_low=bg_iou_low,
            bg_iou_high=bg_iou_high,
        )
        labels = jnp.where(candidate_valid, labels, matcher.IGNORED)
        indices, is_fg, is_valid = sampler.sample_balanced(
            labels,
            image_key,
            num_samples=num_rois,
            positive_fraction=fg_fraction,
        )
        rois = candidates[indices]
        roi_matched = matched[indices]
        targets = box_coder.encode(gt[roi_matched], rois, weights)
        roi_classes = jnp.where(is_fg & is_valid, classes[roi_matched], 0)
        return RoiTargets(
            rois, is_valid, roi_classes.astype(jnp.int32), roi_matched, targets
        )

    return jax.vmap(one_image)(
        proposals,
        proposal_valid,
        gt_boxes.astype(jnp.float32),
        gt_classes,
        gt_valid,
        keys,
    )


@jax.named_scope("mask_targets")
def mask_targets(
    rois: jax.Array,
    matched: jax.Array,
    gt_boxes: jax.Array,
    gt_masks: jax.Array,
    *,
    mask_size: int,
    sampling_ratio: int,
) -> jax.Array:
    """Binary targets f32[B, Rm, M, M] of rois [B, Rm, 4] from GT crops.

    Every crop is zero-padded by one pixel on each side, so samples outside
    its GT box read 0 (bilinear inside, blending to 0 across the box edge),
    as TF Model Garden's crop-and-resize with extrapolation value 0; without
    the padding, ROIAlign's border rule would copy the crop's edge up to half
    a crop pixel outside the box.

    Args:
      rois: f32[B, Rm, 4] in input pixels.
      matched: int32[B, Rm] the GT index of each roi.
      gt_boxes: f32[B, G, 4] GT boxes in input pixels.
      gt_masks: uint8[B, G, S, S] GT masks, each cropped to its box.
      mask_size: M.
      sampling_ratio: ROIAlign samples per bin and axis.
    """
    batch, num_gt, size = gt_masks.shape[:3]
    gt = jnp.take_along_axis(
        gt_boxes.astype(jnp.float32), matched[..., None], axis=1
    )  # [B, Rm, 4]
    origin = jnp.concatenate([gt[..., :2], gt[..., :2]], axis=-1)
    gt_w, gt_h = box_ops.widths_heights(gt)
    scale = size / jnp.maximum(jnp.stack([gt_w, gt_h, gt_w, gt_h], -1), 1e-6)
    # Crop pixels, shifted by the one-pixel zero border.
    boxes_in_mask = (rois - origin) * scale + 1.0
    padded = size + 2
    masks = jnp.pad(
        gt_masks.astype(jnp.float32), ((0, 0), (0, 0), (1, 1), (1, 1))
    )  # [B, G, S+2, S+2]
    flat = masks.reshape(batch, num_gt * padded * padded, 1)
    sizes = jnp.full(matched.shape, padded, jnp.int32)
    resampled = roi_align.roi_align(
        flat,
        boxes_in_mask,
        matched * (padded * padded),
        sizes,
        sizes,
        output_size=mask_size,
        sampling_ratio=sampling_ratio,
    )
    return (resampled[..., 0] >= 0.5).astype(jnp.float32)


class Detections(NamedTuple):
    """Fixed-size detections; empty slots have class 0, score 0, box 0."""

    boxes: jax.Array  # f32[B, K, 4]
    scores: jax.Array  # f32[B, K]
    classes: jax.Array  # int32[B, K]
    num_detections: jax.Array  # int32[B]


def detect(
    class_logits: jax.Array,
    deltas: jax.Array,
    proposals: jax.Array,
    proposal_valid: jax.Array,
    *,
    image_size: tuple[int, int],
    weights: Sequence[float],
    score_threshold: float,
    pre_nms_top_k: int,
    max_detections: int,
    nms_iou: float,
    backend: str,
    min_size: float = 0.0,
    image_sizes: jax.Array | None = None,
) -> Detections:
    """Class-aware detections from the box head outputs on the proposals.

    Boxes clip to each image's own size; a box left no wider or taller
    than min_size (so every empty one) is never a detection.

    Args:
      class_logits: f32[B, P, C + 1]; deltas: f32[B, P, C, 4].
      proposals: f32[B, P, 4]; proposal_valid: bool[B, P].
      image_size: (height, width) of the input (the canvas).
      weights: ROI box coder weights.
      score_threshold, pre_nms_top_k, max_detections, nms_iou, backend: see
        config.model.detection.
      min_size: boxes not wider and taller than this (after clipping) are
        dropped (detection.min_box_size).
      image_sizes: [B, 2] each image's (height, width) on the canvas, the
        boxes clip to (None: the whole canvas).
    """
    batch, num_proposals, num_classes = deltas.shape[:3]
    scores = jax.nn.softmax(class_logits, axis=-1)[..., 1:]  # [B, P, C]
    boxes = box_coder.decode(deltas, proposals[:, :, None, :], weights)
    if image_sizes is None:
        image_sizes = jnp.broadcast_to(jnp.asarray(image_size), (batch, 2))
    limits = image_sizes.astype(jnp.float32)[:, None, None, :]  # [B,1,1,2]
    boxes = box_ops.clip_boxes(boxes, limits[..., 0], limits[..., 1])
    usable = proposal_valid[..., None] & box_ops.is_larger_than(boxes, min_size)
    scores = jnp.where(usable, scores, -1.0).reshape(batch, -1)
    top_k = min(pre_nms_top_k, num_proposals * num_classes)
    candidate_scores, candidates = jax.lax.top_k(scores, top_k)  # [B, N_pre]
    candidate_boxes = jnp.take_along_axis(
        boxes.reshape(batch, -1, 4), candidates[..., None], axis=1
    )
    candidate_classes = (candidates % num_classes + 1).astype(jnp.int32)
    kept, num_detections = nms(
        candidate_boxes,
        candidate_scores,
        classes=candidate_classes,
        score_threshold=score_threshold,
        max_output_size=max_detections,
        iou_threshold=nms_iou,
        backend=backend,
    )  # [B, K]
    found = kept >= 0
    safe = jnp.maximum(kept, 0)
    return Detections(
        boxes=jnp.where(
            found[..., None],
            jnp.take_along_axis(candidate_boxes, safe[..., None], axis=1),
            0.0,
        ),
        scores=jnp.where(
            found, jnp.take_along_axis(candidate_scores, safe, axis=1), 0.0
        ),
        classes=jnp.where(
            found, jnp.take_along_axis(candidate_classes, safe, axis=1), 0
        ),
        num_detections=num_detections,
    )


def class_mask_logits(mask_logits: jax.Array, classes: jax.Array) -> jax.Array:
    """The mask logits [B, R, M, M] of each roi's class 1..C (any for 0)."""
    index = jnp.maximum(classes - 1, 0)[..., None, None, None]
    return jnp.take_along_axis(mask_logits, index, axis=-1)[..., 0]


def pool_rois(
    pyramid: roi_align.FlatPyramid,
    boxes: jax.Array,
    *,
    output_size: int,
    sampling_ratio: int,
    canonical_size: float,
    canonical_level: int,
    implementation: str = "auto",
    aligned: bool = True,
    level_eps: float = 0.0,
) -> jax.Array:
    """Multilevel ROIAlign of boxes [B, R, 4]; gradients reach features."""
    with jax.named_scope("roi_align"):
        return roi_align.multilevel_roi_align(
            pyramid,
            jax.lax.stop_gradient(boxes),
            output_size=output_size,
            sampling_ratio=sampling_ratio,
            canonical_size=canonical_size,
            canonical_level=canonical_level,
            implementation=implementation,
            aligned=aligned,
            level_eps=level_eps,
        )
