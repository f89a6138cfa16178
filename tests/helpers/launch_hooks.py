"""The launch hooks train.py passes to the training loop, for tests that
call `train_lib.train_and_evaluate` themselves."""

from detector.engine import train_lib
from detector.launch import config_history
from detector.launch.console import next_steps

TRAIN_PY = train_lib.LaunchHooks(
    check_resume=config_history.check_resume,
    save_config=config_history.save,
    complete_key=next_steps.COMPLETE,
)
