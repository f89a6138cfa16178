"""Mask R-CNN in Flax NNX: backbone -> FPN -> RPN -> ROI heads.

    model = MaskRCNN(backbone=..., fpn=..., rpn_head=..., ...)  # its parts
    terms = model.losses(batch, key)  # rpn_cls, rpn_box, cls, box, mask, total
    model.eval(); outputs = model.predict(images, image_sizes)

The model is built from its parts and their settings (constructor
arguments only; `detector.build.model.build_model` maps a config onto
them). Both methods are pure functions of the module state and their
inputs with static shapes, so each jits into one program (the NMS backends
are static settings: switching one recompiles and changes nothing else). No
host callback is added here; with the 'while_loop' or 'pallas' NMS backend
the whole train step and predict stay on the device.

The input is a canvas: each image sits at its top left, `image_sizes`
(int32[B, 2], the batch's 'image_size') its own (height, width). Anchors
follow the canvas's shape; proposals and detections clip to each image's
size, and anchors past it rounded up to the backbone's stride take no part
in the proposals (`rpn.generate_proposals`), every convolution sees
zeros past that extent (`extents`) and ROIAlign samples clamp to it
(`roi_align.FlatPyramid.extents`), as if each image had been run alone on
a tensor padded to a multiple of 32, as torchvision pads it.

Shapes (the letters of docs/architecture.md where they exist): B batch,
H, W image size, G max GT instances (data.max_instances), S GT mask crop
size (data.gt_mask_size), L levels, P proposals per image, R sampled rois,
Rm mask rois (the first Rm of R), C classes, M predicted mask size (28),
K kept detections (detection.max_detections).
"""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from detector.modeling import anchors as anchors_lib
from detector.modeling import extents as extents_lib
from detector.modeling import fpn as fpn_lib
from detector.modeling import losses, roi_heads, rpn
from ops import roi_align

# Params whose shapes follow the number of classes (path prefixes).
CLASS_DEPENDENT = ("box_head/classes", "box_head/deltas", "mask_head/logits")


class MaskRCNN(nnx.Module):
    """Mask R-CNN with a backbone-FPN; see the module docstring."""

    def __init__(
        self,
        *,
        backbone: nnx.Module,
        fpn: fpn_lib.FPN,
        rpn_head: rpn.RPNHead,
        box_head: nnx.Module,
        mask_head: roi_heads.MaskHead,
        image_size: tuple[int, int],
        num_classes: int,
        anchors: anchors_lib.AnchorSpec,
        train_proposals: rpn.ProposalOptions,
        test_proposals: rpn.ProposalOptions,
        anchor_sampling: rpn.AnchorSampling,
        roi_sampling: roi_heads.RoiSampling,
        pooling: roi_heads.PoolOptions,
        box_pool_size: int,
        mask_pool_size: int,
        mask_size: int,
        max_mask_rois: int,
        detection: roi_heads.DetectionOptions,
        loss: losses.LossOptions,
    ):
        """Args:
        backbone: images [B, H, W, 3] -> {level: features}.
        fpn: backbone levels -> P_min..P_max.
        rpn_head, box_head, mask_head: the heads; the box and mask heads
          take (pooled, valid rois or None), the valid rows being what a
          norm in them counts (box_heads.py).
        image_size: (H, W) of the input images.
        num_classes: C, foreground classes.
        anchors: the anchor pyramid.
        train_proposals, test_proposals: proposal settings per mode.
        anchor_sampling: RPN anchor matching and sampling.
        roi_sampling: ROI matching and sampling.
        pooling: multilevel ROIAlign settings.
        box_pool_size, mask_pool_size: ROIAlign output sides of the heads.
        mask_size: M, side of the mask targets.
        max_mask_rois: foreground rois per image the mask loss sees at most.
        detection: scoring and class-aware NMS of detections.
        loss: box loss deltas and term weights.
        """
        self.backbone = backbone
        self.fpn = fpn
        self.rpn_head = rpn_head
        self.box_head = box_head
        self.mask_head = mask_head
        self.image_size = tuple(int(s) for s in image_size)
        self.num_classes = int(num_classes)
        self.anchors = anchors
        self.train_proposals = train_proposals
        self.test_proposals = test_proposals
        self.anchor_sampling = anchor_sampling
        self.roi_sampling = roi_sampling
        self.pooling = pooling
        self.box_pool_size = box_pool_size
        self.mask_pool_size = mask_pool_size
        self.mask_size = mask_size
        self.max_mask_rois = max_mask_rois
        self.detection = detection
        self.loss = loss

    # ----------------------------------------------------------- pieces
    def _anchors(self, canvas: tuple[int, int]) -> list[np.ndarray]:
        return self.anchors.pyramid(canvas)

    def _features(self, images: jax.Array) -> list[jax.Array]:
        with jax.named_scope("backbone"):
            features = self.backbone(images)
        with jax.named_scope("fpn"):
            return self.fpn(features)

    def _extents(self, image_sizes) -> jax.Array | None:
        """int32[B, 2] each image's size rounded up to the backbone's
        stride (torchvision's padded tensor); None without sizes."""
        if image_sizes is None:
            return None
        return rpn.padded_extents(image_sizes, 2**self.fpn.top_level)

    def _zero_outside(self, images: jax.Array, image_sizes):
        """The block in which convolutions see zeros past each image's
        extent (`detector.modeling.extents`); no-op without sizes."""
        return extents_lib.zero_outside(
            self._extents(image_sizes), _canvas(images)
        )

    def _roi_pyramid(
        self, features: list[jax.Array], image_sizes=None
    ) -> roi_align.FlatPyramid:
        """The levels rois pool from: min_level..the backbone's top level;
        a roi samples only its image's extent (roi_align's `extents`)."""
        return roi_align.flatten_pyramid(
            features[: self.fpn.top_level - self.fpn.min_level + 1],
            self.fpn.min_level,
            self._extents(image_sizes),
        )

    def _pool(
        self, pyramid: roi_align.FlatPyramid, boxes: jax.Array, output_size: int
    ) -> jax.Array:
        return roi_heads.pool_rois(
            pyramid, boxes, output_size=output_size, **self.pooling._asdict()
        )

    def _proposals(self, logits, deltas, canvas, image_sizes, *, training):
        options = self.train_proposals if training else self.test_proposals
        with jax.named_scope("rpn"):
            return rpn.generate_proposals(
                logits,
                deltas,
                self._anchors(canvas),
                image_size=canvas,
                image_sizes=image_sizes,
                cell_origins=self.anchors.cell_origins(canvas),
                size_divisor=2**self.fpn.top_level,
                **options._asdict(),
            )

    def num_mask_rois(self) -> int:
        """Rm: the first sampled rois (foreground first) the mask head sees."""
        sampling = self.roi_sampling
        return min(
            self.max_mask_rois, int(sampling.num_rois * sampling.fg_fraction)
        )

    # ----------------------------------------------------------- train
    def _rpn_losses(self, logits, deltas, batch, key):
        with jax.named_scope("rpn_targets"):
            samples = rpn.rpn_targets(
                np.concatenate(self._anchors(_canvas(batch["image"]))),
                batch["boxes"],
                batch["valid"].astype(bool),
                key,
                **self.anchor_sampling._asdict(),
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
            beta=self.loss.rpn_box_beta,
        )

    def _sample_rois(self, proposals, proposal_valid, batch, key):
        with jax.named_scope("roi_sampler"):
            return roi_heads.sample_rois(
                proposals,
                proposal_valid,
                batch["boxes"],
                batch["classes"].astype(jnp.int32),
                batch["valid"].astype(bool),
                key,
                **self.roi_sampling._asdict(),
            )

    def _box_losses_of_pooled(
        self, pooled, targets: roi_heads.RoiTargets
    ) -> dict[str, jax.Array]:
        """Box head and its losses ('cls', 'box') of the rois, pooled [B, R]."""
        class_logits, box_deltas = self.box_head(pooled, targets.is_valid)
        return losses.box_head_losses(
            class_logits,
            box_deltas,
            targets.classes,
            targets.box_targets,
            targets.is_valid,
            beta=self.loss.box_beta,
        )

    def _mask_loss(self, pyramid, targets: roi_heads.RoiTargets, batch):
        rois = targets.rois[:, : self.num_mask_rois()]
        return self._mask_loss_of_pooled(
            self._pool(pyramid, rois, self.mask_pool_size),
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
        mask_logits = self.mask_head(pooled, is_valid)
        mask_targets = roi_heads.mask_targets(
            rois,
            matched,
            batch["boxes"],
            batch["masks"],
            mask_size=self.mask_size,
            sampling_ratio=self.pooling.sampling_ratio,
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
            mask_valid bool[B, G], optionally image_size int32[B, 2]
            (each image's size; default the canvas); other keys are
            ignored.
          key: PRNG key of the samplers, split per image inside.

        Returns:
          {rpn_cls, rpn_box, cls, box, mask, total}.
        """
        batch = dict(batch, boxes=batch["boxes"].astype(jnp.float32))
        rpn_key, roi_key = jax.random.split(key)
        with self._zero_outside(batch["image"], batch.get("image_size")):
            features = self._features(batch["image"])
            logits, deltas = self.rpn_head(features)
        terms = self._rpn_losses(logits, deltas, batch, rpn_key)
        proposals, proposal_valid = self._proposals(
            logits,
            deltas,
            _canvas(batch["image"]),
            batch.get("image_size"),
            training=True,
        )
        targets = self._sample_rois(proposals, proposal_valid, batch, roi_key)
        pyramid = self._roi_pyramid(features, batch.get("image_size"))
        terms.update(
            self._box_losses_of_pooled(
                self._pool(pyramid, targets.rois, self.box_pool_size), targets
            )
        )
        terms["mask"] = self._mask_loss(pyramid, targets, batch)
        return losses.total_loss(terms, dict(self.loss.weights))

    # --------------------------------------------------------- predict
    def proposals(
        self,
        images: jax.Array,
        image_sizes: jax.Array | None = None,
        *,
        training: bool = False,
    ) -> tuple[jax.Array, jax.Array]:
        """RPN proposals: boxes f32[B, P, 4], valid bool[B, P].

        P is rpn.post_nms_top_k_test, or with `training` the train-mode
        proposals (pre_nms_top_k_train, post_nms_top_k_train) the roi
        sampler sees.
        """
        with self._zero_outside(images, image_sizes):
            features = self._features(images)
            head = self.rpn_head(features)
        return self._proposals(
            *head,
            _canvas(images),
            image_sizes,
            training=training,
        )

    def _detect(self, pyramid, proposals, proposal_valid, canvas, image_sizes):
        class_logits, box_deltas = self.box_head(
            self._pool(pyramid, proposals, self.box_pool_size)
        )
        with jax.named_scope("detection"):
            return roi_heads.detect(
                class_logits,
                box_deltas,
                proposals,
                proposal_valid,
                image_size=canvas,
                image_sizes=image_sizes,
                **self.detection._asdict(),
            )

    def predict(
        self, images: jax.Array, image_sizes: jax.Array | None = None
    ) -> dict[str, jax.Array]:
        """Detections of images f32[B, H, W, 3] (module docstring).

        Args:
          images: the normalised canvases, zero past each image.
          image_sizes: int32[B, 2] each image's (height, width); default
            the whole canvas.

        Returns:
          boxes f32[B, K, 4] (input pixels), scores f32[B, K], classes
          int32[B, K] (0: empty slot), masks f32[B, K, M, M] (probabilities
          of the detected class), num_detections int32[B].
        """
        with self._zero_outside(images, image_sizes):
            features = self._features(images)
            head = self.rpn_head(features)
        proposals, proposal_valid = self._proposals(
            *head,
            _canvas(images),
            image_sizes,
            training=False,
        )
        pyramid = self._roi_pyramid(features, image_sizes)
        detections = self._detect(
            pyramid, proposals, proposal_valid, _canvas(images), image_sizes
        )
        mask_logits = self.mask_head(
            self._pool(pyramid, detections.boxes, self.mask_pool_size)
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


def _canvas(images: jax.Array) -> tuple[int, int]:
    """(H, W) of images [B, H, W, 3] (static)."""
    return int(images.shape[1]), int(images.shape[2])
