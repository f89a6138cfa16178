"""A run's config checked where the run starts, before anything is built or
written: the schema (ranges, field combinations), then every name against
the registry that defines it."""

from collections.abc import Callable

import ml_collections

from detector import config as config_lib
from detector.config import checks
from detector.data import shapes_writer, sources
from detector.evaluation import coco_backends
from detector.imaging import masks, resize
from detector.modeling import backbone, box_head, losses, mask_targets, norms
from ops import nms, roi_align


def _head_norm(name: str, key: str) -> None:
    norms.check_name(name, key, auto=True)


def _nms_backend(name: str, key: str) -> None:
    # Baselines (no suppression) are admitted for the benchmarks.
    nms.check_backend(name, name=f"config.{key}")


def _align_implementation(name: str, key: str) -> None:
    roi_align.check_implementation(name, f"config.{key}")


# config key -> the check of its registry: (value, key), one ValueError line.
REGISTRY_CHECKS: dict[str, Callable[[object, str], None]] = {
    "data.source": sources.check_name,
    "data.resize": resize.check_rule,
    "data.shapes.image_size": shapes_writer.check_image_size,
    "model.backbone": backbone.check_name,
    "model.norm": norms.check_backbone_norm,
    "model.freeze_at": backbone.check_freeze_at,
    "model.fpn_norm": _head_norm,
    "model.rpn.head_norm": norms.check_name,
    "model.rpn.nms_backend": _nms_backend,
    "model.roi.align_implementation": _align_implementation,
    "model.roi.box_head": box_head.check_name,
    "model.loss.rpn_normaliser": losses.check_rpn_normaliser,
    "model.loss.mask_target": mask_targets.check_name,
    "model.roi.box_head_norm": norms.check_name,
    "model.roi.mask_head_norm": _head_norm,
    "model.detection.nms_backend": _nms_backend,
    "eval.mask_paste": masks.check_paster,
    "eval.coco_backend": coco_backends.check_name,
}


def validate(config: ml_collections.ConfigDict) -> None:
    """Checks `config` whole: its schema, then each registry name.

    Raises:
      ValueError: one line naming the first bad key, its value and the
        reason.
    """
    config_lib.check_schema(config)
    for key, check in REGISTRY_CHECKS.items():
        check(checks.get(config, key), key)
    _check_levels(config.model)


def _check_levels(model: ml_collections.ConfigDict) -> None:
    """model.min_level is a feature level that model.backbone provides."""
    levels = backbone.entry(model.backbone)
    checks.check(
        levels.min_level <= model.min_level <= levels.max_level,
        "model.min_level",
        model.min_level,
        f"must be in [{levels.min_level}, {levels.max_level}] (the "
        f"feature levels model.backbone={model.backbone!r} provides)",
    )


def warnings(config: ml_collections.ConfigDict) -> list[str]:
    """Lines to log about a valid config that likely does not do what its
    author meant (train.py logs them as warnings)."""
    train = config.train
    if train.warmup_steps <= train.num_steps:
        return []
    # state/optimizer.learning_rate_schedule's linear ramp at the last step.
    start = train.warmup_init_factor
    peak = start + (1 - start) * train.num_steps / train.warmup_steps
    return [
        f"config.train.warmup_steps={train.warmup_steps} is more than "
        f"config.train.num_steps={train.num_steps}: the learning rate peaks "
        f"at {peak:.2g} x config.train.learning_rate={train.learning_rate:g} "
        "at the last step; set "
        f"--config.train.warmup_steps={train.num_steps} or fewer to reach it"
    ]
