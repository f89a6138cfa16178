"""train.py and eval.py: every bad input ends with one clear error line."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(script: str, *args: str, cwd=ROOT,
         env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / script), *args],
                          cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


def _error_line(result: subprocess.CompletedProcess) -> str:
    """The one `error:` line; asserts there is no traceback."""
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines()
              if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr[-2000:]
    return errors[0]


@pytest.mark.parametrize("args,message", [
    (["--config.model.fpn_chanels=128"],
     "error: --config.model.fpn_chanels=128: 'fpn_chanels' is not a config "
     "field; did you mean 'fpn_channels'?"),
    (["--config.train.num_steps=many"],
     "error: flag --config.train.num_steps=many: invalid literal for int()"),
    (["--bogus=1"], "error: Unknown command line flag 'bogus'"),
    (["--nms=gpu"], "error: flag --nms=gpu: value should be one of "
     "<auto|cpu|while_loop|pallas>"),
    (["--config=configs/missing.py"],
     "error: --config: [Errno 2] No such file or directory: "
     "'configs/missing.py'"),
    (["--config=configs/shapes.py:huge"],
     "error: ValueError: configs/shapes.py: unknown variant 'huge'; known: "
     "runlocal"),
])
def test_train_bad_flags_and_config(args, message):
    assert _error_line(_run("train.py", *args)).startswith(message)


def test_train_unwritable_workdir(tmp_path):
    (tmp_path / "file").write_text("")
    line = _error_line(_run("train.py", f"--workdir={tmp_path}/file/run"))
    assert line.startswith(f"error: --workdir={tmp_path}/file/run: not "
                           "writable")


def test_train_missing_dataset(tmp_path):
    line = _error_line(_run(
        "train.py", f"--workdir={tmp_path}/run",
        "--config.data.source=coco_json",
        f"--config.data.root={tmp_path}/coco"))
    assert line.startswith(f"error: {tmp_path}/coco")
    assert "does not exist" in line


def test_eval_without_checkpoint_or_config(tmp_path):
    line = _error_line(_run("eval.py", f"--workdir={tmp_path}"))
    assert line == (f"error: {tmp_path}/config.json: no config.json here; "
                    "pass --config=... or a workdir written by train.py")
    line = _error_line(_run("eval.py", f"--workdir={tmp_path}",
                            "--config=configs/shapes.py:runlocal"))
    assert line.startswith(f"error: {tmp_path}/checkpoints: no checkpoint "
                           "to evaluate")



def test_train_data_parallel_on_two_forced_cpu_devices(tmp_path):
    env = {**os.environ,
           "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    result = _run("train.py", "--config=configs/shapes.py:runlocal",
                  f"--workdir={tmp_path}/run", "--config.train.num_steps=2",
                  f"--config.data.root={tmp_path}/shapes", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Data parallel over 2 cpu devices" in result.stderr
    lines = [json.loads(line) for line in
             (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [2, 2]  # train, then eval
    assert lines[-1]["eval"] and "AP" in lines[-1]["bbox"]
