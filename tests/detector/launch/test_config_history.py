"""A resume lists what changed; each start's config is kept."""

import json
import logging

import pytest

from detector import config as config_lib
from detector.launch import config_history


def _config(**train):
    config = config_lib.base_config()
    for key, value in train.items():
        config.train[key] = value
    return config


def test_changes_lists_every_differing_field():
    stored = {"train": {"batch_size": 8, "num_steps": 60}, "seed": 0}
    current = {"train": {"batch_size": 16, "num_steps": 60}, "new": [1, 2]}
    assert config_history.changes(stored, current) == [
        'new "(absent)" -> [1, 2]',
        'seed 0 -> "(absent)"',
        "train.batch_size 8 -> 16",
    ]
    assert config_history.changes(stored, stored) == []


def test_a_resume_logs_each_changed_field(tmp_path, caplog):
    config_history.save(tmp_path, _config(batch_size=8, num_steps=60), 0)
    changed = _config(batch_size=16, num_steps=60, learning_rate=0.5)
    with caplog.at_level(logging.INFO):
        config_history.check_resume(changed, tmp_path, 20, tmp_path / "ckpt")
    lines = [r.getMessage() for r in caplog.records]
    assert any("2 config field(s) changed" in line for line in lines)
    assert "config changed: train.batch_size 8 -> 16" in lines
    assert any(
        line.startswith("config changed: train.learning_rate ")
        and line.endswith(" -> 0.5")
        for line in lines
    )


def test_a_checkpoint_beyond_num_steps_is_one_error(tmp_path):
    with pytest.raises(ValueError) as raised:
        config_history.check_resume(
            _config(num_steps=40), tmp_path, 60, tmp_path / "checkpoints"
        )
    assert str(raised.value) == (
        f"{tmp_path}/checkpoints/60: this workdir's checkpoint is beyond "
        "config.train.num_steps=40; set --config.train.num_steps=60 or "
        "more to go on, or choose another --workdir"
    )
    # At num_steps exactly (a finished run started again): fine.
    config_history.check_resume(_config(num_steps=60), tmp_path, 60, tmp_path)


def test_history_files_are_kept_and_never_overwritten(tmp_path):
    first, second = _config(num_steps=20), _config(num_steps=40)
    config_history.save(tmp_path, first, 0)
    config_history.save(tmp_path, second, 20)
    config_history.save(tmp_path, first, 20)  # another start from step 20
    config_history.save(tmp_path, first, 20)  # the same again: no new file
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "config.0.json",
        "config.20.1.json",
        "config.20.json",
        "config.json",
    ]

    def steps(name):
        return json.loads((tmp_path / name).read_text())["train"]["num_steps"]

    assert steps("config.0.json") == 20
    assert steps("config.20.json") == 40
    assert steps("config.20.1.json") == 20
    assert steps("config.json") == 20  # the latest start's


def test_a_config_json_without_history_is_kept_before_it_is_replaced(
    tmp_path,
):
    (tmp_path / "config.json").write_text('{"old": true}\n')  # older run
    config_history.save(tmp_path, _config(num_steps=40), 20)
    assert (tmp_path / "config.before-20.json").read_text() == (
        '{"old": true}\n'
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "config.20.json",
        "config.before-20.json",
        "config.json",
    ]
