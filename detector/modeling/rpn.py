"""Region proposal network: head, targets, proposals (NMS site 1), `RPN`.

Shapes: B batch, L levels, A anchors per cell, N_l anchors of level l,
N = sum N_l, G GT boxes, S sampled anchors, N_pre pre-NMS boxes per level,
P proposals, F fpn channels.
"""

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from detector.modeling import anchors as anchors_lib
from detector.modeling import (
    box_coder,
    extents,
    losses,
    matcher,
    norms,
    sampler,
)
from ops import box_ops
from ops.nms import nms


class ProposalOptions(NamedTuple):
    """`generate_proposals`' settings of one mode (train or test)."""

    pre_nms_top_k: int  # N_pre, per level
    post_nms_top_k: int  # P, per image after merging the levels
    nms_iou: float
    min_size: float  # boxes not wider and taller than this are dropped
    weights: tuple[float, ...]  # box coder weights
    backend: str  # ops.nms backend
    approx_recall: float | None = None  # None: exact per-level top-k


class AnchorSampling(NamedTuple):
    """`rpn_targets`' matching and sampling settings."""

    fg_iou: float
    bg_iou: float
    num_samples: int
    positive_fraction: float
    weights: tuple[float, ...]  # box coder weights


class RPNHead(nnx.Module):
    """Objectness and deltas for every anchor of every level.

    `num_convs` shared 3x3 convs + ReLU (torchvision's RPNHead conv_depth,
    detectron2's StandardRPNHead conv_dims; 1 in the 2017 model, 2 in
    torchvision's v2 and detectron2's LSJ baselines), each with the norm
    `norm` of norms.HEAD_NORMS ('none': a conv with a bias, as both
    references), then 1x1 convs for the logits and deltas. Every conv is
    drawn from N(0, 0.01) with zero biases, as both references.
    """

    def __init__(
        self,
        channels: int,
        num_anchors: int,
        *,
        num_convs: int = 1,
        norm: norms.NormOptions = norms.NO_NORM,
        dtype: jnp.dtype,
        rngs: nnx.Rngs,
    ):
        init = nnx.initializers.normal(0.01)
        layers = [
            norms.conv_norm(
                channels,
                channels,
                norms.ConvOptions(3, kernel_init=init),
                norm=norm,
                dtype=dtype,
                rngs=rngs,
            )
            for _ in range(num_convs)
        ]
        # The first conv keeps the 2017 head's name (rpn/head/conv).
        self.conv = layers[0]
        self.more_convs = nnx.List(layers[1:])
        # 1x1 convs as Linear layers over channels (cheaper gradients).
        self.objectness = nnx.Linear(
            channels, num_anchors, kernel_init=init, dtype=dtype, rngs=rngs
        )
        self.deltas = nnx.Linear(
            channels, 4 * num_anchors, kernel_init=init, dtype=dtype, rngs=rngs
        )

    @jax.named_scope("rpn_head")
    def __call__(
        self, features: Sequence[jax.Array]
    ) -> tuple[list[jax.Array], list[jax.Array]]:
        """Returns per level logits f32[B, N_l] and deltas f32[B, N_l, 4]."""
        logits, deltas = [], []
        for x in features:
            batch = x.shape[0]
            x = self.conv(extents.masked(x))
            for conv in self.more_convs:
                x = conv(extents.masked(x))
            logits.append(
                self.objectness(x).astype(jnp.float32).reshape(batch, -1)
            )
            deltas.append(
                self.deltas(x).astype(jnp.float32).reshape(batch, -1, 4)
            )
        return logits, deltas


class RPNSamples(NamedTuple):
    """Sampled anchors of every image: indices into the concatenated levels."""

    indices: jax.Array  # int32[B, S]
    is_positive: jax.Array  # bool[B, S]
    is_valid: jax.Array  # bool[B, S]
    box_targets: jax.Array  # f32[B, S, 4]


def rpn_targets(
    anchors: np.ndarray,
    gt_boxes: jax.Array,
    gt_valid: jax.Array,
    key: jax.Array,
    *,
    sampling: AnchorSampling,
) -> RPNSamples:
    """Matches anchors f32[N, 4] to GT [B, G, 4] and samples S per image."""
    anchors = jnp.asarray(anchors)
    keys = jax.random.split(key, gt_boxes.shape[0])

    def one_image(boxes, valid, image_key):
        iou = box_ops.pairwise_iou(anchors, boxes)  # [N, G]
        labels, matched = matcher.match(
            iou,
            valid,
            fg_iou=sampling.fg_iou,
            bg_iou_low=0.0,
            bg_iou_high=sampling.bg_iou,
            low_quality=True,
        )
        indices, is_positive, is_valid = sampler.sample_balanced(
            labels,
            image_key,
            num_samples=sampling.num_samples,
            positive_fraction=sampling.positive_fraction,
        )
        targets = box_coder.encode(
            boxes[matched[indices]], anchors[indices], sampling.weights
        )
        return RPNSamples(indices, is_positive, is_valid, targets)

    return jax.vmap(one_image)(gt_boxes.astype(jnp.float32), gt_valid, keys)


def gather_samples(
    logits: Sequence[jax.Array], deltas: Sequence[jax.Array], indices: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Head outputs of the sampled anchors: [B, S] logits, [B, S, 4] deltas."""
    all_logits = jnp.concatenate(logits, axis=1)
    all_deltas = jnp.concatenate(deltas, axis=1)
    return (
        jnp.take_along_axis(all_logits, indices, axis=1),
        jnp.take_along_axis(all_deltas, indices[..., None], axis=1),
    )


def _top_k(logits: jax.Array, k: int, recall: float | None):
    """Exact top-k, or lax.approx_max_k at recall target `recall`."""
    if recall is None:
        return jax.lax.top_k(logits, k)
    return jax.lax.approx_max_k(logits, k, recall_target=recall)


def padded_extents(image_sizes: jax.Array, size_divisor: int) -> jax.Array:
    """i32[B, 2]: each image's (height, width) rounded up to size_divisor."""
    sizes = image_sizes.astype(jnp.int32)
    return -(-sizes // size_divisor) * size_divisor


def _level_candidates(
    logits,
    deltas,
    anchors,
    origins,
    *,
    top_k,
    image_sizes,
    extents,
    options: ProposalOptions,
):
    """Top boxes of one level: [B, N_pre, 4], scores [B, N_pre] (NaN: none).

    Anchors whose cell origin (origins i32[N_l, 2]) lies outside an image's
    extent (extents i32[B, 2]) score -inf; boxes clip to image_sizes
    f32[B, 2].
    """
    origins = jnp.asarray(origins)
    inside = (origins[None, :, 0] < extents[:, None, 0]) & (
        origins[None, :, 1] < extents[:, None, 1]
    )
    logits = jnp.where(inside, logits, -jnp.inf)
    scores, indices = _top_k(
        logits, min(top_k, logits.shape[1]), options.approx_recall
    )
    deltas = jnp.take_along_axis(deltas, indices[..., None], axis=1)
    boxes = box_coder.decode(
        deltas, jnp.asarray(anchors)[indices], options.weights
    )
    boxes = box_ops.clip_boxes(
        boxes, image_sizes[:, 0, None], image_sizes[:, 1, None]
    )
    valid = box_ops.is_larger_than(boxes, options.min_size) & jnp.isfinite(
        scores
    )
    scores = jnp.where(valid, scores, jnp.nan)
    pad = top_k - scores.shape[1]
    if pad > 0:
        boxes = jnp.pad(boxes, ((0, 0), (0, pad), (0, 0)))
        scores = jnp.pad(scores, ((0, 0), (0, pad)), constant_values=jnp.nan)
    return boxes, scores


def generate_proposals(
    logits: Sequence[jax.Array],
    deltas: Sequence[jax.Array],
    anchors: Sequence[np.ndarray],
    *,
    options: ProposalOptions,
    image_size: tuple[int, int],
    image_sizes: jax.Array | None = None,
    cell_origins: Sequence[np.ndarray] | None = None,
    size_divisor: int = 32,
) -> tuple[jax.Array, jax.Array]:
    """Proposals from the RPN outputs (gradients stopped).

    Args:
      logits, deltas: per level [B, N_l] and [B, N_l, 4].
      anchors: per level f32[N_l, 4].
      options: N_pre (pre_nms_top_k) boxes per level enter NMS, which keeps
        P (post_nms_top_k) per level, and P per image after merging the
        levels; approx_recall None is the exact per-level top-k, else the
        recall target of `lax.approx_max_k` (faster on TPU, may miss a few
        of the true top N_pre).
      image_size: (height, width) of the input (the canvas).
      image_sizes: [B, 2] each image's (height, width) on the canvas, the
        boxes clip to (None: the whole canvas).
      cell_origins: per level i32[N_l, 2] anchor cell origins
        (`AnchorSpec.cell_origins`); with image_sizes, anchors past an
        image's size rounded up to size_divisor take no part.
      size_divisor: see cell_origins.

    Returns:
      boxes f32[B, P, 4] by descending score, valid bool[B, P].
    """
    top_k = min(options.pre_nms_top_k, max(x.shape[1] for x in logits))
    batch = logits[0].shape[0]
    if image_sizes is None:
        image_sizes = jnp.broadcast_to(
            jnp.asarray(image_size, jnp.int32), (batch, 2)
        )
    if cell_origins is None:
        cell_origins = [np.zeros((len(a), 2), np.int32) for a in anchors]
    extents = padded_extents(image_sizes, size_divisor)
    image_sizes = image_sizes.astype(jnp.float32)
    per_level = [
        _level_candidates(
            jax.lax.stop_gradient(level_logits),
            jax.lax.stop_gradient(level_deltas),
            level_anchors,
            level_origins,
            top_k=top_k,
            image_sizes=image_sizes,
            extents=extents,
            options=options,
        )
        for level_logits, level_deltas, level_anchors, level_origins in zip(
            logits, deltas, anchors, cell_origins, strict=True
        )
    ]
    boxes = jnp.stack([b for b, _ in per_level], axis=1)  # [B, L, N_pre, 4]
    scores = jnp.stack([s for _, s in per_level], axis=1)  # [B, L, N_pre]
    kept, _ = nms(
        boxes,
        scores,
        max_output_size=options.post_nms_top_k,
        iou_threshold=options.nms_iou,
        backend=options.backend,
    )  # [B, L, P]
    safe = jnp.maximum(kept, 0)
    kept_scores = jnp.take_along_axis(scores, safe, axis=-1)
    kept_scores = jnp.where(kept >= 0, kept_scores, -jnp.inf)
    kept_boxes = jnp.take_along_axis(boxes, safe[..., None], axis=-2)
    merged_scores, order = jax.lax.top_k(
        kept_scores.reshape(batch, -1), options.post_nms_top_k
    )
    merged_boxes = jnp.take_along_axis(
        kept_boxes.reshape(batch, -1, 4), order[..., None], axis=1
    )
    valid = merged_scores > -jnp.inf
    merged_boxes = jnp.where(valid[..., None], merged_boxes, 0.0)
    return jax.lax.stop_gradient(merged_boxes), valid


class RPN(nnx.Module):
    """The RPN: its head, anchors, proposals per mode, anchor sampling and
    losses."""

    def __init__(
        self,
        head: RPNHead,
        *,
        anchors: anchors_lib.AnchorSpec,
        train_proposals: ProposalOptions,
        test_proposals: ProposalOptions,
        sampling: AnchorSampling,
        box_beta: float,
        size_divisor: int,
        normaliser: str = "slots",
    ):
        """Args:
        head: FPN levels -> per level logits and deltas.
        anchors: the anchor pyramid.
        train_proposals, test_proposals: proposal settings per mode.
        sampling: anchor matching and sampling.
        box_beta: Huber delta of the RPN box loss (0: L1).
        size_divisor: the backbone's top stride; anchors past an image's
          size rounded up to it take no part in its proposals.
        normaliser: what the losses are divided by, a name of
          losses.RPN_NORMALISERS.
        """
        self.head = head
        self.anchors = anchors
        self.train_proposals = train_proposals
        self.test_proposals = test_proposals
        self.sampling = sampling
        self.box_beta = box_beta
        self.size_divisor = size_divisor
        self.normaliser = normaliser

    def __call__(
        self, features: Sequence[jax.Array]
    ) -> tuple[list[jax.Array], list[jax.Array]]:
        """The head's per level logits f32[B, N_l] and deltas [B, N_l, 4]."""
        return self.head(features)

    def proposals(
        self,
        logits: Sequence[jax.Array],
        deltas: Sequence[jax.Array],
        canvas: tuple[int, int],
        image_sizes: jax.Array | None = None,
        *,
        training: bool,
    ) -> tuple[jax.Array, jax.Array]:
        """Boxes f32[B, P, 4] and valid bool[B, P] of the head's outputs on
        the (H, W) canvas, with the train or test settings."""
        options = self.train_proposals if training else self.test_proposals
        with jax.named_scope("rpn"):
            return generate_proposals(
                logits,
                deltas,
                self.anchors.pyramid(canvas),
                options=options,
                image_size=canvas,
                image_sizes=image_sizes,
                cell_origins=self.anchors.cell_origins(canvas),
                size_divisor=self.size_divisor,
            )

    def losses(
        self,
        logits: Sequence[jax.Array],
        deltas: Sequence[jax.Array],
        batch: dict[str, jax.Array],
        key: jax.Array,
    ) -> dict[str, jax.Array]:
        """'rpn_cls' and 'rpn_box' of the head's outputs against the GT of
        `batch` (image, boxes, valid), each image sampled with its own key."""
        canvas = int(batch["image"].shape[1]), int(batch["image"].shape[2])
        with jax.named_scope("rpn_targets"):
            samples = rpn_targets(
                np.concatenate(self.anchors.pyramid(canvas)),
                batch["boxes"],
                batch["valid"].astype(bool),
                key,
                sampling=self.sampling,
            )
        sampled_logits, sampled_deltas = gather_samples(
            logits, deltas, samples.indices
        )
        return losses.rpn_losses(
            sampled_logits,
            sampled_deltas,
            samples.is_positive,
            samples.is_valid,
            samples.box_targets,
            beta=self.box_beta,
            normaliser=self.normaliser,
        )
