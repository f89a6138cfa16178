"""The configs a workdir was trained with, kept as config.<step>.json; a
resume logs what changed (docs/faults.md)."""

import json
import pathlib

import jax
import ml_collections
from absl import logging

from detector.config.config_diff import changes
from detector.utils import files

LATEST = "config.json"


def json_text(config: ml_collections.ConfigDict) -> str:
    """`config` as config.json holds it."""
    return config.to_json_best_effort(indent=2, sort_keys=True) + "\n"


def check_resume(
    config: ml_collections.ConfigDict,
    workdir: pathlib.Path,
    step: int,
    checkpoints: pathlib.Path,
) -> None:
    """Before a run resumes at `step`: the step fits, the changes are logged.

    Raises:
      ValueError: `step` is beyond config.train.num_steps.
    """
    num_steps = config.train.num_steps
    if step > num_steps:
        raise ValueError(
            f"{checkpoints}/{step}: this workdir's checkpoint is beyond "
            f"config.train.num_steps={num_steps}; set "
            f"--config.train.num_steps={step} or more to go on, or choose "
            "another --workdir"
        )
    stored_path = workdir / LATEST
    if step == 0 or not stored_path.is_file():
        return
    try:
        stored = json.loads(stored_path.read_text())
    except (OSError, ValueError) as e:
        logging.warning(
            "%s is unreadable (%s): the config changes of this resume "
            "cannot be listed",
            stored_path,
            e,
        )
        return
    found = changes(stored, json.loads(json_text(config)))
    if not found:
        logging.info("Resuming at step %d with the stored config", step)
        return
    logging.warning(
        "Resuming at step %d with %d config field(s) changed since the "
        "stored %s:",
        step,
        len(found),
        stored_path,
    )
    for change in found:
        logging.warning("config changed: %s", change)


def history_path(
    workdir: pathlib.Path, step: int | str, text: str
) -> pathlib.Path:
    """Where the config that started at `step` goes: config.<step>.json,
    or the first free (or identical) config.<step>.<n>.json."""
    path, n = workdir / f"config.{step}.json", 0
    while path.exists() and path.read_text() != text:
        n += 1
        path = workdir / f"config.{step}.{n}.json"
    return path


def save(
    workdir: pathlib.Path, config: ml_collections.ConfigDict, step: int
) -> None:
    """Writes config.json and keeps config.<step>.json (process 0)."""
    if jax.process_index() != 0:
        return
    text = json_text(config)
    _keep_unrecorded_latest(workdir, step)
    kept = history_path(workdir, step, text)
    if not kept.exists():
        files.write_text(kept, text)
    files.write_text(workdir / LATEST, text)


def _keep_unrecorded_latest(workdir: pathlib.Path, step: int) -> None:
    """A config.json no history file holds (written before the history
    was kept) is kept as config.before-<step>.json before it is replaced."""
    latest = workdir / LATEST
    if not latest.is_file():
        return
    text = latest.read_text()
    if any(path.read_text() == text for path in workdir.glob("config.*.json")):
        return
    files.write_text(history_path(workdir, f"before-{step}", text), text)
