"""config.eval: batch size, subset and visualisation."""

import ml_collections

from detector.config.checks import check_minimums

_MINIMUMS = (
    ("eval.batch_size", 1, "images per predict call"),
    ("eval.max_images", 0, "images evaluated, 0: the whole split"),
    ("eval.num_visualized", 0, "batches drawn"),
)


def defaults() -> ml_collections.ConfigDict:
    """config.eval: batch size, subset and visualisation."""
    evaluation = ml_collections.ConfigDict()
    evaluation.batch_size = 8
    evaluation.max_images = 0  # 0: the whole split
    evaluation.num_visualized = 4
    return evaluation


def validate(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError (one line naming the key) on a bad eval section."""
    check_minimums(config, _MINIMUMS)
