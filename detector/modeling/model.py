"""Mask R-CNN in Flax NNX: backbone -> FPN -> RPN -> ROI heads.

    model = MaskRCNN(config, rngs=nnx.Rngs(config.seed))
    terms = model.losses(batch, key)  # rpn_cls, rpn_box, cls, box, mask, total
    model.eval(); outputs = model.predict(images)

Both methods are pure functions of the module state and their inputs with
static shapes, so each jits into one program (the NMS backends are static
config fields: switching one recompiles and changes nothing else). No host
callback is added here; with the 'while_loop' or 'pallas' NMS backend the
whole train step and predict stay on the device.

`model.dtype` may be 'auto': float32 on CPU, bfloat16 on GPU and TPU
(detector.config.resolve_dtype).

Shapes (the letters of docs/architecture.md where they exist): B batch,
H, W image size, G max GT instances (data.max_instances), S GT mask crop
size (data.gt_mask_size), L levels, P proposals per image, R sampled rois,
Rm mask rois (the first Rm of R), C classes, M predicted mask size (28),
K kept detections (detection.max_detections).
"""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from detector import config as config_lib
from detector.modeling import anchors as anchors_lib
from detector.modeling import backbone, fpn, losses, roi_heads, rpn
from ops import roi_align

# Params whose shapes follow data.num_classes (path prefixes).
CLASS_DEPENDENT = ("box_head/classes", "box_head/deltas", "mask_head/logits")


class MaskRCNN(nnx.Module):
    """Mask R-CNN with a backbone-FPN; see the module docstring."""

    def __init__(self, config: ml_collections.ConfigDict, *, rngs: nnx.Rngs):
        config_lib.validate(config)
        model = config.model
        self.cfg = ml_collections.FrozenConfigDict(model)
        self.image_size = tuple(int(s) for s in config.data.image_size)
        self.num_classes = int(config.data.num_classes)
        dtype = config_lib.resolve_dtype(model.dtype)
        norm_kwargs = dict(
            norm=model.norm,
            groups=model.group_norm_groups,
            dtype=dtype,
            rngs=rngs,
        )
        self.backbone, channels = backbone.build(model, dtype=dtype, rngs=rngs)
        self.fpn = fpn.FPN(
            channels,
            channels=model.fpn_channels,
            min_level=model.min_level,
            max_level=model.max_level,
            **norm_kwargs,
        )
        self.rpn_head = rpn.RPNHead(
            model.fpn_channels, len(model.aspect_ratios), dtype=dtype, rngs=rngs
        )
        roi = model.roi
        self.box_head = roi_heads.BoxHead(
            roi.pool_size**2 * model.fpn_channels,
            roi.box_head_dim,
            self.num_classes,
            dtype=dtype,
            rngs=rngs,
        )
        self.mask_head = roi_heads.MaskHead(
            model.fpn_channels,
            roi.mask_head_dim,
            roi.mask_head_convs,
            self.num_classes,
            norm=fpn.head_norm(model.norm),
            groups=model.group_norm_groups,
            dtype=dtype,
            rngs=rngs,
        )

    # ----------------------------------------------------------- pieces
    def _anchors(self) -> list[np.ndarray]:
        cfg = self.cfg
        return anchors_lib.pyramid_anchors(
            self.image_size,
            cfg.min_level,
            cfg.max_level,
            cfg.anchor_scale,
            tuple(cfg.aspect_ratios),
            offset=cfg.anchor_offset,
            round_sizes=cfg.anchor_round,
        )

    def _features(self, images: jax.Array) -> list[jax.Array]:
        with jax.named_scope("backbone"):
            features = self.backbone(images)
        with jax.named_scope("fpn"):
            return self.fpn(features)

    def _roi_pyramid(self, features: list[jax.Array]) -> roi_align.FlatPyramid:
        """The levels rois pool from: min_level..the backbone's top level."""
        return roi_align.flatten_pyramid(
            features[: self.fpn.top_level - self.cfg.min_level + 1],
            self.cfg.min_level,
        )

    def _pool(
        self, pyramid: roi_align.FlatPyramid, boxes: jax.Array, output_size: int
    ) -> jax.Array:
        roi = self.cfg.roi
        return roi_heads.pool_rois(
            pyramid,
            boxes,
            output_size=output_size,
            sampling_ratio=roi.sampling_ratio,
            canonical_size=roi.canonical_size,
            canonical_level=roi.canonical_level,
            implementation=roi.align_implementation,
            aligned=roi.aligned,
            level_eps=roi.level_eps,
        )

    def _proposals(self, logits, deltas, *, training: bool):
        rpn_cfg = self.cfg.rpn
        with jax.named_scope("rpn"):
            return rpn.generate_proposals(
                logits,
                deltas,
                self._anchors(),
                pre_nms_top_k=(
                    rpn_cfg.pre_nms_top_k_train
                    if training
                    else rpn_cfg.pre_nms_top_k_test
                ),
                post_nms_top_k=(
                    rpn_cfg.post_nms_top_k_train
                    if training
                    else rpn_cfg.post_nms_top_k_test
                ),
                nms_iou=rpn_cfg.nms_iou,
                min_size=rpn_cfg.min_box_size,
                image_size=self.image_size,
                weights=rpn_cfg.box_weights,
                backend=rpn_cfg.nms_backend,
                approx_recall=rpn_cfg.approx_top_k_recall or None,
            )

    def num_mask_rois(self) -> int:
        """Rm: the first sampled rois (foreground first) the mask head sees."""
        roi = self.cfg.roi
        return min(roi.max_mask_rois, int(roi.num_rois * roi.fg_fraction))

    # ----------------------------------------------------------- train
    def _rpn_losses(self, logits, deltas, batch, key):
        rpn_cfg = self.cfg.rpn
        with jax.named_scope("rpn_targets"):
            samples = rpn.rpn_targets(
                np.concatenate(self._anchors()),
                batch["boxes"],
                batch["valid"].astype(bool),
                key,
                fg_iou=rpn_cfg.fg_iou,
                bg_iou=rpn_cfg.bg_iou,
                num_samples=rpn_cfg.num_samples,
                positive_fraction=rpn_cfg.positive_fraction,
                weights=rpn_cfg.box_weights,
            )
        sampled_logits, sampled_deltas = rpn.gather_samples(
            logits, deltas, samples.indices
        )
        return losses.rpn_losses(
            sampled_logits,
            sampled_deltas,
            samples.is_positive,
            samples.is_valid,
            samples.box_targets,
            beta=self.cfg.loss.rpn_box_beta,
        )

    def _sample_rois(self, proposals, proposal_valid, batch, key):
        roi = self.cfg.roi
        with jax.named_scope("roi_sampler"):
            return roi_heads.sample_rois(
                proposals,
                proposal_valid,
                batch["boxes"],
                batch["classes"].astype(jnp.int32),
                batch["valid"].astype(bool),
                key,
                num_rois=roi.num_rois,
                fg_fraction=roi.fg_fraction,
                fg_iou=roi.fg_iou,
                bg_iou_low=roi.bg_iou_low,
                bg_iou_high=roi.bg_iou_high,
                weights=roi.box_weights,
            )

    def _box_losses_of_pooled(
        self, pooled, targets: roi_heads.RoiTargets
    ) -> dict[str, jax.Array]:
        """Box head and its losses ('cls', 'box') of the rois, pooled [B, R]."""
        class_logits, box_deltas = self.box_head(pooled)
        return losses.box_head_losses(
            class_logits,
            box_deltas,
            targets.classes,
            targets.box_targets,
            targets.is_valid,
            beta=self.cfg.loss.box_beta,
        )

    def _mask_loss(self, pyramid, targets: roi_heads.RoiTargets, batch):
        rois = targets.rois[:, : self.num_mask_rois()]
        return self._mask_loss_of_pooled(
            self._pool(pyramid, rois, self.cfg.roi.mask_pool_size),
            targets,
            batch,
        )

    def _mask_loss_of_pooled(
        self, pooled, targets: roi_heads.RoiTargets, batch
    ):
        """Mask targets, head and loss of the first Rm rois, pooled [B, Rm]."""
        count = self.num_mask_rois()
        rois = targets.rois[:, :count]
        matched = targets.matched[:, :count]
        classes = targets.classes[:, :count]
        has_mask = jnp.take_along_axis(
            batch["mask_valid"].astype(bool), matched, axis=1
        )
        is_valid = targets.is_valid[:, :count] & (classes > 0) & has_mask
        mask_logits = self.mask_head(pooled)
        mask_targets = roi_heads.mask_targets(
            rois,
            matched,
            batch["boxes"],
            batch["masks"],
            mask_size=self.cfg.roi.mask_size,
            sampling_ratio=self.cfg.roi.sampling_ratio,
        )
        return losses.mask_loss(
            roi_heads.class_mask_logits(mask_logits, classes),
            mask_targets,
            is_valid,
        )

    def losses(
        self, batch: dict[str, jax.Array], key: jax.Array
    ) -> dict[str, jax.Array]:
        """Training losses (float32 scalars) of a batch (module docstring).

        Args:
          batch: image f32[B, H, W, 3], boxes f32[B, G, 4], classes
            int32[B, G], valid bool[B, G], masks uint8[B, G, S, S],
            mask_valid bool[B, G] (other keys are ignored).
          key: PRNG key of the samplers, split per image inside.

        Returns:
          {rpn_cls, rpn_box, cls, box, mask, total}.
        """
        cfg = self.cfg
        batch = dict(batch, boxes=batch["boxes"].astype(jnp.float32))
        rpn_key, roi_key = jax.random.split(key)
        features = self._features(batch["image"])
        logits, deltas = self.rpn_head(features)
        terms = self._rpn_losses(logits, deltas, batch, rpn_key)
        proposals, proposal_valid = self._proposals(
            logits, deltas, training=True
        )
        targets = self._sample_rois(proposals, proposal_valid, batch, roi_key)
        pyramid = self._roi_pyramid(features)
        terms.update(
            self._box_losses_of_pooled(
                self._pool(pyramid, targets.rois, cfg.roi.pool_size), targets
            )
        )
        terms["mask"] = self._mask_loss(pyramid, targets, batch)
        weights = {
            name: cfg.loss[f"{name}_weight"] for name in losses.TERM_NAMES
        }
        return losses.total_loss(terms, weights)

    # --------------------------------------------------------- predict
    def proposals(
        self, images: jax.Array, *, training: bool = False
    ) -> tuple[jax.Array, jax.Array]:
        """RPN proposals: boxes f32[B, P, 4], valid bool[B, P].

        P is rpn.post_nms_top_k_test, or with `training` the train-mode
        proposals (pre_nms_top_k_train, post_nms_top_k_train) the roi
        sampler sees.
        """
        features = self._features(images)
        return self._proposals(*self.rpn_head(features), training=training)

    def _detect(self, pyramid, proposals, proposal_valid):
        cfg = self.cfg
        class_logits, box_deltas = self.box_head(
            self._pool(pyramid, proposals, cfg.roi.pool_size)
        )
        det_cfg = cfg.detection
        with jax.named_scope("detection"):
            return roi_heads.detect(
                class_logits,
                box_deltas,
                proposals,
                proposal_valid,
                image_size=self.image_size,
                weights=cfg.roi.box_weights,
                score_threshold=det_cfg.score_threshold,
                pre_nms_top_k=det_cfg.pre_nms_top_k,
                max_detections=det_cfg.max_detections,
                nms_iou=det_cfg.nms_iou,
                backend=det_cfg.nms_backend,
                min_size=det_cfg.min_box_size,
            )

    def predict(self, images: jax.Array) -> dict[str, jax.Array]:
        """Detections of images f32[B, H, W, 3] (module docstring).

        Returns:
          boxes f32[B, K, 4] (input pixels), scores f32[B, K], classes
          int32[B, K] (0: empty slot), masks f32[B, K, M, M] (probabilities
          of the detected class), num_detections int32[B].
        """
        features = self._features(images)
        proposals, proposal_valid = self._proposals(
            *self.rpn_head(features), training=False
        )
        pyramid = self._roi_pyramid(features)
        detections = self._detect(pyramid, proposals, proposal_valid)
        mask_logits = self.mask_head(
            self._pool(pyramid, detections.boxes, self.cfg.roi.mask_pool_size)
        )
        masks = jax.nn.sigmoid(
            roi_heads.class_mask_logits(mask_logits, detections.classes).astype(
                jnp.float32
            )
        )
        masks = jnp.where((detections.classes > 0)[..., None, None], masks, 0.0)
        return {
            "boxes": detections.boxes,
            "scores": detections.scores,
            "classes": detections.classes,
            "masks": masks,
            "num_detections": detections.num_detections,
        }
