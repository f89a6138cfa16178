"""train.py and eval.py: every bad input ends with one clear error line."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from tests.helpers import checkpoint_faults, commands, cpu_compiles, requires

# train.py and eval.py read data with tf.data, evaluate with pycocotools and
# log with clu: skipped where they are not installed.
requires.module_or_skip(*requires.TRAIN_LOOP)

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(
    script: str, *args: str, cwd=ROOT, env=None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


_error_line = commands.error_line


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--config.model.fpn_chanels=128"],
            "error: --config.model.fpn_chanels=128: "
            "'fpn_chanels' is not a config field; did you mean "
            "'model.fpn_channels'?",
        ),
        (
            ["--config.train.num_steps=many"],
            "error: flag --config.train.num_steps=many: "
            "invalid literal for int()",
        ),
        (["--bogus=1"], "error: Unknown command line flag 'bogus'"),
        (
            ["--nms=gpu"],
            "error: flag --nms=gpu: value should be one of "
            "<auto|cpu|while_loop|pallas|pallas_mosaic_gpu|pallas_triton>",
        ),
        (
            ["--config=configs/missing.py"],
            "error: --config: configs/missing.py: No such file or directory",
        ),
        (
            ["--config=configs/shapes.py:huge"],
            "error: configs/shapes.py: unknown variant 'huge'; known: runlocal",
        ),
    ],
)
def test_train_bad_flags_and_config(args, message):
    assert _error_line(_run("train.py", *args)).startswith(message)


@pytest.mark.parametrize(
    "source, reason",
    [
        ("def get_config():\n    return {'train': 1}\n", ": get_config() "),
        ("def get_config(:\n    return 1\n", ", line 1: SyntaxError: "),
    ],
)
def test_train_config_file_that_fails_is_one_line(tmp_path, source, reason):
    (tmp_path / "bad.py").write_text(source)
    result = _run(
        "train.py", f"--config={tmp_path}/bad.py", f"--workdir={tmp_path}/w"
    )
    assert _error_line(result).startswith(
        f"error: --config: {tmp_path}/bad.py{reason}"
    )
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "w").exists()


def test_printed_config_loads_back_as_the_same_config(tmp_path):
    printed = _run(
        "train.py",
        "--config=configs/shapes.py:runlocal",
        "--config.train.num_steps=7",
        "--nms=while_loop",
        "--print_config",
    )
    assert printed.returncode == 0, printed.stderr[-2000:]
    config = json.loads(printed.stdout)
    assert config["train"]["num_steps"] == 7
    assert config["model"]["rpn"]["nms_backend"] == "while_loop"
    (tmp_path / "my.json").write_text(printed.stdout)
    again = _run("train.py", f"--config={tmp_path}/my.json", "--print_config")
    assert again.stdout == printed.stdout
    assert not (ROOT / "workdirs" / "my").exists()  # printing writes nothing
    # eval.py prints the workdir's config.json with its overrides.
    (tmp_path / "config.json").write_text(printed.stdout)
    evaluated = _run(
        "eval.py",
        f"--workdir={tmp_path}",
        "--config.eval.batch_size=3",
        "--print_config",
    )
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert json.loads(evaluated.stdout) == {
        **config,
        "eval": {**config["eval"], "batch_size": 3},
    }


@pytest.mark.parametrize("script", ["train.py", "eval.py"])
def test_unknown_field_with_explicit_config(script, tmp_path):
    line = _error_line(
        _run(
            script,
            f"--workdir={tmp_path}",
            "--config=configs/shapes.py:runlocal",
            "--config.train.num_stepz=3",
        )
    )
    assert line == (
        "error: --config.train.num_stepz=3: 'num_stepz' is not "
        "a config field; did you mean 'train.num_steps'?"
    )


def test_train_zero_log_every_writes_nothing(tmp_path):
    line = _error_line(
        _run(
            "train.py",
            "--config=configs/shapes.py:runlocal",
            f"--workdir={tmp_path}/run",
            "--config.train.log_every=0",
        )
    )
    assert line.startswith("error: config.train.log_every=0: must be >= 1")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("workdir", ["file", "file/run"])
def test_train_workdir_that_is_a_file(tmp_path, workdir):
    (tmp_path / "file").write_text("")
    line = _error_line(_run("train.py", f"--workdir={tmp_path}/{workdir}"))
    assert line == (
        f"error: --workdir={tmp_path}/{workdir}: {tmp_path}/file is a file, "
        "not a folder; name a folder to write into"
    )


def test_train_unusable_data_root_names_the_path(tmp_path):
    (tmp_path / "file").write_text("")
    line = _error_line(
        _run(
            "train.py",
            "--config=configs/shapes.py:runlocal",
            f"--workdir={tmp_path}/run",
            f"--config.data.root={tmp_path}/file/shapes",
        )
    )
    assert line.startswith(f"error: {tmp_path}/file/shapes")
    assert line.endswith(": Not a directory")
    assert not (tmp_path / "run" / "config.json").exists()


def test_train_missing_dataset(tmp_path):
    line = _error_line(
        _run(
            "train.py",
            f"--workdir={tmp_path}/run",
            "--config.data.source=coco_json",
            f"--config.data.root={tmp_path}/coco",
        )
    )
    assert line == (
        f"error: config.data.root='{tmp_path}/coco': no such folder; a COCO "
        "folder holds annotations/instances_<split>.json with the images in "
        "<split>/ (or <split>/_annotations.coco.json beside them, as a "
        "Roboflow COCO export does); see docs/coco.md"
    )
    assert not (tmp_path / "run").exists()  # not even an empty checkpoints/


def test_eval_on_a_missing_workdir_names_the_folder(tmp_path):
    line = _error_line(_run("eval.py", f"--workdir={tmp_path}/gone"))
    assert line == (
        f"error: --workdir={tmp_path}/gone: no such folder; give the workdir "
        "of a train.py run"
    )
    assert not (tmp_path / "gone").exists()


def test_eval_without_checkpoint_or_config(tmp_path):
    line = _error_line(_run("eval.py", f"--workdir={tmp_path}"))
    assert line == (
        f"error: {tmp_path}/config.json: no config.json here; "
        "pass --config=... or a workdir written by train.py"
    )
    line = _error_line(
        _run(
            "eval.py",
            f"--workdir={tmp_path}",
            "--config=configs/shapes.py:runlocal",
        )
    )
    assert line.startswith(
        f"error: {tmp_path}/checkpoints: no checkpoint to evaluate"
    )
    assert not (tmp_path / "checkpoints").exists()  # eval only reads
    line = _error_line(
        _run(
            "eval.py",
            f"--workdir={tmp_path}",
            "--config=configs/shapes.py:runlocal",
            "--step=7",
        )
    )
    assert line == (
        f"error: --step=7: {tmp_path}/checkpoints keeps no checkpoint "
        "(train first, or check --workdir)"
    )
    line = _error_line(
        _run(
            "eval.py",
            f"--workdir={tmp_path}",
            "--config=configs/shapes.py:runlocal",
            "--max_images=-5",
        )
    )
    assert line == "error: --max_images=-5: must be >= 0 (0: the whole split)"


# Two CPU devices; programs compiled without backend optimisation, since
# these runs take a few steps and compiling dominates them.
_TWO_DEVICES = {
    **os.environ,
    "XLA_FLAGS": (
        f"--xla_force_host_platform_device_count=2 {cpu_compiles.FLAG}"
    ),
}


def _check_host_nms_run(
    run: pathlib.Path, result: subprocess.CompletedProcess
) -> None:
    """The 2-device deterministic run trained, evaluated and reported the
    host NMS; the deterministic flag joined the XLA_FLAGS already set."""
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Data parallel over 2 cpu devices" in result.stderr
    lines = [
        json.loads(line)
        for line in (run / "metrics.jsonl").read_text().splitlines()
    ]
    assert [line["step"] for line in lines] == [2, 2]  # train, then eval
    assert lines[-1]["eval"] and "AP" in lines[-1]["bbox"]
    assert lines[0]["nms_backend"].startswith("rpn=cpu,detection=auto")
    assert lines[0]["host_roundtrips_per_step"] == 1
    assert lines[0]["deterministic"] is True
    assert (
        json.loads((run / "config.json").read_text())["train"]["deterministic"]
        is True
    )
    assert (
        "train_step: 1 host round-trip(s) per call:\n"
        "  - host callback `pure_callback` at rpn/nms/pure_callback"
        in result.stderr
    )
    summary = json.loads((run / "eval_val.json").read_text())
    assert summary["host_roundtrips_per_predict"] == 1  # rpn/nms only
    assert summary["deterministic"] is True


# The default suite holds each promise more cheaply: the strict refusals in
# process (test_train_lib.py test_strict_device_*), two-device training
# (test_multihost.py, test_sync_batch_norm.py) and a damaged checkpoint's
# line (test_train_lib.py test_no_intact_checkpoint_is_one_clear_error).
@pytest.mark.slow
def test_train_on_two_devices_then_strict_rerun_writes_nothing(tmp_path):
    # One training run (its checks in _check_host_nms_run) serves both
    # parts. The RPN NMS runs on the host; the detections keep the default
    # device backend, so its kernel also runs under the 2-device mesh.
    common = [
        "--config=configs/shapes.py:runlocal",
        f"--workdir={tmp_path}/run",
        f"--config.data.root={tmp_path}/shapes",
    ]
    result = _run(
        "train.py",
        *common,
        "--config.train.num_steps=2",
        "--config.model.rpn.nms_backend=cpu",
        "--config.train.deterministic=True",
        env=_TWO_DEVICES,
    )
    _check_host_nms_run(tmp_path / "run", result)
    saved = (tmp_path / "run" / "config.json").read_text()
    line = _error_line(
        _run(
            "train.py",
            *common,
            "--config.train.num_steps=3",
            "--nms=cpu",
            "--strict_device",
            env=_TWO_DEVICES,
        )
    )
    assert line.startswith(
        "error: predict is not device-only: host "
        "callback `pure_callback` at rpn/nms"
    )
    assert "--nms=pallas" in line
    # The refused run wrote nothing: eval.py still reads the trained run's
    # config, and no step ran.
    assert (tmp_path / "run" / "config.json").read_text() == saved
    assert (
        len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 2
    )
    # Its only checkpoint, damaged, is one line from eval.py.
    checkpoint_faults.remove_metadata(tmp_path / "run" / "checkpoints", 2)
    line = _error_line(_run("eval.py", f"--workdir={tmp_path}/run"))
    assert line == (
        f"error: {tmp_path}/run/checkpoints: no intact "
        "checkpoint; damaged: 2 (default/_METADATA is missing)"
    )
