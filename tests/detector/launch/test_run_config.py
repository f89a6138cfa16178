"""detector/launch/run_config.py: config.json as eval.py's config file, and
absolute paths in the config train.py stores."""

import os
import pathlib
import sys

import pytest
from absl import flags
from ml_collections import config_flags

from detector import config as config_lib
from detector.launch import run_config


def _write_config(workdir: pathlib.Path, root: str) -> pathlib.Path:
    config = config_lib.base_config()
    config.data.root = root
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "config.json"
    path.write_text(config.to_json_best_effort(indent=2))
    return path


def _parse(argv: list[str], monkeypatch):
    """eval.py's flags (--workdir, --config) parsed from command line `argv`
    the way eval.py parses them; returns the config."""
    monkeypatch.setattr(sys, "argv", argv)  # where config_flags finds overrides
    values = flags.FlagValues()
    flags.DEFINE_string("workdir", None, "", flag_values=values)
    holder = config_flags.DEFINE_config_file(
        "config", None, "", flag_values=values, lock_config=True
    )
    values(run_config.workdir_config_argv(argv))
    return holder.value


def test_without_config_the_workdir_config_json_takes_overrides(
    tmp_path, monkeypatch
):
    _write_config(tmp_path / "w", "/data/shapes")
    config = _parse(
        [
            "eval.py",
            f"--workdir={tmp_path}/w",
            "--config.data.root=/new/place",
            "--config.eval.batch_size=4",
        ],
        monkeypatch,
    )
    assert config.data.root == "/new/place"
    assert config.eval.batch_size == 4
    assert config.model.backbone == config_lib.base_config().model.backbone


def test_a_json_config_flag_is_read_as_json_with_overrides(
    tmp_path, monkeypatch
):
    path = _write_config(tmp_path / "other", "/data/a")
    for form in (
        [f"--config={path}", "--config.data.root=/data/b"],
        ["--config", str(path), "--config.data.root=/data/b"],
    ):
        config = _parse(["eval.py", "--workdir=/unused", *form], monkeypatch)
        assert config.data.root == "/data/b"


def test_workdir_with_a_tilde_finds_its_config(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    _write_config(tmp_path / "w", "/data/shapes")
    config = _parse(["eval.py", "--workdir", "~/w"], monkeypatch)
    assert config.data.root == "/data/shapes"


def test_workdir_config_argv_leaves_python_configs_and_missing_workdir():
    for argv in (
        ["eval.py", "--workdir=w", "--config=configs/shapes.py:runlocal"],
        ["eval.py", "--config.data.root=/x"],
    ):
        assert run_config.workdir_config_argv(argv) == argv
    no_config = ["eval.py", "--workdir=/nowhere"]
    assert run_config.workdir_config_argv(no_config) == no_config
    assert run_config.workdir_config_argv(
        [*no_config, "--config.seed=1", "--", "-x"]
    )[1] == "--config=" + run_config.json_config_spec("/nowhere/config.json")


def test_missing_config_json_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="w/config.json: no config"):
        run_config.get_config(str(tmp_path / "w" / "config.json"))


def test_relative_paths_become_absolute_against_the_folder(tmp_path):
    config = config_lib.base_config()
    config.data.root = "data/shapes"
    config.model.backbone_init = "~/weights/r50.safetensors"
    config.model.init_checkpoint = ""
    config.data.tfds_data_dir = "gs://bucket/tfds"
    changed = run_config.absolute_paths(config, cwd=tmp_path)
    assert changed == ["data.root", "model.backbone_init"]
    assert config.data.root == str(tmp_path / "data" / "shapes")
    assert config.model.backbone_init == str(
        pathlib.Path.home() / "weights" / "r50.safetensors"
    )
    assert config.model.init_checkpoint == ""
    assert config.data.tfds_data_dir == "gs://bucket/tfds"
    assert run_config.absolute_paths(config, cwd="/elsewhere") == []


def test_check_workdir_names_a_missing_folder_or_a_file(tmp_path):
    with pytest.raises(ValueError) as missing:
        run_config.check_workdir(tmp_path / "gone")
    assert str(missing.value) == (
        f"--workdir={tmp_path}/gone: no such folder; give the workdir of a "
        "train.py run"
    )
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError) as file:
        run_config.check_workdir(tmp_path / "file")
    assert str(file.value) == (
        f"--workdir={tmp_path}/file: a file, not a folder; give the workdir "
        "of a train.py run"
    )
    run_config.check_workdir(tmp_path)  # a folder: fine


def test_check_workdir_that_is_written_to_must_be_writable(
    tmp_path, monkeypatch
):
    run_config.check_workdir(tmp_path, writes=True)
    monkeypatch.setattr("os.access", lambda path, mode: False)  # read-only
    run_config.check_workdir(tmp_path)  # reading only: fine
    with pytest.raises(ValueError, match=r"cannot write into"):
        run_config.check_workdir(tmp_path, writes=True)


def test_a_run_folder_that_is_a_file_is_refused(tmp_path):
    run_config.check_run_folders(tmp_path)  # none yet: a new run
    (tmp_path / "checkpoints").mkdir()
    run_config.check_run_folders(tmp_path)
    (tmp_path / "checkpoints").rmdir()
    (tmp_path / "checkpoints").write_text("")
    with pytest.raises(ValueError) as info:
        run_config.check_run_folders(tmp_path)
    assert str(info.value) == (
        f"--workdir={tmp_path}: {tmp_path}/checkpoints is a file, not the "
        "checkpoints folder a training run keeps there; move it away or "
        "choose another --workdir"
    )


def test_a_workdir_deleted_while_it_trained_is_noticed(tmp_path):
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / "config.json").write_text("{}")
    run_config.check_run_kept(workdir)
    (workdir / "config.json").unlink()
    workdir.rmdir()
    with pytest.raises(ValueError) as info:
        run_config.check_run_kept(workdir)
    assert str(info.value) == (
        f"--workdir={workdir}: {workdir}/config.json is gone: the workdir "
        "was deleted, moved or replaced while the run trained, and its "
        "checkpoints and metrics with it; train again into a workdir that "
        "stays"
    )


def test_a_workdir_replaced_while_it_trained_is_noticed(tmp_path):
    """Another folder at the path, config.json and all (another run's)."""
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / "config.json").write_text("{}")
    started = os.stat(workdir)
    run_config.check_run_kept(workdir, started)
    workdir.rename(tmp_path / "old")
    workdir.mkdir()
    (workdir / "config.json").write_text("{}")
    with pytest.raises(ValueError) as info:
        run_config.check_run_kept(workdir, started)
    assert str(info.value).startswith(
        f"--workdir={workdir}: {workdir} is another folder than the one the "
        "run began in: the workdir was deleted, moved or replaced while"
    )


def test_eval_without_workdir_says_it_is_required(capsys):
    holder = flags.FlagValues()
    workdir = flags.DEFINE_string("workdir", None, "", flag_values=holder)
    holder(["eval.py"])
    with pytest.raises(SystemExit) as info:
        run_config.load_workdir(workdir, None)
    assert str(info.value) == (
        "error: --workdir is required: the workdir of a train.py run, e.g. "
        "--workdir=workdirs/shapes"
    )
