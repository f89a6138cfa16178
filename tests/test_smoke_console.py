"""The smoke run's console: one line per log step, no third-party noise;
and eval.py reusing that run's config from another folder."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from tests.helpers import groups, requires

requires.module_or_skip(*requires.TRAIN_LOOP)
# A whole train.py run in a subprocess (its console is the promise): the
# slow stage.
pytestmark = [groups.SMOKE_CONSOLE, pytest.mark.slow]

ROOT = pathlib.Path(__file__).resolve().parents[1]
# What a default run printed before (orbax internals, clu's writer and work
# unit notes, the TPU probe, TensorFlow's native log, matplotlib's font
# cache, COCOeval's progress).
NOISE = (
    "Closing _NonBlockingMetadataStore",
    "wait_until_finished",
    "async_checkpointer",
    "atomicity.py",
    "checkpoint_manager.py",
    "Setting work unit notes",
    "logging_writer.py",
    "steps_per_sec",
    "uptime=",
    "Unable to initialize backend",
    "op_level_cost_estimator",
    "oneDNN custom operations",
    "absl::InitializeLog",
    "generated new fontManager",
    "Running per image evaluation",
    "Accumulating evaluation results",
    "Very slow compile",
)
# Start-up and data lines (the two that name the silences before the first
# data line and before the compile included), the compile, 2 step lines,
# the evaluation: 15 log lines;
# COCOeval's two summaries (a title and 14 numbers with faster-coco-eval,
# 12 with pycocotools), each followed by its AP per category (a title, a
# header, a rule and one row of the 3 shapes); train.py's last line.
MAX_LINES = 15 + 2 * (15 + 4) + 1
STEP_LINE = re.compile(
    r"step (\d+)/4 \(\d+%\)  eta \S+  total [\d.]+  rpn_cls [\d.]+  "
    r"rpn_box [\d.]+  cls [\d.]+  box [\d.]+  mask [\d.]+ \| [\d.]+ ms/step  "
    r"[\d.]+ img/s  device [\d.]+ ms  data [\d.]+ ms  host [\d.]+ ms  "
    r"lr [\d.e+-]+  nms while_loop$"
)


def _run(script: str, *args: str, cwd, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / script), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _console(result: subprocess.CompletedProcess) -> list[str]:
    assert result.returncode == 0, result.stderr[-3000:]
    return (result.stdout + result.stderr).splitlines()


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> tuple[pathlib.Path, list[str], str]:
    """The smoke config trained from folder `home`, with a relative
    data.root; returns (home, its console lines, its stdout)."""
    home = tmp_path_factory.mktemp("home")
    result = _run(
        "train.py",
        f"--config={ROOT}/configs/shapes.py:runlocal",
        "--workdir=w",
        "--config.data.root=data",
        "--nms=while_loop",
        cwd=home,
    )
    return home, _console(result), result.stdout


def test_smoke_run_prints_one_line_per_log_step_and_no_noise(smoke):
    _, lines, _ = smoke
    for pattern in NOISE:
        assert not [line for line in lines if pattern in line], pattern
    steps = [m.group(1) for line in lines if (m := STEP_LINE.search(line))]
    assert steps == ["2", "4"], "\n".join(lines)
    assert any(line.startswith("COCO bbox:") for line in lines)
    assert len(lines) <= MAX_LINES, "\n".join(lines)


def test_the_last_line_names_workdir_ap_and_next_commands(smoke):
    _, _, stdout = smoke
    last = stdout.splitlines()[-1]
    assert re.fullmatch(
        r"trained w to step 4: bbox AP -?[\d.]+, segm AP -?[\d.]+; next: "
        r"python eval\.py --workdir=w, python export\.py --workdir=w, "
        r"python predict\.py --workdir=w IMAGES\.\.\.; curves: "
        r"w/curves\.png \(all events: tensorboard --logdir w\)",
        last,
    ), last


def test_a_second_run_reports_the_workdir_complete(smoke):
    home, _, _ = smoke
    result = _run(
        "train.py",
        f"--config={ROOT}/configs/shapes.py:runlocal",
        "--workdir=w",
        "--config.data.root=data",
        "--nms=while_loop",
        cwd=home,
    )
    lines = _console(result)
    assert not [line for line in lines if line.startswith("COCO bbox:")]
    assert result.stdout.splitlines()[-1].startswith(
        "w is already trained to step 4 (bbox AP "
    )


def test_config_json_holds_data_root_absolute(smoke):
    home, _, _ = smoke
    config = json.loads((home / "w" / "config.json").read_text())
    assert config["data"]["root"] == str(home / "data")


def test_eval_from_another_folder_reuses_the_run_config(smoke):
    """`~/w`, the run's config.json with an override: the same data, and no
    second shapes dataset in the folder eval.py runs from."""
    home, _, _ = smoke
    elsewhere = home / "elsewhere"
    elsewhere.mkdir()
    lines = _console(
        _run(
            "eval.py",
            "--workdir=~/w",
            "--config=~/w/config.json",
            "--config.eval.max_images=2",
            cwd=elsewhere,
            env={**os.environ, "HOME": str(home)},
        )
    )
    for pattern in NOISE:
        assert not [line for line in lines if pattern in line], pattern
    assert list(elsewhere.iterdir()) == []
    # The run's own result is kept; the override names the new one.
    own = json.loads((home / "w" / "eval_val.json").read_text())
    assert own["images"] != 2
    summary = json.loads(
        (home / "w" / "eval_val_max_images-2.json").read_text()
    )
    assert summary["images"] == 2
