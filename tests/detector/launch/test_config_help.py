"""detector/launch/config_help.py: the config's fields found from the
command line: near-miss suggestions in every section, the printed config."""

import pytest

from detector import config as config_lib
from detector.launch import config_help


@pytest.mark.parametrize(
    "given, suggested",
    [
        ("train.lr", ["train.learning_rate"]),  # initials
        ("model.fpn_chanels", ["model.fpn_channels"]),  # a typo
        ("trian.num_steps", ["train.num_steps"]),  # the section misspelt
        ("model.num_steps", ["train.num_steps"]),  # another section's
        ("train.seed", ["seed", "data.shapes.seed"]),  # top-level first
        (  # nested ones
            "model.nms_iou",
            ["model.detection.nms_iou", "model.rpn.nms_iou"],
        ),
        ("train.frobnicate", []),
    ],
)
def test_near_misses_are_searched_in_every_section(given, suggested):
    assert config_help.suggest(given, config_lib.base_config()) == suggested


def test_unknown_field_line_names_the_suggestion_or_the_listing():
    config = config_lib.base_config()
    assert config_help.unknown_field_line(
        "--config.train.lr=0.1", "lr", config
    ) == (
        "--config.train.lr=0.1: 'lr' is not a config field; did you mean "
        "'train.learning_rate'?"
    )
    assert config_help.unknown_field_line(
        "--config.train.frobnicate=1", "frobnicate", config
    ) == (
        "--config.train.frobnicate=1: 'frobnicate' is not a config field; "
        "--print_config lists every field"
    )


def test_printed_config_loads_back_as_the_same_config(tmp_path):
    config = config_lib.base_config()
    config.train.num_steps = 7
    config.model.rpn.nms_backend = "while_loop"
    path = tmp_path / "printed.json"
    path.write_text(config_help.printed(config))
    assert config_lib.load_json(path).to_dict() == config.to_dict()


def test_override_help_names_the_sections_and_the_listing():
    text = config_help.override_help(config_lib.base_config())
    assert "--config.<section>.<field>=VALUE" in text
    assert "data, eval, model, train" in text
    assert "--print_config" in text
