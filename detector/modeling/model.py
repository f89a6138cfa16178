"""Mask R-CNN in Flax NNX: backbone -> FPN -> RPN -> RoI heads (box, mask).

Shapes (docs/architecture.md): B batch, H, W image size, G GT instances,
S GT crop size, P proposals, R rois, Rm mask rois, C classes, M mask size,
K detections.
"""

import jax
import jax.numpy as jnp
from flax import nnx

from detector.modeling import extents as extents_lib
from detector.modeling import fpn as fpn_lib
from detector.modeling import losses, roi_heads, rpn
from ops import roi_align

# Params whose shapes follow the number of classes (path prefixes).
CLASS_DEPENDENT = (
    "roi_heads/box_head/classes",
    "roi_heads/box_head/deltas",
    "roi_heads/mask_head/logits",
)


class MaskRCNN(nnx.Module):
    """Mask R-CNN with a backbone-FPN; see docs/model.md."""

    def __init__(
        self,
        backbone: nnx.Module,
        fpn: fpn_lib.FPN,
        rpn: rpn.RPN,
        roi_heads: roi_heads.RoIHeads,
        *,
        loss_weights: tuple[tuple[str, float], ...],
    ):
        """Args:
        backbone: images [B, H, W, 3] -> {level: features}.
        fpn: backbone levels -> P_min..P_max.
        rpn: the RPN (head, anchors, proposals, anchor sampling).
        roi_heads: roi sampling, the box and mask heads, detections.
        loss_weights: (term name, weight) for every name of
          losses.TERM_NAMES, in that order.
        """
        self.backbone = backbone
        self.fpn = fpn
        self.rpn = rpn
        self.roi_heads = roi_heads
        self.loss_weights = tuple(loss_weights)

    # ---------------------------------------------------------- features
    def features(self, images: jax.Array) -> list[jax.Array]:
        """FPN levels P_min..P_max [B, H_l, W_l, F] of images."""
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

    def _features_and_rpn(self, images: jax.Array, image_sizes):
        """FPN levels and the RPN head's outputs, zero past each image."""
        with self._zero_outside(images, image_sizes):
            features = self.features(images)
            return features, self.rpn(features)

    def roi_pyramid(
        self, features: list[jax.Array], image_sizes: jax.Array | None = None
    ) -> roi_align.FlatPyramid:
        """The levels rois pool from: min_level..the backbone's top level;
        a roi samples only its image's extent (roi_align's `extents`)."""
        return roi_align.flatten_pyramid(
            features[: self.fpn.top_level - self.fpn.min_level + 1],
            self.fpn.min_level,
            self._extents(image_sizes),
        )

    # ----------------------------------------------------------- train
    def losses(
        self, batch: dict[str, jax.Array], key: jax.Array
    ) -> dict[str, jax.Array]:
        """Training losses (float32 scalars) of a batch (docs/model.md).

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
        image_sizes = batch.get("image_size")
        features, (logits, deltas) = self._features_and_rpn(
            batch["image"], image_sizes
        )
        terms = self.rpn.losses(logits, deltas, batch, rpn_key)
        proposals, proposal_valid = self.rpn.proposals(
            logits,
            deltas,
            _canvas(batch["image"]),
            image_sizes,
            training=True,
        )
        targets = self.roi_heads.sample(
            proposals, proposal_valid, batch, roi_key
        )
        pyramid = self.roi_pyramid(features, image_sizes)
        terms.update(self.roi_heads.losses(pyramid, targets, batch))
        return losses.total_loss(terms, dict(self.loss_weights))

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
        _, head = self._features_and_rpn(images, image_sizes)
        return self.rpn.proposals(
            *head, _canvas(images), image_sizes, training=training
        )

    def predict(
        self, images: jax.Array, image_sizes: jax.Array | None = None
    ) -> dict[str, jax.Array]:
        """Detections of images f32[B, H, W, 3] (docs/model.md).

        Args:
          images: the normalised canvases, zero past each image.
          image_sizes: int32[B, 2] each image's (height, width); default
            the whole canvas.

        Returns:
          boxes f32[B, K, 4] (input pixels), scores f32[B, K], classes
          int32[B, K] (0: empty slot), masks f32[B, K, M, M] (probabilities
          of the detected class), num_detections int32[B].
        """
        features, head = self._features_and_rpn(images, image_sizes)
        proposals, proposal_valid = self.rpn.proposals(
            *head, _canvas(images), image_sizes, training=False
        )
        pyramid = self.roi_pyramid(features, image_sizes)
        detections = self.roi_heads.detect(
            pyramid, proposals, proposal_valid, _canvas(images), image_sizes
        )
        return {
            "boxes": detections.boxes,
            "scores": detections.scores,
            "classes": detections.classes,
            "masks": self.roi_heads.masks(pyramid, detections),
            "num_detections": detections.num_detections,
        }


def _canvas(images: jax.Array) -> tuple[int, int]:
    """(H, W) of images [B, H, W, 3] (static)."""
    return int(images.shape[1]), int(images.shape[2])
