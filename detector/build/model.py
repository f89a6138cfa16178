"""The config mapped onto the model's parts: one home for config -> model.

    model = build_model(config, rngs=nnx.Rngs(config.seed))

`detector/modeling/` takes constructor arguments only; this module reads
`config.model` and `config.data` and builds the backbone, FPN, heads and
their settings in that order (the order the parameters are initialised
in). The config is validated where a run starts
(`detector.config.validate`), not here.
"""

import ml_collections
from flax import nnx

from detector.config.model import fpn_norms, mask_head_norm, resolve_dtype
from detector.modeling import (
    anchors,
    backbone,
    box_heads,
    fpn,
    losses,
    roi_heads,
    rpn,
)
from detector.modeling.model import MaskRCNN


def backbone_options(
    model: ml_collections.ConfigDict,
) -> backbone.BackboneOptions:
    """The backbone of config.model (model.backbone, width, norm, ...)."""
    return backbone.BackboneOptions(
        name=model.backbone,
        width=model.backbone_width,
        norm=model.norm,
        groups=model.group_norm_groups,
        freeze_at=model.freeze_at,
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


def _proposal_options(
    rpn_config: ml_collections.ConfigDict, mode: str
) -> rpn.ProposalOptions:
    """Proposal settings of `mode` ('train' or 'test')."""
    return rpn.ProposalOptions(
        pre_nms_top_k=rpn_config[f"pre_nms_top_k_{mode}"],
        post_nms_top_k=rpn_config[f"post_nms_top_k_{mode}"],
        nms_iou=rpn_config.nms_iou,
        min_size=rpn_config.min_box_size,
        weights=tuple(rpn_config.box_weights),
        backend=rpn_config.nms_backend,
        approx_recall=rpn_config.approx_top_k_recall or None,
    )


def _settings(model: ml_collections.ConfigDict) -> dict:
    """MaskRCNN's settings (everything but its modules) of config.model."""
    rpn_config, roi = model.rpn, model.roi
    detection = model.detection
    return dict(
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
        anchor_sampling=rpn.AnchorSampling(
            fg_iou=rpn_config.fg_iou,
            bg_iou=rpn_config.bg_iou,
            num_samples=rpn_config.num_samples,
            positive_fraction=rpn_config.positive_fraction,
            weights=tuple(rpn_config.box_weights),
        ),
        roi_sampling=roi_heads.RoiSampling(
            num_rois=roi.num_rois,
            fg_fraction=roi.fg_fraction,
            fg_iou=roi.fg_iou,
            bg_iou_low=roi.bg_iou_low,
            bg_iou_high=roi.bg_iou_high,
            weights=tuple(roi.box_weights),
        ),
        pooling=roi_heads.PoolOptions(
            sampling_ratio=roi.sampling_ratio,
            canonical_size=roi.canonical_size,
            canonical_level=roi.canonical_level,
            implementation=roi.align_implementation,
            aligned=roi.aligned,
            level_eps=roi.level_eps,
        ),
        box_pool_size=roi.pool_size,
        mask_pool_size=roi.mask_pool_size,
        mask_size=roi.mask_size,
        max_mask_rois=roi.max_mask_rois,
        detection=roi_heads.DetectionOptions(
            weights=tuple(roi.box_weights),
            score_threshold=detection.score_threshold,
            pre_nms_top_k=detection.pre_nms_top_k,
            max_detections=detection.max_detections,
            nms_iou=detection.nms_iou,
            backend=detection.nms_backend,
            min_size=detection.min_box_size,
        ),
        loss=losses.LossOptions(
            rpn_box_beta=model.loss.rpn_box_beta,
            box_beta=model.loss.box_beta,
            weights=tuple(
                (name, model.loss[f"{name}_weight"])
                for name in losses.TERM_NAMES
            ),
        ),
    )


def build_model(
    config: ml_collections.ConfigDict, *, rngs: nnx.Rngs
) -> MaskRCNN:
    """The Mask R-CNN of a validated config, its params drawn from `rngs`."""
    model = config.model
    num_classes = int(config.data.num_classes)
    dtype = resolve_dtype(model.dtype)
    backbone_module, channels = build_backbone(model, rngs=rngs)
    groups = model.group_norm_groups
    lateral_norm, output_norm = fpn_norms(model)
    neck = fpn.FPN(
        channels,
        channels=model.fpn_channels,
        min_level=model.min_level,
        max_level=model.max_level,
        lateral_norm=lateral_norm,
        output_norm=output_norm,
        groups=groups,
        dtype=dtype,
        rngs=rngs,
    )
    rpn_head = rpn.RPNHead(
        model.fpn_channels,
        len(model.aspect_ratios),
        num_convs=model.rpn.head_convs,
        norm=model.rpn.head_norm,
        groups=groups,
        dtype=dtype,
        rngs=rngs,
    )
    roi = model.roi
    box_head = box_heads.build(
        box_heads.BoxHeadOptions(
            name=roi.box_head,
            in_channels=model.fpn_channels,
            pool_size=roi.pool_size,
            fc_dim=roi.box_head_dim,
            conv_dim=roi.box_head_conv_dim,
            norm=roi.box_head_norm,
            groups=groups,
        ),
        num_classes,
        dtype=dtype,
        rngs=rngs,
    )
    mask_head = roi_heads.MaskHead(
        model.fpn_channels,
        roi.mask_head_dim,
        roi.mask_head_convs,
        num_classes,
        norm=mask_head_norm(model),
        groups=groups,
        dtype=dtype,
        rngs=rngs,
    )
    return MaskRCNN(
        backbone=backbone_module,
        fpn=neck,
        rpn_head=rpn_head,
        box_head=box_head,
        mask_head=mask_head,
        image_size=tuple(config.data.image_size),
        num_classes=num_classes,
        **_settings(model),
    )
