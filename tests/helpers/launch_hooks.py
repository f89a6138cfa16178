"""The launch hooks train.py passes to the training loop, for tests that
call `train_lib.train_and_evaluate` themselves."""

from detector.engine import train_lib
from detector.launch import config_history, run_config
from detector.launch.console import next_steps

TRAIN_PY = train_lib.LaunchHooks(
    check_resume=config_history.check_resume,
    save_config=config_history.save,
    check_kept=run_config.check_run_kept,
    complete_key=next_steps.COMPLETE,
)
