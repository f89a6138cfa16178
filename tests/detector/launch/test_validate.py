"""detector/launch/validate.py: what a run's config is warned of."""

from detector import config as config_lib
from detector.launch import validate


def _train_config(num_steps: int, warmup_steps: int):
    config = config_lib.base_config()
    config.train.num_steps = num_steps
    config.train.warmup_steps = warmup_steps
    config.train.warmup_init_factor = 0.0
    config.train.learning_rate = 0.002
    return config


def test_warmup_longer_than_the_run_is_one_warning_line():
    (line,) = validate.warnings(_train_config(100, 400))
    assert line == (
        "config.train.warmup_steps=400 is more than config.train.num_steps="
        "100: the learning rate peaks at 0.25 x config.train.learning_rate="
        "0.002 at the last step; set --config.train.warmup_steps=100 or "
        "fewer to reach it"
    )


def test_warmup_within_the_run_gives_no_warning():
    assert validate.warnings(_train_config(100, 100)) == []
    assert validate.warnings(_train_config(100, 0)) == []
