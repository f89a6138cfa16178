"""detector/config/structure.py: a config checked whole against the
schema (sections, fields, types), and JSON configs read through it."""

import json
import os

import ml_collections
import pytest

from detector import config as config_lib


def _printed() -> dict:
    """The JSON --print_config writes of the base config."""
    return json.loads(config_lib.base_config().to_json_best_effort())


def _load_error(tmp_path, values) -> str:
    path = tmp_path / "run.json"
    path.write_text(
        json.dumps(values) if not isinstance(values, str) else values
    )
    with pytest.raises(ValueError) as info:
        config_lib.load_json(path)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_a_printed_config_loads_back_equal(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_printed()))
    assert config_lib.load_json(path) == config_lib.base_config()


def test_a_missing_section_is_named(tmp_path):
    values = _printed()
    del values["train"]
    assert _load_error(tmp_path, values) == (
        f"{tmp_path}/run.json: missing section(s) train; every field of "
        "detector.config.base_config() must be there (start from "
        "base_config(); --print_config writes a complete JSON config)"
    )


def test_a_missing_field_is_named(tmp_path):
    values = _printed()
    del values["train"]["num_steps"]
    del values["model"]["roi"]["sampling_ratio"]
    assert _load_error(tmp_path, values).startswith(
        f"{tmp_path}/run.json: missing field(s) model.roi.sampling_ratio, "
        "train.num_steps; "
    )


def test_a_workdirs_config_json_takes_the_defaults_of_fields_added_since(
    tmp_path, caplog
):
    """A config.json train.py wrote before a field existed still loads, the
    field at its default, named in one log line; a section missing is still
    an error."""
    values = _printed()
    del values["train"]["profile_steps"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(values))
    with caplog.at_level("WARNING"):
        config = config_lib.load_json(path, written_by_train=True)
    assert config == config_lib.base_config()
    assert f"{path}: written before field(s) train.profile_steps" in (
        caplog.text
    )
    del values["train"]
    path.write_text(json.dumps(values))
    with pytest.raises(ValueError, match="missing section"):
        config_lib.load_json(path, written_by_train=True)


@pytest.mark.parametrize(
    "section, key, value, reason",
    [
        ("train", "num_steps", "4", '="4": must be an integer, not a string'),
        ("train", "num_steps", True, "=true: must be an integer, not true"),
        ("train", "num_steps", 4.0, "=4.0: must be an integer, not a decimal"),
        ("train", "optimizer", 5, "=5: must be a string, not an integer"),
        ("train", "deterministic", 1, "=1: must be true or false, not an"),
        (
            "data",
            "min_size",
            [800.5],
            "=[800.5]: must be a list of integers, not a list holding a "
            "decimal number (800.5)",
        ),
        ("data", "image_size", "1024", '="1024": must be a list of integers'),
        ("train", "num_steps", None, "=null: must be an integer, not null"),
    ],
)
def test_a_value_of_the_wrong_type_names_file_key_and_value(
    tmp_path, section, key, value, reason
):
    values = _printed()
    values[section][key] = value
    assert _load_error(tmp_path, values).startswith(
        f"{tmp_path}/run.json: {section}.{key}{reason}"
    )


def test_a_section_written_as_a_value(tmp_path):
    values = _printed()
    values["train"] = 5
    assert _load_error(tmp_path, values) == (
        f"{tmp_path}/run.json: train=5: must be a section of fields, not an "
        "integer"
    )


def test_numbers_are_read_into_the_schemas_types(tmp_path):
    values = _printed()
    values["train"]["learning_rate"] = 1  # an integer in a float field
    values["data"]["scale_jitter"] = [1, 2]
    path = tmp_path / "run.json"
    path.write_text(json.dumps(values))
    config = config_lib.load_json(path)
    assert config.train.learning_rate == 1.0
    assert isinstance(config.train.learning_rate, float)
    assert config.data.scale_jitter == (1.0, 2.0)


@pytest.mark.parametrize(
    "text, reason",
    [
        ('{"train": ', "not readable JSON (line 1 column 11: Expecting value)"),
        ("[" * 100000 + "]" * 100000, "not readable JSON; damaged?"),
        ("[1, 2]", "holds a JSON list, not a config"),
    ],
)
def test_a_damaged_json_config_names_itself(tmp_path, text, reason):
    assert _load_error(tmp_path, text).startswith(
        f"{tmp_path}/run.json: {reason}"
    )


def test_a_fifo_is_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "run.json")
    with pytest.raises(ValueError) as info:
        config_lib.load_json(tmp_path / "run.json")
    assert str(info.value) == (
        f"{tmp_path}/run.json: not a regular file (a FIFO)"
    )


def test_an_unknown_field_is_named(tmp_path):
    values = _printed()
    values["train"]["lr"] = 0.1
    assert _load_error(tmp_path, values) == (
        f"{tmp_path}/run.json: train.lr: not a config field (written by "
        "another version?)"
    )


def test_a_python_config_is_checked_the_same_way():
    from detector.config import structure

    empty = ml_collections.ConfigDict()
    with pytest.raises(ValueError, match="missing section"):
        structure.check(empty, config_lib.base_config(), "x")
    structure.check(config_lib.base_config(), config_lib.base_config(), "x")
