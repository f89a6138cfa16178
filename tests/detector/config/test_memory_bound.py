"""Sizes that multiply memory have ranges a real recipe fits in, and the
largest tensor a config asks for is refused before anything starts."""

import importlib
import math
import pathlib

import ml_collections
import pytest

from detector import config as config_lib
from detector.config import data as data_section
from detector.launch import validate

ROOT = pathlib.Path(__file__).resolve().parents[3]
CONFIG_FILES = sorted((ROOT / "configs").glob("*.py"))


def _error(config: ml_collections.ConfigDict) -> str:
    with pytest.raises(ValueError) as error:
        validate.validate(config)
    message = str(error.value)
    assert "\n" not in message
    return message


def _shapes(**fields) -> ml_collections.ConfigDict:
    config = importlib.import_module("configs.shapes").get_config()
    for key, value in fields.items():
        section, leaf = key.split("__")
        config[section][leaf] = value
    return config


@pytest.mark.parametrize(
    "key, value",
    [
        ("data__lsj_max", 500.0),
        ("data__scale_jitter", (0.5, 100.0)),
        ("data__max_instances", 100_000),
        ("data__image_size", (65536, 65536)),
        ("data__gt_mask_size", 100_000),
        ("train__batch_size", 1_000_000),
        ("eval__batch_size", 1_000_000),
        ("data__num_classes", 100_000),
        ("eval__num_visualized", 1_000_000),
        ("train__num_steps", 2**40),
        ("train__keep_checkpoints", 100_000),
    ],
)
def test_a_size_no_recipe_uses_is_refused_by_its_range(key, value):
    message = _error(_shapes(**{key: value}))
    assert message.startswith(f"config.{key.replace('__', '.')}="), message
    assert ": must be " in message


def test_the_reported_lsj_scale_is_refused_before_the_pipeline():
    message = _error(_shapes(data__augment="lsj", data__lsj_max=500.0))
    assert message.startswith("config.data.lsj_max=500.0: must be in (0, 4]")


@pytest.mark.parametrize(
    "fields, key",
    [
        (
            {"data__image_size": (4096, 4096), "train__batch_size": 512},
            "train.batch_size",
        ),
        (
            {"data__image_size": (4096, 4096), "eval__batch_size": 512},
            "eval.batch_size",
        ),
        (
            {
                "data__max_instances": 1000,
                "data__gt_mask_size": 512,
                "train__batch_size": 128,
            },
            "data.max_instances",
        ),
    ],
)
def test_a_combination_over_the_byte_budget_is_one_line_naming_the_field(
    fields, key
):
    message = _error(_shapes(**fields))
    assert message.startswith(f"config.{key}="), message
    assert "GiB" in message and "MAX_TENSOR_BYTES" in message, message


def test_the_budget_counts_the_largest_scaled_image_before_its_crop():
    config = _shapes(data__augment="lsj", data__lsj_max=2.0)
    tensors = data_section.largest_tensors(config)
    height, width = config.data.image_size
    assert tensors["data.lsj_max"][0] == 4 * 3 * (2 * height) * (2 * width)
    assert tensors["train.batch_size"][0] == 4 * 3 * height * width * 8


def _variants(path: pathlib.Path) -> list[str | None]:
    module = importlib.import_module(f"configs.{path.stem}")
    return [None, *getattr(module, "VARIANTS", {"runlocal": None})]


@pytest.mark.parametrize(
    "path, variant",
    [(path, variant) for path in CONFIG_FILES for variant in _variants(path)],
    ids=lambda v: getattr(v, "name", v),
)
def test_every_config_file_and_variant_still_validates(path, variant):
    module = importlib.import_module(f"configs.{path.stem}")
    validate.validate(module.get_config(variant))


def test_every_recipe_is_far_under_the_budget():
    for path in CONFIG_FILES:
        for variant in _variants(path):
            config = importlib.import_module(f"configs.{path.stem}")
            tensors = data_section.largest_tensors(config.get_config(variant))
            largest = max(size for size, _ in tensors.values())
            assert largest * 4 < data_section.MAX_TENSOR_BYTES, (path, variant)


def test_an_infinite_clip_norm_says_it_must_be_finite():
    config = config_lib.base_config()
    config.train.grad_clip_norm = math.inf
    message = _error(config)
    assert message.startswith("config.train.grad_clip_norm=inf: must be finite")
    assert "0 turns clipping off" in message


def test_the_reported_sampling_ratio_is_one_line_not_an_overflow():
    config = _shapes()
    config.model.roi.sampling_ratio = 1_000_000
    assert _error(config) == (
        "config.model.roi.sampling_ratio=1000000: must be in [1, 16] "
        "(samples per bin side (torchvision, detectron2: 2))"
    )


def test_an_int32_bound_is_written_in_full():
    config = _shapes()
    config.train.num_steps = 2**31
    assert _error(config).startswith(
        "config.train.num_steps=2147483648: must be in [1, 2147483647] "
    )


def test_more_anchor_shapes_than_any_recipe_is_refused():
    config = _shapes()
    config.model.aspect_ratios = (1.0,) * 17
    assert _error(config).startswith(
        "config.model.aspect_ratios=(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, "
    )
    assert _error(config).endswith(
        ": must be anchor height / width: 1 to 16 numbers, each > 0 (each "
        "an anchor per location, RPN outputs with it)"
    )
