"""Every numeric config field has a declared range, and a value outside it
is one line naming the key."""

import math

import ml_collections
import pytest

from detector import config as config_lib
from detector.config import ranges

TABLES = {
    **config_lib.RANGES,
    **{
        key: spec
        for section in config_lib.SECTIONS.values()
        for key, spec in section.RANGES.items()
    },
}


def _fields() -> dict[str, object]:
    return ranges.numeric_fields(config_lib.base_config(), "")


def _set(config: ml_collections.ConfigDict, key: str, value) -> None:
    *parents, leaf = key.split(".")
    for parent in parents:
        config = config[parent]
    config[leaf] = value


def _outside(default, spec) -> object:
    """A value of the default's type that `spec` refuses."""
    if isinstance(spec, ranges.Each):
        bad = spec.item.outside()
        kind = type(default[0]) if default else float
        if kind is int and not math.isnan(bad):
            bad = int(bad)
        return (bad, *tuple(default)[1:]) if default else (bad,)
    return type(default)(spec.outside())


def _error(key: str, value) -> str:
    config = config_lib.base_config()
    _set(config, key, value)
    with pytest.raises(ValueError) as error:
        config_lib.check_schema(config)
    message = str(error.value)
    assert "\n" not in message
    return message


def test_every_numeric_field_has_a_range_and_every_range_a_field():
    assert set(_fields()) == set(TABLES)


@pytest.mark.parametrize("key", sorted(_fields()))
def test_a_value_outside_each_range_names_its_key(key):
    value = _outside(_fields()[key], TABLES[key])
    message = _error(key, value)
    assert message.startswith(f"config.{key}="), message
    assert ": must be " in message


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("train.learning_rate", -1.0, "must be > 0"),
        ("train.momentum", 5.0, "must be in [0, 1)"),
        ("train.weight_decay", -1.0, "must be >= 0"),
        ("model.rpn.pre_nms_top_k_train", 0, "must be in [1, 100000]"),
        ("model.roi.mask_head_convs", -1, "must be in [0, 16]"),
        ("model.rpn.fg_iou", 2.0, "must be in [0, 1] (an IoU)"),
        ("data.scale_jitter", (1.5, 0.5), "ascending"),
        ("data.pixel_std", (0.0, 1.0, 1.0), "each > 0"),
        ("model.detection.score_threshold", 2.0, "must be in [0, 1]"),
        ("model.group_norm_groups", 0, "must be >= 1"),
        ("model.roi.pool_size", 0, "must be in [1, 64]"),
        ("model.backbone_width", 0, "must be in [1, 1024]"),
        ("data.gt_mask_size", 0, "must be in [1, 512]"),
        ("model.detection.nms_iou", 1.5, "must be in [0, 1]"),
        ("model.rpn.nms_iou", -0.1, "must be in [0, 1]"),
        ("model.rpn.bg_iou", 0.8, "must be <= model.rpn.fg_iou=0.7"),
        ("train.step_boundaries", (20000, 15000), "ascending"),
        ("seed", -1, "must be in [0, 4294967295]"),
    ],
)
def test_reported_nonsense_values_are_one_line(key, value, words):
    message = _error(key, value)
    assert message.startswith(f"config.{key}="), message
    assert words in message, message


def test_a_new_numeric_field_without_a_range_fails_validation():
    config = config_lib.base_config()
    with config.unlocked():
        config.train.new_knob = 3
    with pytest.raises(LookupError, match=r"config\.train\.new_knob: numeric"):
        config_lib.check_schema(config)
