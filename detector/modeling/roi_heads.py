"""The RoI heads: roi sampling and targets, the box head and its losses,
detections, and the mask head on them (box_head.py, mask_head.py).

Shapes: B batch, P proposals, G GT boxes, R sampled rois, Rm mask rois,
C classes, F channels, Q pool size, N_pre pre-NMS candidates, K kept
detections, M mask size.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from detector.modeling import (
    box_coder,
    losses,
    mask_head,
    mask_targets,
    matcher,
    sampler,
)
from ops import box_ops, roi_align
from ops.nms import nms


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
    sampling: RoiSampling,
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
            fg_iou=sampling.fg_iou,
            bg_iou_low=sampling.bg_iou_low,
            bg_iou_high=sampling.bg_iou_high,
        )
        labels = jnp.where(candidate_valid, labels, matcher.IGNORED)
        indices, is_fg, is_valid = sampler.sample_balanced(
            labels,
            image_key,
            num_samples=sampling.num_rois,
            positive_fraction=sampling.fg_fraction,
        )
        rois = candidates[indices]
        roi_matched = matched[indices]
        targets = box_coder.encode(gt[roi_matched], rois, sampling.weights)
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
    options: DetectionOptions,
    image_sizes: jax.Array | None = None,
) -> Detections:
    """Class-aware detections from the box head outputs on the proposals.

    Boxes clip to each image's own size; a box left no wider or taller
    than min_size (so every empty one) is never a detection.

    Args:
      class_logits: f32[B, P, C + 1]; deltas: f32[B, P, C, 4].
      proposals: f32[B, P, 4]; proposal_valid: bool[B, P].
      image_size: (height, width) of the input (the canvas).
      options: ROI box coder weights, scoring and NMS (see
        config.model.detection); boxes not wider and taller than min_size
        (after clipping) are dropped.
      image_sizes: [B, 2] each image's (height, width) on the canvas, the
        boxes clip to (None: the whole canvas).
    """
    batch, num_proposals, num_classes = deltas.shape[:3]
    scores = jax.nn.softmax(class_logits, axis=-1)[..., 1:]  # [B, P, C]
    boxes = box_coder.decode(deltas, proposals[:, :, None, :], options.weights)
    if image_sizes is None:
        image_sizes = jnp.broadcast_to(jnp.asarray(image_size), (batch, 2))
    limits = image_sizes.astype(jnp.float32)[:, None, None, :]  # [B,1,1,2]
    boxes = box_ops.clip_boxes(boxes, limits[..., 0], limits[..., 1])
    usable = proposal_valid[..., None] & box_ops.is_larger_than(
        boxes, options.min_size
    )
    scores = jnp.where(usable, scores, -1.0).reshape(batch, -1)
    top_k = min(options.pre_nms_top_k, num_proposals * num_classes)
    candidate_scores, candidates = jax.lax.top_k(scores, top_k)  # [B, N_pre]
    candidate_boxes = jnp.take_along_axis(
        boxes.reshape(batch, -1, 4), candidates[..., None], axis=1
    )
    candidate_classes = (candidates % num_classes + 1).astype(jnp.int32)
    kept, num_detections = nms(
        candidate_boxes,
        candidate_scores,
        classes=candidate_classes,
        score_threshold=options.score_threshold,
        max_output_size=options.max_detections,
        iou_threshold=options.nms_iou,
        backend=options.backend,
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


def pool_rois(
    pyramid: roi_align.FlatPyramid,
    boxes: jax.Array,
    *,
    output_size: int,
    pooling: PoolOptions,
) -> jax.Array:
    """Multilevel ROIAlign of boxes [B, R, 4]; gradients reach features."""
    with jax.named_scope("roi_align"):
        return roi_align.multilevel_roi_align(
            pyramid,
            jax.lax.stop_gradient(boxes),
            output_size=output_size,
            **pooling._asdict(),
        )


def num_mask_rois(sampling: RoiSampling, max_mask_rois: int) -> int:
    """Rm: at most max_mask_rois, and no more than the foreground slots."""
    return min(max_mask_rois, int(sampling.num_rois * sampling.fg_fraction))


class RoIHeads(nnx.Module):
    """The roi sampler, the box head and the mask head on pooled rois:
    their targets and losses in training, detections and their masks."""

    def __init__(
        self,
        box_head: nnx.Module,
        mask_head: nnx.Module,
        *,
        sampling: RoiSampling,
        pooling: PoolOptions,
        detection: DetectionOptions,
        box_beta: float,
        num_mask_rois: int,
        mask_target: str = "crop",
    ):
        """Args:
        box_head: pooled [B, R, Q, Q, F] (and valid rois or None, what a
          norm in it counts; box_head.py) -> class logits, class deltas;
          its `pool_size` is Q.
        mask_head: pooled [B, R, Q, Q, F] (and valid rois or None) ->
          mask logits [B, R, M, M, C]; its `pool_size` is Q, `mask_size` M.
        sampling: roi matching and sampling.
        pooling: multilevel ROIAlign settings (sampling_ratio also
          resamples the GT masks).
        detection: scoring and class-aware NMS of detections.
        box_beta: Huber delta of the box loss (0: L1).
        num_mask_rois: Rm, the first sampled rois (foreground first) the
          mask head trains on (`num_mask_rois`).
        mask_target: a name of mask_targets.RULES: what the rois learn
          from the GT masks (crops of their boxes, or the canvas).
        """
        self.box_head = box_head
        self.mask_head = mask_head
        self.sampling = sampling
        self.pooling = pooling
        self.detection = detection
        self.box_beta = box_beta
        self.num_mask_rois = num_mask_rois
        self.mask_target = mask_target

    def sample(
        self,
        proposals: jax.Array,
        proposal_valid: jax.Array,
        batch: dict[str, jax.Array],
        key: jax.Array,
    ) -> RoiTargets:
        """R rois per image of proposals [B, P, 4] and the GT of `batch`
        (boxes, classes, valid), each image sampled with its own key."""
        with jax.named_scope("roi_sampler"):
            return sample_rois(
                proposals,
                proposal_valid,
                batch["boxes"],
                batch["classes"].astype(jnp.int32),
                batch["valid"].astype(bool),
                key,
                sampling=self.sampling,
            )

    def pool(
        self, pyramid: roi_align.FlatPyramid, boxes: jax.Array, head: nnx.Module
    ) -> jax.Array:
        """Features [B, R, Q, Q, F] of boxes [B, R, 4] at `head`'s Q."""
        return pool_rois(
            pyramid, boxes, output_size=head.pool_size, pooling=self.pooling
        )

    def losses(
        self,
        pyramid: roi_align.FlatPyramid,
        targets: RoiTargets,
        batch: dict[str, jax.Array],
    ) -> dict[str, jax.Array]:
        """The box head's losses ('cls', 'box') on the sampled rois and the
        mask head's ('mask') on their first Rm."""
        terms = self.box_losses(
            self.pool(pyramid, targets.rois, self.box_head), targets
        )
        mask_rois = targets.rois[:, : self.num_mask_rois]
        terms["mask"] = self.mask_loss(
            self.pool(pyramid, mask_rois, self.mask_head), targets, batch
        )
        return terms

    def box_losses(
        self, pooled: jax.Array, targets: RoiTargets
    ) -> dict[str, jax.Array]:
        """Box head and its losses ('cls', 'box') of the pooled rois."""
        class_logits, box_deltas = self.box_head(pooled, targets.is_valid)
        return losses.box_head_losses(
            class_logits,
            box_deltas,
            targets.classes,
            targets.box_targets,
            targets.is_valid,
            beta=self.box_beta,
        )

    def mask_loss(
        self,
        pooled: jax.Array,
        targets: RoiTargets,
        batch: dict[str, jax.Array],
    ) -> jax.Array:
        """Mask targets, head and loss of the first Rm sampled rois,
        pooled [B, Rm, Q, Q, F]; GT of `batch` (boxes, masks, mask_valid,
        image_size)."""
        count = self.num_mask_rois
        rois = targets.rois[:, :count]
        matched = targets.matched[:, :count]
        classes = targets.classes[:, :count]
        has_mask = jnp.take_along_axis(
            batch["mask_valid"].astype(bool), matched, axis=1
        )
        is_valid = targets.is_valid[:, :count] & (classes > 0) & has_mask
        mask_logits = self.mask_head(pooled, is_valid)
        targets_of_rois = mask_targets.RULES[self.mask_target](
            rois,
            matched,
            batch["boxes"],
            batch["masks"],
            batch.get("image_size"),
            mask_size=self.mask_head.mask_size,
            sampling_ratio=self.pooling.sampling_ratio,
        )
        return losses.mask_loss(
            mask_head.class_mask_logits(mask_logits, classes),
            targets_of_rois,
            is_valid,
        )

    def detect(
        self,
        pyramid: roi_align.FlatPyramid,
        proposals: jax.Array,
        proposal_valid: jax.Array,
        canvas: tuple[int, int],
        image_sizes: jax.Array | None = None,
    ) -> Detections:
        """Detections of proposals [B, P, 4] on the (H, W) canvas."""
        class_logits, box_deltas = self.box_head(
            self.pool(pyramid, proposals, self.box_head)
        )
        with jax.named_scope("detection"):
            return detect(
                class_logits,
                box_deltas,
                proposals,
                proposal_valid,
                image_size=canvas,
                options=self.detection,
                image_sizes=image_sizes,
            )

    def masks(
        self, pyramid: roi_align.FlatPyramid, detections: Detections
    ) -> jax.Array:
        """Masks f32[B, K, M, M] of the detections: probabilities of the
        detected class, 0 in empty slots."""
        mask_logits = self.mask_head(
            self.pool(pyramid, detections.boxes, self.mask_head)
        )
        masks = jax.nn.sigmoid(
            mask_head.class_mask_logits(mask_logits, detections.classes).astype(
                jnp.float32
            )
        )
        return jnp.where((detections.classes > 0)[..., None, None], masks, 0.0)
