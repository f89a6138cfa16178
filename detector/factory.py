"""The config mapped onto the model's parts: one home for config -> model,
each part built from its own config section (docs/model.md)."""

from typing import Any

import ml_collections
from flax import nnx

from detector.config.model import fpn_norms, mask_head_norm, resolve_dtype
from detector.modeling import (
    anchors,
    backbone,
    box_head,
    fpn,
    losses,
    mask_head,
    norms,
    roi_heads,
    rpn,
)
from detector.modeling.model import MaskRCNN


def options(cls: type, section: ml_collections.ConfigDict, **given: Any):
    """NamedTuple `cls`, each field the `section` field of its name or,
    where the section spells or shapes it differently, `given`'s: a new
    field named as its config key needs no line here."""
    return cls(
        **{
            name: given[name] if name in given else section[name]
            for name in cls._fields
        }
    )


def _layer_args(model: ml_collections.ConfigDict, rngs: nnx.Rngs) -> dict:
    """The compute dtype and rngs of a part."""
    return dict(dtype=resolve_dtype(model.dtype), rngs=rngs)


def _norm(model: ml_collections.ConfigDict, name: str) -> norms.NormOptions:
    """The FPN or head norm `name` with config.model's GroupNorm groups."""
    return norms.NormOptions(name, model.group_norm_groups)


def backbone_options(
    model: ml_collections.ConfigDict,
) -> backbone.BackboneOptions:
    """The backbone of config.model (model.backbone, width, norm, ...)."""
    return options(
        backbone.BackboneOptions,
        model,
        name=model.backbone,
        width=model.backbone_width,
        groups=model.group_norm_groups,
        frozen_epsilon=model.frozen_bn_epsilon,
    )


def build_backbone(
    model: ml_collections.ConfigDict, *, rngs: nnx.Rngs
) -> tuple[nnx.Module, dict[int, int]]:
    """(backbone module, channels per level) of config.model."""
    return backbone.build(
        backbone_options(model),
        max_level=model.max_level,
        dtype=resolve_dtype(model.dtype),
        rngs=rngs,
    )


def build_fpn(
    model: ml_collections.ConfigDict,
    channels: dict[int, int],
    *,
    rngs: nnx.Rngs,
) -> fpn.FPN:
    """The FPN of config.model on backbone levels of `channels`."""
    lateral_norm, output_norm = fpn_norms(model)
    return fpn.FPN(
        channels,
        channels=model.fpn_channels,
        min_level=model.min_level,
        max_level=model.max_level,
        lateral_norm=_norm(model, lateral_norm),
        output_norm=_norm(model, output_norm),
        **_layer_args(model, rngs),
    )


def _proposal_options(
    rpn_config: ml_collections.ConfigDict, mode: str
) -> rpn.ProposalOptions:
    """Proposal settings of `mode` ('train' or 'test')."""
    return options(
        rpn.ProposalOptions,
        rpn_config,
        pre_nms_top_k=rpn_config[f"pre_nms_top_k_{mode}"],
        post_nms_top_k=rpn_config[f"post_nms_top_k_{mode}"],
        min_size=rpn_config.min_box_size,
        weights=tuple(rpn_config.box_weights),
        backend=rpn_config.nms_backend,
        approx_recall=rpn_config.approx_top_k_recall or None,
    )


def build_rpn(
    model: ml_collections.ConfigDict, size_divisor: int, *, rngs: nnx.Rngs
) -> rpn.RPN:
    """The RPN of config.model.rpn, its anchors, loss.rpn_box_beta and
    loss.rpn_normaliser; `size_divisor` is the backbone's top stride."""
    rpn_config = model.rpn
    head = rpn.RPNHead(
        model.fpn_channels,
        len(model.aspect_ratios),
        num_convs=rpn_config.head_convs,
        norm=_norm(model, rpn_config.head_norm),
        **_layer_args(model, rngs),
    )
    return rpn.RPN(
        head,
        anchors=anchors.AnchorSpec(
            min_level=model.min_level,
            max_level=model.max_level,
            scale=model.anchor_scale,
            aspect_ratios=tuple(model.aspect_ratios),
            offset=model.anchor_offset,
            round_sizes=model.anchor_round,
        ),
        train_proposals=_proposal_options(rpn_config, "train"),
        test_proposals=_proposal_options(rpn_config, "test"),
        sampling=options(
            rpn.AnchorSampling,
            rpn_config,
            weights=tuple(rpn_config.box_weights),
        ),
        box_beta=model.loss.rpn_box_beta,
        size_divisor=size_divisor,
        normaliser=model.loss.rpn_normaliser,
    )


def _pooling(roi: ml_collections.ConfigDict) -> roi_heads.PoolOptions:
    """The ROIAlign settings of config.model.roi (both heads')."""
    return options(
        roi_heads.PoolOptions, roi, implementation=roi.align_implementation
    )


def _roi_sampling(roi: ml_collections.ConfigDict) -> roi_heads.RoiSampling:
    return options(roi_heads.RoiSampling, roi, weights=tuple(roi.box_weights))


def build_roi_heads(
    model: ml_collections.ConfigDict, num_classes: int, *, rngs: nnx.Rngs
) -> roi_heads.RoIHeads:
    """The RoI heads of config.model.roi, .detection, loss.box_beta and
    loss.mask_target: the box head drawn first, then the mask head."""
    roi = model.roi
    dtype = resolve_dtype(model.dtype)
    box = box_head.build(
        options(
            box_head.BoxHeadOptions,
            roi,
            name=roi.box_head,
            in_channels=model.fpn_channels,
            fc_dim=roi.box_head_dim,
            conv_dim=roi.box_head_conv_dim,
            norm=roi.box_head_norm,
            groups=model.group_norm_groups,
        ),
        num_classes,
        dtype=dtype,
        rngs=rngs,
    )
    mask = mask_head.MaskHead(
        options(
            mask_head.MaskHeadOptions,
            roi,
            in_channels=model.fpn_channels,
            pool_size=roi.mask_pool_size,
            conv_dim=roi.mask_head_dim,
            num_convs=roi.mask_head_convs,
            norm=mask_head_norm(model),
            groups=model.group_norm_groups,
        ),
        num_classes,
        dtype=dtype,
        rngs=rngs,
    )
    sampling = _roi_sampling(roi)
    return roi_heads.RoIHeads(
        box,
        mask,
        sampling=sampling,
        pooling=_pooling(roi),
        detection=options(
            roi_heads.DetectionOptions,
            model.detection,
            weights=tuple(roi.box_weights),
            backend=model.detection.nms_backend,
            min_size=model.detection.min_box_size,
        ),
        box_beta=model.loss.box_beta,
        num_mask_rois=roi_heads.num_mask_rois(sampling, roi.max_mask_rois),
        mask_target=model.loss.mask_target,
    )


def build_model(
    config: ml_collections.ConfigDict, *, rngs: nnx.Rngs
) -> MaskRCNN:
    """The Mask R-CNN of a validated config, its params drawn from `rngs`."""
    model = config.model
    num_classes = int(config.data.num_classes)
    # One statement per part: the order the parameters are drawn in.
    backbone_module, channels = build_backbone(model, rngs=rngs)
    neck = build_fpn(model, channels, rngs=rngs)
    rpn_module = build_rpn(model, 2**neck.top_level, rngs=rngs)
    heads = build_roi_heads(model, num_classes, rngs=rngs)
    return MaskRCNN(
        backbone_module,
        neck,
        rpn_module,
        heads,
        loss_weights=tuple(
            (name, model.loss[f"{name}_weight"]) for name in losses.TERM_NAMES
        ),
    )
